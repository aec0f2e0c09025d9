//! `idem proxy` as a process, in front of a small upstream that counts its executions:
//! the curl scenario (`proxy/curl-scenario.sh`, with real curl), 64 concurrent requests
//! under one key, bad input, an upstream that is down or hangs, and a clean stop on
//! SIGTERM with a request in flight. Everything binds 127.0.0.1.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::Idem;
use common::http::{Answer, Proxy, Upstream, post};

fn curl_present() -> bool {
    Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_curl_scenario() {
    // A scenario that does not run is no result: without curl this test fails.
    assert!(
        curl_present(),
        "curl is not installed: scripts/test-all.sh installs it (apt-get install curl)"
    );
    let upstream = Upstream::start(Duration::ZERO);
    let (a, b) = (Idem::new(), Idem::new());
    let default = Proxy::start(&a, &upstream.url(), &["--tenant", "shop"]);
    let ok200 = Proxy::start(
        &b,
        &upstream.url(),
        &["--tenant", "shop", "--replay-status", "200"],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy/curl-scenario.sh");
    let output = Command::new("bash")
        .args([script, &default.url(), &ok200.url()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("curl scenario passed"), "{stdout}");
    assert_eq!(upstream.executions("\"order-1\""), 1);
    assert_eq!(upstream.executions("\"order-2\""), 1);
}

#[test]
fn sixty_four_concurrent_requests_under_one_key_run_once() {
    let upstream = Upstream::start(Duration::from_millis(300));
    let idem = Idem::new();
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    let barrier = Arc::new(Barrier::new(64));
    let answers: Vec<Answer> = (0..64)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let address = proxy.address;
            thread::spawn(move || {
                barrier.wait();
                post(
                    address,
                    "/orders",
                    &[("Idempotency-Key", "\"same\"")],
                    "{\"item\":\"tea\"}",
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let first: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == 201 && a.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(first.len(), 1, "one answer from the upstream itself");
    for answer in &answers {
        match answer.status {
            201 => assert_eq!(answer.body, first[0].body),
            409 => {
                assert_eq!(answer.problem(), "in-progress");
                assert!(answer.header("retry-after").is_some(), "{}", answer.head);
            }
            other => panic!("status {other}: {}", answer.body),
        }
    }
    assert_eq!(upstream.executions("\"same\""), 1);
}

#[test]
fn bad_input_is_answered_with_a_problem_and_stores_nothing() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--require-key", "--body-limit", "64"],
    );
    let at = proxy.address;
    let body = "{\"item\":\"tea\"}";
    type Case<'c> = (&'c [(&'c str, &'c str)], &'c str, u16, &'c str);
    let cases: [Case; 5] = [
        (&[], body, 400, "key-missing"),
        (&[("Idempotency-Key", "\"open")], body, 400, "key-malformed"),
        (
            &[("Idempotency-Key", "\"a\""), ("Idempotency-Key", "\"a\"")],
            body,
            400,
            "key-repeated",
        ),
        (
            &[("Idempotency-Key", "\"big\"")],
            &"x".repeat(65),
            413,
            "body-too-large",
        ),
        (
            &[("Idempotency-Key", "\"nj\"")],
            "{\"a\":",
            400,
            "body-malformed",
        ),
    ];
    for (headers, body, status, code) in cases {
        let answer = post(at, "/orders", headers, body);
        assert_eq!(
            (answer.status, answer.problem().as_str()),
            (status, code),
            "{}",
            answer.body
        );
    }
    let long = format!("\"{}\"", "k".repeat(256));
    let answer = post(at, "/orders", &[("Idempotency-Key", &long)], body);
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (400, "key-malformed")
    );
    assert!(
        answer.body.contains("256 bytes, at most 255"),
        "{}",
        answer.body
    );
    assert_eq!(
        upstream.counts.lock().unwrap().executions.len(),
        0,
        "nothing forwarded"
    );
    let (code, _) = proxy.terminate();
    assert_eq!(code, 0);
    let list = idem.run(&["list"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert_eq!(list.stdout.trim(), "no records");
}

#[test]
fn an_upstream_that_is_down_releases_one_that_hangs_or_stalls_is_unknown() {
    // A port with nobody listening: bound, then closed.
    let down = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let idem = Idem::new();
    let proxy = Proxy::start(&idem, &format!("http://{down}"), &["--tenant", "shop"]);
    let answer = post(
        proxy.address,
        "/orders",
        &[("Idempotency-Key", "\"d\"")],
        "{}",
    );
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (502, "upstream-unreachable")
    );
    assert_eq!(proxy.terminate().0, 0);
    idem.run(&["get", "shop", "POST /orders", "d"]).code(7);

    let upstream = Upstream::start(Duration::ZERO);
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--upstream-timeout", "500ms"],
    );
    let answer = post(
        proxy.address,
        "/hang",
        &[("Idempotency-Key", "\"h\"")],
        "{}",
    );
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (504, "upstream-timeout")
    );
    let retry = post(
        proxy.address,
        "/hang",
        &[("Idempotency-Key", "\"h\"")],
        "{}",
    );
    assert_eq!((retry.status, retry.problem().as_str()), (503, "unknown"));
    assert_eq!(
        upstream.executions("\"h\""),
        1,
        "an unknown key is not sent again"
    );
    // One that sends its head and stalls in its body: the same, within the same bound.
    let started = std::time::Instant::now();
    let answer = post(
        proxy.address,
        "/stall",
        &[("Idempotency-Key", "\"s\"")],
        "{}",
    );
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (504, "upstream-timeout"),
        "{}",
        answer.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut at the deadline"
    );
    assert_eq!(upstream.executions("\"s\""), 1);
    assert_eq!(proxy.terminate().0, 0);
    let record = idem.run(&["--json", "get", "shop", "POST /hang", "h"]);
    assert_eq!(record.code(0).json()["state"], "unknown");
    let record = idem.run(&["--json", "get", "shop", "POST /stall", "s"]);
    assert_eq!(record.code(0).json()["state"], "unknown");
}

#[test]
fn sigterm_finishes_the_request_in_flight_and_exits_cleanly() {
    let upstream = Upstream::start(Duration::from_millis(500));
    let idem = Idem::new();
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    let address = proxy.address;
    let in_flight =
        thread::spawn(move || post(address, "/orders", &[("Idempotency-Key", "\"t\"")], "{}"));
    // Wait for the upstream to have the request, then stop the proxy.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while upstream.executions("\"t\"") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never arrived"
        );
        thread::yield_now();
    }
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(in_flight.join().unwrap().status, 201);
    let record = idem.run(&["--json", "get", "shop", "POST /orders", "t"]);
    assert_eq!(record.code(0).json()["state"], "succeeded");

    // A request whose client hung up once the upstream had it, and no connection left
    // open: the proxy still waits for its answer and settles its key before it exits.
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    let mut left = std::net::TcpStream::connect(proxy.address).unwrap();
    write!(
        left,
        "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"left\"\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    .unwrap();
    while upstream.executions("\"left\"") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never arrived"
        );
        thread::yield_now();
    }
    drop(left);
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    let record = idem.run(&["--json", "get", "shop", "POST /orders", "left"]);
    assert_eq!(record.code(0).json()["state"], "succeeded");
}

#[test]
fn a_client_that_hangs_up_right_after_sending_leaves_no_key_stranded() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    // Each client sends a whole keyed POST and hangs up 0-4 ms later, as a browser's
    // timeout abort, going offline or a reload does.
    let clients: Vec<_> = (0..40)
        .map(|n| {
            let address = proxy.address;
            thread::spawn(move || {
                let stream = TcpStream::connect(address).unwrap();
                let body = "{\"item\":\"tea\"}";
                let request = format!(
                    "POST /orders HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nIdempotency-Key: \"gone-{n}\"\r\n\r\n{body}",
                    body.len()
                );
                (&stream).write_all(request.as_bytes()).unwrap();
                thread::sleep(Duration::from_millis(n % 5));
                drop(stream);
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // Every key ends released (nothing sent upstream) or forwarded and settled; none
    // stays Pending. Forwarded requests settle as soon as the upstream answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let states = loop {
        let list = idem.run(&["--json", "list"]);
        let states: HashMap<String, String> = list
            .code(0)
            .json_lines()
            .iter()
            .map(|r| {
                let key = r["key"].as_str().unwrap().to_owned();
                (key, r["state"].as_str().unwrap().to_owned())
            })
            .collect();
        if !states.values().any(|state| state == "pending") {
            break states;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "keys still pending after 20 s: {states:?}"
        );
        thread::yield_now();
    };
    for n in 0..40 {
        let key = format!("gone-{n}");
        let executions = upstream.executions(&format!("\"{key}\""));
        match states.get(&key).map(String::as_str) {
            None => assert_eq!(executions, 0, "{key}: released, yet sent upstream"),
            Some("succeeded") => assert_eq!(executions, 1, "{key}: settled"),
            Some(other) => panic!("{key}: {other}, after {executions} executions"),
        }
    }
    assert_eq!(proxy.terminate().0, 0);
}

/// Sends `head` (a request head without its blank line) and no body, on a connection of
/// its own; the answer.
fn send_head(address: std::net::SocketAddr, head: &str) -> Answer {
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    (&stream)
        .write_all(format!("{head}\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut reader = std::io::BufReader::new(&stream);
    let (head, body) = common::http::read_message(&mut reader).expect("an answer");
    Answer {
        status: head.split(' ').nth(1).unwrap().parse().unwrap(),
        head,
        body: String::from_utf8(body).unwrap(),
    }
}

/// With `--cors-origin`, a page of that origin gets its preflight answered by the proxy
/// (the idempotency key allowed) and can read every answer: the upstream's, a replay's,
/// the proxy's own 422; a page of any other origin gets no CORS header, and its
/// preflight goes to the upstream as any request does.
#[test]
fn a_named_origin_may_call_the_proxy_across_origins_and_no_other() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--cors-origin", "https://shop.example"],
    );
    let preflight = send_head(
        proxy.address,
        "OPTIONS /orders HTTP/1.1\r\nOrigin: https://shop.example\r\n\
         Access-Control-Request-Method: POST\r\n\
         Access-Control-Request-Headers: content-type, idempotency-key",
    );
    assert_eq!(preflight.status, 204, "{}", preflight.head);
    assert_eq!(
        preflight.header("access-control-allow-origin").as_deref(),
        Some("https://shop.example")
    );
    assert!(
        preflight
            .header("access-control-allow-headers")
            .is_some_and(|h| h.contains("idempotency-key")),
        "{}",
        preflight.head
    );
    assert!(
        preflight
            .header("access-control-allow-methods")
            .is_some_and(|h| h.contains("POST"))
    );
    assert_eq!(
        upstream.executions(""),
        0,
        "the preflight is the proxy's own answer"
    );

    let from_shop = [
        ("Idempotency-Key", "\"c-1\""),
        ("Origin", "https://shop.example"),
    ];
    for (body, status, replayed) in [
        (r#"{"item":"tea"}"#, 201, None),
        (r#"{"item":"tea"}"#, 201, Some("true")),
        (r#"{"item":"cake"}"#, 422, None),
    ] {
        let answer = post(proxy.address, "/orders", &from_shop, body);
        assert_eq!(answer.status, status, "{}", answer.body);
        assert_eq!(answer.header("idempotent-replayed").as_deref(), replayed);
        assert_eq!(
            answer.header("access-control-allow-origin").as_deref(),
            Some("https://shop.example"),
            "{status}"
        );
        let exposed = answer
            .header("access-control-expose-headers")
            .unwrap_or_default();
        assert!(
            exposed.contains("Retry-After") && exposed.contains("Idempotent-Replayed"),
            "{exposed}"
        );
    }
    assert_eq!(upstream.executions("\"c-1\""), 1);

    let from_elsewhere = [
        ("Idempotency-Key", "\"c-2\""),
        ("Origin", "https://evil.example"),
    ];
    let answer = post(
        proxy.address,
        "/orders",
        &from_elsewhere,
        r#"{"item":"tea"}"#,
    );
    assert_eq!(answer.status, 201);
    assert_eq!(answer.header("access-control-allow-origin"), None);
    let preflight = send_head(
        proxy.address,
        "OPTIONS /orders HTTP/1.1\r\nOrigin: https://evil.example\r\n\
         Access-Control-Request-Method: POST",
    );
    assert_eq!(preflight.header("access-control-allow-origin"), None);
    assert_eq!(upstream.executions(""), 1, "forwarded to the upstream");
}
