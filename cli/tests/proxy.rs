//! `idem proxy` as a process, in front of a small upstream that counts its executions:
//! the curl scenario (`proxy/curl-scenario.sh`, with real curl), 64 concurrent requests
//! under one key, bad input, an upstream that is down or hangs, and a clean stop on
//! SIGTERM with a request in flight. Everything binds 127.0.0.1.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::Idem;

/// What the upstream did, by path and `Idempotency-Key`.
#[derive(Default)]
struct Counts {
    executions: HashMap<String, usize>,
}

/// A small HTTP/1.1 backend: `POST /orders` counts one execution per key and answers
/// 201 with the order number after `work`; `/hang` counts and then never answers (until
/// the proxy hangs up, at most 10 s). One connection per request (`Connection: close`).
struct Upstream {
    address: SocketAddr,
    counts: Arc<Mutex<Counts>>,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Upstream {
    fn start(work: Duration) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(Counts::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (counts, stop) = (Arc::clone(&counts), Arc::clone(&stop));
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let counts = Arc::clone(&counts);
                    thread::spawn(move || serve_upstream(stream, &counts, work));
                }
            })
        };
        Upstream {
            address,
            counts,
            stop,
            accept: Some(accept),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn executions(&self, key: &str) -> usize {
        let counts = self.counts.lock().unwrap();
        counts.executions.get(key).copied().unwrap_or(0)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve_upstream(stream: TcpStream, counts: &Mutex<Counts>, work: Duration) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(&stream);
    let Some((head, _body)) = read_message(&mut reader) else {
        return;
    };
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or("/")
        .to_owned();
    let key = header_of(&head, "idempotency-key").unwrap_or_default();
    let number = {
        let mut counts = counts.lock().unwrap();
        let n = counts.executions.entry(key).or_default();
        *n += 1;
        *n
    };
    if path == "/hang" {
        // Until the proxy gives up and closes the connection (or 10 s pass).
        let _ = reader.read_to_end(&mut Vec::new());
        return;
    }
    thread::sleep(work);
    let body = format!("{{\"order\":{number},\"path\":\"{path}\"}}");
    let answer = format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nLocation: /orders/{number}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&stream).write_all(answer.as_bytes());
}

/// One HTTP message from `reader`: the head (through the blank line) and the body by
/// `Content-Length`.
fn read_message(reader: &mut impl BufRead) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let length: usize = header_of(&head, "content-length").map_or(0, |v| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// A running `idem proxy`, killed on drop if it did not stop by itself.
struct Proxy {
    child: Child,
    address: SocketAddr,
}

impl Proxy {
    fn start(idem: &Idem, upstream: &str, flags: &[&str]) -> Proxy {
        let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream];
        args.extend_from_slice(flags);
        let mut child = idem
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("listening http://")
            .unwrap_or_else(|| panic!("first line {line:?}"))
            .parse()
            .unwrap();
        Proxy { child, address }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sends SIGTERM and waits for the exit status.
    fn terminate(mut self) -> (i32, String) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status.code().unwrap_or(-1), stderr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An answer: status, head, body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        header_of(&self.head, name)
    }

    /// The `idempotency` code of a problem document, checking its content type.
    fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{} {}",
            self.status,
            self.body
        );
        let json: serde_json::Value = serde_json::from_str(&self.body).unwrap();
        assert_eq!(json["status"], self.status);
        json["idempotency"].as_str().unwrap().to_owned()
    }
}

/// `POST path` with `headers` and `body` to `address`, on a connection of its own.
fn post(address: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    (&stream).write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(&stream);
    let (head, body) = read_message(&mut reader).expect("an answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Answer {
        status,
        head,
        body: String::from_utf8(body).unwrap(),
    }
}

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
fn an_upstream_that_is_down_releases_one_that_hangs_is_unknown() {
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
    assert_eq!(proxy.terminate().0, 0);
    let record = idem.run(&["--json", "get", "shop", "POST /hang", "h"]);
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
