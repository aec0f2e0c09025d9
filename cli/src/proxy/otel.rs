//! The OTLP/HTTP span exporter of the `otel` feature: a span per request, sent in
//! batches to an OpenTelemetry collector, configured by the standard `OTEL_*` variables.
//!
//! Written for the one kind of span the proxy makes, on the HTTP client the proxy
//! already has, so that the feature links no SDK: the payload is the OTLP
//! `ExportTraceServiceRequest`, as protobuf (`http/protobuf`, the default) or as its
//! JSON mapping (`http/json`).
//!
//! | variable | what it does |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the URL spans are posted to, as it is |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL; spans go to `/v1/traces` under it |
//! | `OTEL_TRACES_EXPORTER` | `otlp` exports (to `http://localhost:4318/v1/traces` without an endpoint), `none` does not; unset, spans are exported when an endpoint is set |
//! | `OTEL_SDK_DISABLED` | `true`: nothing is exported |
//! | `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` | `http/protobuf` (default) or `http/json`; `grpc` is refused |
//! | `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS` | `name=value,…` sent with every export (values percent-decoded) |
//! | `OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT` | ms an export may take, 10000 by default |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource: `service.name` (`idem-proxy` by default) and `key=value,…` |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `parentbased_always_on` (default), `always_on`, `always_off`, `traceidratio`, `parentbased_always_off`, `parentbased_traceidratio` with its ratio |
//!
//! A span is named by the method and, when a route of `--routes` took the request, its
//! pattern (`POST /payments/{id}/capture`); its attributes are the method, the path, the
//! status, `idem.answer` (executed, replayed, conflict, in_progress, unknown, …) and
//! `idem.key.sha256` (the key's SHA-256, never the key); a 5xx sets its status to error.
//! At most 4,096 spans wait for an export; past it new ones are dropped and counted on
//! stderr. Only `http://` endpoints: a collector beside the proxy (TLS is the
//! collector's to make onward).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{Mutex as AsyncMutex, Notify};

use super::trace::{Ended, TraceParent, to_hex};
use crate::exit::Failure;

/// The most spans that wait for an export; more are dropped.
const QUEUE: usize = 4096;
/// Spans that start an export at once, without waiting for the next tick.
const BATCH: usize = 512;
/// How often waiting spans are exported.
const EVERY: Duration = Duration::from_secs(1);

/// The wire form of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Protobuf,
    Json,
}

/// How spans are chosen for export.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sampler {
    /// Every trace, or none.
    Always(bool),
    /// Traces whose id falls under the ratio.
    Ratio(f64),
    /// The caller's choice when there is a caller; the inner sampler for a new trace.
    ParentBased(Root),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Root {
    Always(bool),
    Ratio(f64),
}

/// One request's span, open.
pub(super) struct OpenSpan {
    context: TraceParent,
    parent: Option<[u8; 8]>,
    start: u64,
}

impl OpenSpan {
    /// The span's own trace context: what the backend is sent.
    pub(super) fn context(&self) -> &TraceParent {
        &self.context
    }
}

/// A finished span, waiting for its export.
struct Span {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    start: u64,
    end: u64,
    attributes: Vec<(&'static str, Value)>,
    link: Option<TraceParent>,
    error: bool,
}

enum Value {
    Text(String),
    Int(i64),
}

/// Where and how spans go.
struct Destination {
    endpoint: Uri,
    protocol: Protocol,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    resource: Vec<(String, String)>,
}

/// The exporter: its queue, and the task that empties it.
pub(super) struct Exporter {
    destination: Arc<Destination>,
    sampler: Sampler,
    queue: Arc<Mutex<Vec<Span>>>,
    /// Held while a batch is being sent: the stop's flush waits for the one in flight.
    sending: Arc<AsyncMutex<()>>,
    wake: Arc<Notify>,
    dropped: Arc<AtomicU64>,
    client: Client<HttpConnector, Full<Bytes>>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The traces-specific variable, else the general one.
fn either(traces: &str, general: &str) -> Option<(String, String)> {
    var(traces)
        .map(|v| (traces.to_owned(), v))
        .or_else(|| var(general).map(|v| (general.to_owned(), v)))
}

impl Exporter {
    /// The exporter the environment configures, or `None` when it asks for none.
    pub(super) fn from_env() -> Result<Option<Exporter>, Failure> {
        let refuse =
            |name: &str, value: &str, rule: &str| Failure::usage(format!("{name}={value}: {rule}"));
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let traces_endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base = var("OTEL_EXPORTER_OTLP_ENDPOINT");
        match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            Some("none") => return Ok(None),
            Some("otlp") => {}
            Some(other) => {
                return Err(refuse(
                    "OTEL_TRACES_EXPORTER",
                    other,
                    "idem proxy exports otlp (over HTTP) or none",
                ));
            }
            None if traces_endpoint.is_none() && base.is_none() => return Ok(None),
            None => {}
        }
        let (name, endpoint) = match (traces_endpoint, base) {
            (Some(url), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url),
            (None, Some(base)) => (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("{}/v1/traces", base.trim_end_matches('/')),
            ),
            (None, None) => (
                "OTEL_TRACES_EXPORTER",
                "http://localhost:4318/v1/traces".to_owned(),
            ),
        };
        let endpoint: Uri = endpoint
            .trim()
            .parse()
            .map_err(|_| refuse(name, &endpoint, "not a URL"))?;
        if endpoint.scheme_str() != Some("http") || endpoint.authority().is_none() {
            return Err(refuse(
                name,
                &endpoint.to_string(),
                "needs http://HOST:PORT (a collector beside the proxy; https is not supported)",
            ));
        }
        let protocol = match either(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ) {
            None => Protocol::Protobuf,
            Some((_, v)) if v.trim() == "http/protobuf" => Protocol::Protobuf,
            Some((_, v)) if v.trim() == "http/json" => Protocol::Json,
            Some((name, v)) => {
                return Err(refuse(
                    &name,
                    &v,
                    "http/protobuf or http/json (grpc is not supported)",
                ));
            }
        };
        let mut headers = Vec::new();
        if let Some((name, list)) = either(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ) {
            for (key, value) in pairs(&list).map_err(|rule| refuse(&name, "…", rule))? {
                let key = HeaderName::from_bytes(key.as_bytes())
                    .map_err(|_| refuse(&name, &key, "not an HTTP header name"))?;
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| refuse(&name, key.as_str(), "its value is not a header value"))?;
                headers.push((key, value));
            }
        }
        let timeout = match either(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ) {
            None => Duration::from_secs(10),
            Some((name, v)) => Duration::from_millis(
                v.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| refuse(&name, &v, "milliseconds, more than 0"))?,
            ),
        };
        let mut resource = match var("OTEL_RESOURCE_ATTRIBUTES") {
            Some(list) => {
                pairs(&list).map_err(|rule| refuse("OTEL_RESOURCE_ATTRIBUTES", &list, rule))?
            }
            None => Vec::new(),
        };
        let service = var("OTEL_SERVICE_NAME")
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "idem-proxy".to_owned());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".to_owned(), service));
        let sampler = sampler()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Some(Exporter {
            destination: Arc::new(Destination {
                endpoint,
                protocol,
                headers,
                timeout,
                resource,
            }),
            sampler,
            queue: Arc::default(),
            sending: Arc::default(),
            wake: Arc::default(),
            dropped: Arc::default(),
            client: Client::builder(TokioExecutor::new()).build(connector),
        }))
    }

    /// Starts the task that exports waiting spans every second, or sooner when a batch
    /// is full. Called on the runtime.
    pub(super) fn start(&self) {
        let (queue, sending, wake, dropped) = (
            Arc::clone(&self.queue),
            Arc::clone(&self.sending),
            Arc::clone(&self.wake),
            Arc::clone(&self.dropped),
        );
        let (destination, client) = (Arc::clone(&self.destination), self.client.clone());
        eprintln!(
            "idem proxy: exporting spans to {} ({})",
            destination.endpoint,
            match destination.protocol {
                Protocol::Protobuf => "http/protobuf",
                Protocol::Json => "http/json",
            }
        );
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::select! {
                    () = tokio::time::sleep(EVERY) => {}
                    () = wake.notified() => {}
                }
                let sent = sending.lock().await;
                let spans = std::mem::take(&mut *lock(&queue));
                let lost = dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    eprintln!("idem proxy: {lost} spans dropped, {QUEUE} waiting already");
                }
                if spans.is_empty() {
                    continue;
                }
                match send(&client, &destination, &spans).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        eprintln!(
                            "idem proxy: spans not exported to {}: {e}",
                            destination.endpoint
                        );
                    }
                    Err(_) => {}
                }
                drop(sent);
            }
        });
    }

    /// Exports the spans still waiting, after the batch being sent, if any: within
    /// the export timeout in all.
    pub(super) async fn flush(&self) {
        let timeout = self.destination.timeout;
        let flushed = async {
            let _sent = self.sending.lock().await;
            let spans = std::mem::take(&mut *lock(&self.queue));
            if spans.is_empty() {
                return;
            }
            if let Err(e) = send(&self.client, &self.destination, &spans).await {
                eprintln!(
                    "idem proxy: {} spans not exported at the stop: {e}",
                    spans.len()
                );
            }
        };
        if tokio::time::timeout(timeout, flushed).await.is_err() {
            eprintln!(
                "idem proxy: spans not exported at the stop: no answer within {} ms",
                timeout.as_millis()
            );
        }
    }

    /// Opens a request's span when the sampler takes it: a child of `parent`, else the
    /// root of a new trace.
    pub(super) fn open(&self, parent: Option<TraceParent>) -> Option<OpenSpan> {
        let trace_id = parent.map_or_else(
            || {
                let mut id = [0; 16];
                fill_nonzero(&mut id);
                id
            },
            |p| p.trace_id,
        );
        let sampled = match self.sampler {
            Sampler::Always(on) => on,
            Sampler::Ratio(ratio) => under_ratio(&trace_id, ratio),
            Sampler::ParentBased(root) => match (parent, root) {
                (Some(parent), _) => parent.sampled(),
                (None, Root::Always(on)) => on,
                (None, Root::Ratio(ratio)) => under_ratio(&trace_id, ratio),
            },
        };
        if !sampled {
            return None;
        }
        let mut span_id = [0; 8];
        fill_nonzero(&mut span_id);
        Some(OpenSpan {
            context: TraceParent {
                trace_id,
                span_id,
                // Sampled, and the caller's other flags kept (a random trace id's).
                flags: parent.map_or(0, |p| p.flags) | 1,
            },
            parent: parent.map(|p| p.span_id),
            start: unix_nanos(),
        })
    }

    /// Closes a span and queues it for export.
    pub(super) fn close(&self, span: OpenSpan, ended: &Ended<'_>) {
        let name = match ended.route {
            Some(route) => format!("{} {route}", ended.method),
            None => ended.method.to_owned(),
        };
        let mut attributes = vec![
            ("http.request.method", Value::Text(ended.method.to_owned())),
            ("url.path", Value::Text(ended.path.to_owned())),
            (
                "http.response.status_code",
                Value::Int(i64::from(ended.status)),
            ),
            ("idem.answer", Value::Text(ended.answer.to_owned())),
        ];
        if let Some(route) = ended.route {
            attributes.push(("http.route", Value::Text(route.to_owned())));
        }
        if let Some(key) = ended.key {
            let hash = idem_core::Fingerprint::of_bytes(key.as_bytes()).to_hex();
            attributes.push(("idem.key.sha256", Value::Text(hash)));
        }
        let span = Span {
            trace_id: span.context.trace_id,
            span_id: span.context.span_id,
            parent: span.parent,
            name,
            start: span.start,
            end: unix_nanos(),
            attributes,
            link: ended.ran_in,
            error: ended.status >= 500,
        };
        let mut queue = lock(&self.queue);
        if queue.len() >= QUEUE {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.push(span);
        if queue.len() >= BATCH {
            self.wake.notify_one();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The sampler `OTEL_TRACES_SAMPLER` (and `_ARG`) names.
fn sampler() -> Result<Sampler, Failure> {
    let ratio = || -> Result<f64, Failure> {
        match var("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    Failure::usage(format!("OTEL_TRACES_SAMPLER_ARG={v}: a ratio from 0 to 1"))
                }),
        }
    };
    Ok(match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
        None | Some("parentbased_always_on") => Sampler::ParentBased(Root::Always(true)),
        Some("parentbased_always_off") => Sampler::ParentBased(Root::Always(false)),
        Some("parentbased_traceidratio") => Sampler::ParentBased(Root::Ratio(ratio()?)),
        Some("always_on") => Sampler::Always(true),
        Some("always_off") => Sampler::Always(false),
        Some("traceidratio") => Sampler::Ratio(ratio()?),
        Some(other) => {
            return Err(Failure::usage(format!(
                "OTEL_TRACES_SAMPLER={other}: one of parentbased_always_on, parentbased_always_off, parentbased_traceidratio, always_on, always_off, traceidratio"
            )));
        }
    })
}

/// Whether a trace id falls under `ratio`: its last 8 bytes, as a number, below that
/// share of their range (the same choice for the same trace everywhere).
fn under_ratio(trace_id: &[u8; 16], ratio: f64) -> bool {
    let mut low = [0; 8];
    low.copy_from_slice(&trace_id[8..]);
    // The ratio of 2^64 as an integer: precise enough for a sampler.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let bound = (ratio * u64::MAX as f64) as u64;
    ratio >= 1.0 || u64::from_be_bytes(low) < bound
}

fn fill_nonzero(bytes: &mut [u8]) {
    loop {
        for byte in bytes.iter_mut() {
            *byte = fastrand::u8(..);
        }
        if bytes.iter().any(|b| *b != 0) {
            return;
        }
    }
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `key=value,…`, values percent-decoded (the OpenTelemetry environment's lists).
fn pairs(list: &str) -> Result<Vec<(String, String)>, &'static str> {
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (key, value) = item
                .split_once('=')
                .ok_or("each item is key=value, separated by commas")?;
            let key = key.trim();
            if key.is_empty() {
                return Err("a key is empty");
            }
            Ok((key.to_owned(), percent_decoded(value.trim())?))
        })
        .collect()
}

fn percent_decoded(text: &str) -> Result<String, &'static str> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let pair = text
                .get(i + 1..i + 3)
                .filter(|pair| pair.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or("a '%' without two hex digits")?;
            out.push(u8::from_str_radix(pair, 16).map_err(|_| "a '%' without two hex digits")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a value is not UTF-8 once decoded")
}

/// Posts `spans` to the destination, within its timeout.
async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    destination: &Destination,
    spans: &[Span],
) -> Result<(), String> {
    let (body, content_type) = match destination.protocol {
        Protocol::Protobuf => (protobuf(destination, spans), "application/x-protobuf"),
        Protocol::Json => (json(destination, spans).into_bytes(), "application/json"),
    };
    let mut request = Request::post(destination.endpoint.clone())
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    for (name, value) in &destination.headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    let exported = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        // Read the answer whole, so that the connection can serve the next export.
        let _ = response.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    };
    tokio::time::timeout(destination.timeout, exported)
        .await
        .map_err(|_| format!("no answer within {} ms", destination.timeout.as_millis()))?
}

/// The scope every span is in: the proxy, at this version.
const SCOPE: &str = "idem-proxy";

/// The OTLP JSON mapping of an `ExportTraceServiceRequest`.
fn json(destination: &Destination, spans: &[Span]) -> String {
    use serde_json::{Value as Json, json};
    let text = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    let spans: Vec<Json> = spans
        .iter()
        .map(|span| {
            let attributes: Vec<Json> = span
                .attributes
                .iter()
                .map(|(k, v)| match v {
                    Value::Text(v) => text(k, v),
                    Value::Int(v) => json!({"key": k, "value": {"intValue": v.to_string()}}),
                })
                .collect();
            let mut out = json!({
                "traceId": to_hex(&span.trace_id),
                "spanId": to_hex(&span.span_id),
                "name": span.name,
                "kind": 2,
                "startTimeUnixNano": span.start.to_string(),
                "endTimeUnixNano": span.end.to_string(),
                "attributes": attributes,
                "status": {"code": if span.error { 2 } else { 0 }},
            });
            if let Some(parent) = span.parent {
                out["parentSpanId"] = Json::from(to_hex(&parent));
            }
            if let Some(link) = span.link {
                out["links"] = json!([{
                    "traceId": to_hex(&link.trace_id),
                    "spanId": to_hex(&link.span_id),
                }]);
            }
            out
        })
        .collect();
    let resource: Vec<Json> = destination
        .resource
        .iter()
        .map(|(k, v)| text(k, v))
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": resource},
        "scopeSpans": [{
            "scope": {"name": SCOPE, "version": env!("CARGO_PKG_VERSION")},
            "spans": spans,
        }],
    }]})
    .to_string()
}

/// The protobuf encoding of an `ExportTraceServiceRequest` (opentelemetry-proto's
/// `collector/trace/v1` and `trace/v1`; field numbers as there).
fn protobuf(destination: &Destination, spans: &[Span]) -> Vec<u8> {
    let mut out = Vec::new();
    message(&mut out, 1, |resource_spans| {
        message(resource_spans, 1, |resource| {
            for (k, v) in &destination.resource {
                message(resource, 1, |kv| key_value(kv, k, &Value::Text(v.clone())));
            }
        });
        message(resource_spans, 2, |scope_spans| {
            message(scope_spans, 1, |scope| {
                bytes(scope, 1, SCOPE.as_bytes());
                bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for span in spans {
                message(scope_spans, 2, |out| encode_span(out, span));
            }
        });
    });
    out
}

fn encode_span(out: &mut Vec<u8>, span: &Span) {
    bytes(out, 1, &span.trace_id);
    bytes(out, 2, &span.span_id);
    if let Some(parent) = span.parent {
        bytes(out, 4, &parent);
    }
    bytes(out, 5, span.name.as_bytes());
    // kind: SPAN_KIND_SERVER.
    tag(out, 6, 0);
    varint(out, 2);
    // start and end: fixed64.
    for (field, nanos) in [(7, span.start), (8, span.end)] {
        tag(out, field, 1);
        out.extend_from_slice(&nanos.to_le_bytes());
    }
    for (k, v) in &span.attributes {
        message(out, 9, |kv| key_value(kv, k, v));
    }
    if let Some(link) = span.link {
        message(out, 13, |out| {
            bytes(out, 1, &link.trace_id);
            bytes(out, 2, &link.span_id);
        });
    }
    // status: code 2 (error) for a 5xx, else left unset.
    if span.error {
        message(out, 15, |status| {
            tag(status, 3, 0);
            varint(status, 2);
        });
    }
}

fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    bytes(out, 1, key.as_bytes());
    message(out, 2, |any| match value {
        Value::Text(text) => bytes(any, 1, text.as_bytes()),
        Value::Int(n) => {
            tag(any, 3, 0);
            #[allow(clippy::cast_sign_loss)]
            varint(any, *n as u64);
        }
    });
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    out.push(value as u8);
}

fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    tag(out, field, 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn message(out: &mut Vec<u8>, field: u32, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    bytes(out, field, &inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_lists_are_read_as_the_specifications_write_them() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        tag(&mut out, 15, 2);
        assert_eq!(out, [0x7a]);
        assert_eq!(
            pairs("api-key=s%3Dcret, tenant = shop ,").unwrap(),
            [
                ("api-key".to_owned(), "s=cret".to_owned()),
                ("tenant".to_owned(), "shop".to_owned())
            ]
        );
        assert!(pairs("novalue").is_err());
        assert!(pairs("k=%zz").is_err());
        assert!(pairs("k=%+5").is_err());
        assert!(under_ratio(&[0xff; 16], 1.0));
        assert!(!under_ratio(&[0xff; 16], 0.5));
        assert!(under_ratio(&[0; 16], 0.5));
        assert!(!under_ratio(&[0; 16], 0.0));
    }
}
