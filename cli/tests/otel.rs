//! `idem proxy` built with the `otel` feature: a span per request reaches an OTLP/HTTP
//! receiver this test runs, in the JSON mapping and in protobuf; the proxy's span sits
//! between the caller's and the backend's, a replay links to the span of the request
//! that ran, and the access log names the same ids.
#![cfg(feature = "otel")]

mod common;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::Idem;
use common::http::{Proxy, Upstream, header_of, post, read_message};
use serde_json::Value;

/// What an OTLP receiver was sent: each export's content type and body.
type Exports = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on a free loopback port: it keeps every export and answers
/// 200. Its thread ends with the test process.
fn receiver() -> (SocketAddr, Exports) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let exports = Exports::default();
    let kept = Arc::clone(&exports);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let kept = Arc::clone(&kept);
            thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                while let Some((head, body)) = read_message(&mut reader) {
                    assert!(head.starts_with("POST /v1/traces "), "{head}");
                    let kind = header_of(&head, "content-type").unwrap_or_default();
                    kept.lock().unwrap().push((kind, body));
                    let _ = (&stream).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    (address, exports)
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .map_or(&Value::Null, |a| &a["value"])
}

#[test]
fn spans_reach_an_otlp_receiver_and_a_replay_links_to_the_request_that_ran() {
    let (collector, exports) = receiver();
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let log = idem.path("access.log");
    let endpoint = format!("http://{collector}");
    let proxy = Proxy::start_with_env(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--access-log", log.to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "shop-proxy"),
        ],
    );
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let keyed = [
        ("Idempotency-Key", "\"k-1\""),
        ("traceparent", traceparent.as_str()),
    ];
    let first = post(proxy.address, "/orders", &keyed, r#"{"item":"tea"}"#);
    let replay = post(proxy.address, "/orders", &keyed[..1], r#"{"item":"tea"}"#);
    assert_eq!((first.status, replay.status), (201, 201));
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    for answer in [&first, &replay] {
        assert_eq!(
            answer.header("idem-trace"),
            None,
            "kept for the proxy alone"
        );
    }
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("exporting spans to"), "{stderr}");

    let exports = exports.lock().unwrap().clone();
    assert!(!exports.is_empty(), "nothing exported; stderr: {stderr}");
    let mut spans = Vec::new();
    for (kind, body) in &exports {
        assert_eq!(kind, "application/json");
        let export: Value = serde_json::from_slice(body).unwrap();
        let resource = &export["resourceSpans"][0];
        let service = &resource["resource"]["attributes"][0];
        assert_eq!(service["key"], "service.name");
        assert_eq!(service["value"]["stringValue"], "shop-proxy");
        for span in resource["scopeSpans"][0]["spans"].as_array().unwrap() {
            spans.push(span.clone());
        }
    }
    assert_eq!(spans.len(), 2, "one span a request: {spans:?}");
    let (ran, replayed) = (&spans[0], &spans[1]);
    // The request that ran: a child of the caller's span, the backend's parent.
    assert_eq!(ran["traceId"], TRACE);
    assert_eq!(ran["parentSpanId"], CALLER);
    assert_eq!(ran["name"], "POST");
    assert_eq!(ran["kind"], 2);
    assert_eq!(attribute(ran, "idem.answer")["stringValue"], "executed");
    assert_eq!(
        attribute(ran, "http.response.status_code")["intValue"],
        "201"
    );
    let ran_span = ran["spanId"].as_str().unwrap().to_owned();
    assert_ne!(ran_span, CALLER);
    let sent = upstream.counts.lock().unwrap().traceparents.clone();
    assert_eq!(
        sent,
        [("\"k-1\"".to_owned(), format!("00-{TRACE}-{ran_span}-01"))],
        "the backend's parent is the proxy's span"
    );
    // The replay: a trace of its own (it came without one), linked to the run.
    assert_eq!(
        attribute(replayed, "idem.answer")["stringValue"],
        "replayed"
    );
    assert_ne!(replayed["traceId"], TRACE);
    assert_eq!(replayed["parentSpanId"], Value::Null);
    assert_eq!(replayed["links"][0]["traceId"], TRACE);
    assert_eq!(replayed["links"][0]["spanId"], ran_span.as_str());
    // The key as a hash: the same for both, never the key.
    let hash = attribute(ran, "idem.key.sha256")["stringValue"]
        .as_str()
        .unwrap();
    assert_eq!(hash.len(), 64);
    assert_eq!(attribute(replayed, "idem.key.sha256")["stringValue"], hash);
    assert!(!String::from_utf8_lossy(&exports[0].1).contains("k-1"));

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines[0]["trace_id"], TRACE);
    assert_eq!(lines[0]["span_id"], ran_span.as_str());
    assert_eq!(lines[1]["trace_id"], replayed["traceId"]);
    assert_eq!(lines[1]["span_id"], replayed["spanId"]);
}

/// A caller that does not record its trace (flags 00): the proxy makes no span, sends
/// the caller's `traceparent` on as it came, and keeps no trace with the outcome, so the
/// replay's span links to nothing.
#[test]
fn an_unsampled_caller_gets_no_span_and_its_outcome_keeps_no_trace() {
    let (collector, exports) = receiver();
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let endpoint = format!("http://{collector}");
    let proxy = Proxy::start_with_env(
        &idem,
        &upstream.url(),
        &["--tenant", "shop"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    let unsampled = format!("00-{TRACE}-{CALLER}-00");
    let keyed = [
        ("Idempotency-Key", "\"k-1\""),
        ("traceparent", unsampled.as_str()),
    ];
    assert_eq!(post(proxy.address, "/orders", &keyed, "{}").status, 201);
    let replay = post(proxy.address, "/orders", &keyed[..1], "{}");
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    let sent = upstream.counts.lock().unwrap().traceparents.clone();
    assert_eq!(sent, [("\"k-1\"".to_owned(), unsampled.clone())]);
    let exports = exports.lock().unwrap().clone();
    let spans: Vec<Value> = exports
        .iter()
        .flat_map(|(_, body)| {
            let export: Value = serde_json::from_slice(body).unwrap();
            export["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    assert_eq!(spans.len(), 1, "the replay's alone: {spans:?}");
    assert_eq!(
        attribute(&spans[0], "idem.answer")["stringValue"],
        "replayed"
    );
    assert_eq!(spans[0]["links"], Value::Null, "nothing to link to");
}

/// The fields numbered `field` of a protobuf message, as raw bytes (length-delimited
/// ones) or the varint's value as little-endian bytes.
fn fields(message: &[u8], field: u64) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    let mut at = 0;
    let varint = |at: &mut usize| {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = message[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return value;
            }
        }
    };
    while at < message.len() {
        let key = varint(&mut at);
        let value = match key & 7 {
            0 => varint(&mut at).to_le_bytes().to_vec(),
            1 => {
                at += 8;
                message[at - 8..at].to_vec()
            }
            2 => {
                let len = usize::try_from(varint(&mut at)).unwrap();
                at += len;
                message[at - len..at].to_vec()
            }
            5 => {
                at += 4;
                message[at - 4..at].to_vec()
            }
            wire => panic!("wire type {wire}"),
        };
        if key >> 3 == field {
            found.push(value);
        }
    }
    found
}

/// The protobuf export (the default protocol), decoded by field number: request →
/// resource spans (1) → scope spans (2) → spans (2).
#[test]
fn the_default_protocol_is_protobuf() {
    let (collector, exports) = receiver();
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let endpoint = format!("http://{collector}/v1/traces");
    let proxy = Proxy::start_with_env(
        &idem,
        &upstream.url(),
        &["--tenant", "shop"],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)],
    );
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let keyed = [
        ("Idempotency-Key", "\"k-1\""),
        ("traceparent", traceparent.as_str()),
    ];
    assert_eq!(post(proxy.address, "/orders", &keyed, "{}").status, 201);
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    let exports = exports.lock().unwrap().clone();
    assert_eq!(exports.len(), 1, "{stderr}");
    let (kind, body) = &exports[0];
    assert_eq!(kind, "application/x-protobuf");
    let resource_spans = fields(body, 1);
    let scope_spans = fields(&resource_spans[0], 2);
    let spans = fields(&scope_spans[0], 2);
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&fields(span, 1)[0]), TRACE);
    assert_eq!(hex(&fields(span, 4)[0]), CALLER);
    assert_eq!(fields(span, 5)[0], b"POST");
    let answer = fields(span, 9)
        .into_iter()
        .find(|kv| fields(kv, 1)[0] == b"idem.answer")
        .expect("idem.answer");
    assert_eq!(fields(&fields(&answer, 2)[0], 1)[0], b"executed");
}

/// A setting the exporter cannot follow stops the proxy before it listens, by name.
#[test]
fn an_exporter_setting_it_cannot_follow_is_refused_by_name() {
    let idem = Idem::new();
    for (name, value, rule) in [
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "http/protobuf or http/json",
        ),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://collector:4318",
            "needs http://",
        ),
        (
            "OTEL_TRACES_SAMPLER",
            "sometimes",
            "one of parentbased_always_on",
        ),
    ] {
        let mut command = idem.command(&[
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--tenant",
            "shop",
        ]);
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        command.env(name, value);
        let run = common::Run::of(command.output().unwrap());
        run.code(2).one_error_line(&[name, rule]);
    }
}

/// This binary has the exporter; the one built without the feature has none
/// (proxy_ops.rs checks that one).
#[test]
fn the_binary_links_the_exporter() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_idem")).unwrap();
    let needle = b"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    assert!(binary.windows(needle.len()).any(|w| w == needle));
}
