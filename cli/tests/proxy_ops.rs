//! Running `idem proxy` in production: it needs a tenant source, answers a load
//! balancer's health check and a Prometheus scrape, logs each request, and outlives
//! clients that send half a header or a body that never ends, then stops within its
//! drain bound.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::Idem;
use common::http::{Proxy, Upstream, get, post};

const KEYED: [(&str, &str); 1] = [("Idempotency-Key", "\"k-1\"")];

#[test]
fn a_proxy_without_a_tenant_source_does_not_start() {
    let idem = Idem::new();
    idem.run(&["proxy", "--upstream", "http://127.0.0.1:9"])
        .code(2)
        .one_error_line(&["--tenant or --tenant-header"]);
    assert!(!idem.db.exists(), "nothing was created");
}

/// The backend's own `/metrics` and `/healthz` are reached through the public listener,
/// as before the proxy stood in front; the proxy's are on the admin listener alone, which
/// answers 503 from the moment the proxy stops, while its request in flight finishes.
#[test]
fn the_backends_paths_are_public_and_the_proxys_own_are_on_the_admin_listener() {
    let upstream = Upstream::start(Duration::from_millis(1_500));
    let idem = Idem::new();
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    assert_ne!(proxy.admin, proxy.address);
    for path in ["/metrics", "/healthz", "/metrics?x=1", "/healthz?full=1"] {
        let public = get(proxy.address, path);
        assert_eq!(public.status, 201, "the backend answered {path}");
        assert!(
            public.body.contains(&format!("\"path\":\"{path}\"")),
            "{path}: {}",
            public.body
        );
    }
    assert_eq!(upstream.executions(""), 4, "four GETs reached the backend");

    let health = get(proxy.admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ready\n"));
    let text = get(proxy.admin, "/metrics").body;
    assert_eq!(
        metric(&text, "idem_proxy_answers_total{answer=\"passed_through\"}"),
        4.0
    );
    let other = get(proxy.admin, "/orders");
    assert_eq!(other.status, 404);
    assert!(
        other.body.contains("GET /healthz and GET /metrics"),
        "{}",
        other.body
    );
    let posted = post(proxy.admin, "/metrics", &[], "{}");
    assert_eq!(
        (posted.status, posted.header("allow").as_deref()),
        (405, Some("GET, HEAD"))
    );
    let keyed = post(proxy.admin, "/orders", &KEYED, r#"{"item":"tea"}"#);
    assert_eq!(
        keyed.status, 404,
        "nothing is forwarded from the admin listener"
    );
    assert_eq!(upstream.executions("\"k-1\""), 0);

    // A stop with a request in flight: health says so at once, the request finishes.
    let address = proxy.address;
    let slow = thread::spawn(move || post(address, "/orders", &KEYED, r#"{"item":"tea"}"#));
    reached(&upstream, "\"k-1\"");
    let pid = proxy.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopping = Instant::now();
    loop {
        let health = get(proxy.admin, "/healthz");
        if health.status == 503 {
            assert!(health.body.starts_with("stopping"), "{}", health.body);
            break;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(1),
            "still {} {:?} after the stop",
            health.status,
            health.body
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        slow.join().unwrap().status,
        201,
        "the request in flight finished"
    );
    let (code, stderr) = proxy.terminate_waited();
    assert_eq!(code, 0, "{stderr}");
}

/// A metric's value in Prometheus text, by its name with labels.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn health_metrics_and_the_access_log() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let log = idem.path("access.log");
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--access-log", log.to_str().unwrap()],
    );
    let health = get(proxy.admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ready\n"));

    let first = post(proxy.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    let again = post(proxy.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    let other = post(proxy.address, "/orders", &KEYED, r#"{"item":"cake"}"#);
    let plain = post(proxy.address, "/orders", &[], r#"{"item":"pie"}"#);
    assert_eq!(
        (first.status, again.status, other.status, plain.status),
        (201, 201, 422, 201)
    );

    let scraped = get(proxy.admin, "/metrics");
    assert_eq!(scraped.status, 200);
    let text = &scraped.body;
    for (answer, count) in [
        ("executed", 1.0),
        ("replayed", 1.0),
        ("conflict", 1.0),
        ("passed_through", 1.0),
    ] {
        let name = format!("idem_proxy_answers_total{{answer=\"{answer}\"}}");
        assert_eq!(metric(text, &name), count, "{name}");
    }
    assert_eq!(metric(text, "idem_proxy_request_seconds_count"), 4.0);
    assert_eq!(metric(text, "idem_proxy_upstream_seconds_count"), 2.0);
    assert_eq!(
        metric(text, "idem_proxy_store_seconds_count{call=\"begin\"}"),
        3.0,
        "the keyed requests began; the plain one did not"
    );
    assert_eq!(metric(text, "idem_proxy_unknown_keys"), 0.0);
    // The executed key's claim and outcome each waited for a commit of the file, as a
    // group commit of one input; the replay and the conflict were answered from the
    // replay cache. A second scrape shows the same counts: they follow the store's.
    for text in [text, &get(proxy.admin, "/metrics").body] {
        let commits = [
            "idem_proxy_store_commits_total",
            "idem_proxy_store_batches_total",
            "idem_proxy_store_batched_inputs_total",
        ]
        .map(|name| metric(text, name));
        assert_eq!(commits, [2.0, 2.0, 2.0], "commits, batches, batched inputs");
    }

    let (code, _) = proxy.terminate();
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let answers: Vec<_> = lines
        .iter()
        .map(|l| (l["status"].as_u64().unwrap(), l["answer"].as_str().unwrap()))
        .collect();
    assert_eq!(
        answers,
        [
            (201, "executed"),
            (201, "replayed"),
            (422, "conflict"),
            (201, "passed_through")
        ],
        "one line per request, the proxy's own endpoints not among them"
    );
    assert_eq!(lines[0]["key"], "\"k-1\"");
    assert_eq!(lines[0]["path"], "/orders");
}

/// The soft limit of open files of this process, from /proc.
fn open_files_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(1024)
}

/// Opens `count` connections to `address` that each send half a request head, from
/// several threads at once.
fn half_heads(address: SocketAddr, count: usize) -> Vec<TcpStream> {
    let opened = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let opened = Arc::clone(&opened);
            thread::spawn(move || {
                for _ in (t..count).step_by(16) {
                    let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_secs(5))
                    else {
                        continue;
                    };
                    let _ = (&stream).write_all(
                        b"POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"h\"\r\n",
                    );
                    opened.lock().unwrap().push(stream);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(opened).unwrap().into_inner().unwrap()
}

/// True once the proxy closed `stream` (it reads the end, or a reset), waiting at most
/// `within`.
fn closed_by_peer(stream: &TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0; 1];
    loop {
        match (&*stream).read(&mut byte) {
            Ok(0) => return true,
            // hyper may answer a timed-out head with a 408 before it closes.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn half_heads_and_endless_bodies_starve_nobody_and_end() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &[
            "--tenant",
            "shop",
            "--header-timeout",
            "2s",
            "--body-timeout",
            "1s",
        ],
    );
    // 10,000 where this process may open that many sockets.
    let flood = 10_000.min(open_files_limit().saturating_sub(500));
    let started = Instant::now();
    let address = proxy.address;
    let opening = thread::spawn(move || half_heads(address, flood));

    // A body that never ends: 408 after the body timeout, and nothing claimed.
    let endless = TcpStream::connect(proxy.address).unwrap();
    (&endless)
        .write_all(b"POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"e\"\r\nContent-Length: 100\r\n\r\n{\"ite")
        .unwrap();

    // A legitimate request in the middle of the flood is served.
    thread::sleep(Duration::from_secs(1));
    let sent = Instant::now();
    let legit = post(proxy.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    assert_eq!(legit.status, 201, "{}", legit.body);
    println!(
        "the legitimate request, sent while the flood was opening, took {:?}",
        sent.elapsed()
    );
    let heads = opening.join().unwrap();
    println!(
        "{} half heads opened in {:?} (of {flood} tried)",
        heads.len(),
        started.elapsed()
    );
    assert!(
        heads.len() >= flood / 2,
        "only {} connections opened",
        heads.len()
    );

    endless
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    let _ = (&endless).read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("body-timeout"), "{answer}");

    // Every half head ends: none lives past the header timeout by much.
    let open = heads
        .iter()
        .filter(|s| !closed_by_peer(s, Duration::from_secs(30)))
        .count();
    assert_eq!(open, 0, "{open} of {} half heads still open", heads.len());
    assert_eq!(
        upstream.executions("\"e\""),
        0,
        "the endless body never ran"
    );
    assert_eq!(upstream.executions("\"h\""), 0);

    // Nothing was claimed for the endless body: the same key runs now.
    let retry = post(
        proxy.address,
        "/orders",
        &[("Idempotency-Key", "\"e\"")],
        r#"{"item":"tea"}"#,
    );
    assert_eq!(retry.status, 201);
}

#[test]
fn at_the_connection_bound_a_request_waits_for_a_slot_and_is_served() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &[
            "--tenant",
            "shop",
            "--header-timeout",
            "1s",
            "--max-connections",
            "8",
        ],
    );
    let heads = half_heads(proxy.address, 8);
    assert_eq!(heads.len(), 8);
    let legit = post(proxy.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    assert_eq!(legit.status, 201);
}

#[test]
fn sigterm_stops_within_the_drain_bound_with_a_half_head_open() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let mut proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &[
            "--tenant",
            "shop",
            "--header-timeout",
            "60s",
            "--drain-timeout",
            "2s",
        ],
    );
    let _half = half_heads(proxy.address, 1);
    let pid = proxy.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let sent = Instant::now();
    let mut exited = None;
    while sent.elapsed() < Duration::from_secs(20) {
        if let Some(status) = proxy.child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let status = exited.expect("the proxy still runs 20 s after SIGTERM");
    println!("stopped {:?} after SIGTERM with {status}", sent.elapsed());
}

/// SIGTERM with 1,000 half-sent heads and one slow keyed request open: the silent
/// connections are closed at once, the request gets its answer, the proxy exits 0 well
/// within `--drain-timeout`, and after a restart a retry of the request is replayed.
#[test]
fn sigterm_closes_silent_connections_answers_the_request_in_flight_and_exits_0() {
    let upstream = Upstream::start(Duration::from_millis(1_500));
    let idem = Idem::new();
    let flags = [
        "--tenant",
        "shop",
        "--header-timeout",
        "60s",
        "--drain-timeout",
        "30s",
        "--max-connections",
        "2000",
    ];
    let proxy = Proxy::start(&idem, &upstream.url(), &flags);
    let heads = half_heads(proxy.address, 1_000);
    assert_eq!(heads.len(), 1_000, "every half head connected");
    let address = proxy.address;
    let slow = thread::spawn(move || post(address, "/orders", &KEYED, r#"{"item":"tea"}"#));
    // The keyed request reached the upstream: it is in flight.
    reached(&upstream, "\"k-1\"");
    let stopping = Instant::now();
    let (code, stderr) = proxy.terminate();
    let took = stopping.elapsed();
    assert_eq!(code, 0, "exit status; stderr: {stderr}");
    assert!(
        took < Duration::from_secs(10),
        "stopped in {took:?}, far within the 30 s drain: it waited for the request alone"
    );
    let answer = slow.join().unwrap();
    assert_eq!(answer.status, 201, "{}", answer.body);
    for head in &heads {
        assert!(
            closed_by_peer(head, Duration::from_secs(5)),
            "a half head still open after the stop"
        );
    }
    let restarted = Proxy::start(&idem, &upstream.url(), &flags);
    let retry = post(restarted.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(
        retry.body, answer.body,
        "the replay is the answer, byte for byte"
    );
    assert_eq!(upstream.executions("\"k-1\""), 1, "it ran once");
}

/// A stop that reaches `--drain-timeout` with a claimed request still running exits 1
/// and says how many keys stay claimed; with none, only unkeyed answers cut, it exits 0.
#[test]
fn a_stop_past_the_drain_bound_fails_only_when_a_claim_is_left() {
    let upstream = Upstream::start(Duration::from_secs(8));
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &[
            "--tenant",
            "shop",
            "--drain-timeout",
            "1s",
            "--upstream-timeout",
            "30s",
        ],
    );
    let address = proxy.address;
    let _slow = thread::spawn(move || {
        let _ = common::http::try_post(address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    });
    reached(&upstream, "\"k-1\"");
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("1 claimed requests still running after 1000 ms (--drain-timeout)"),
        "{stderr}"
    );

    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &[
            "--tenant",
            "shop",
            "--drain-timeout",
            "1s",
            "--upstream-timeout",
            "30s",
        ],
    );
    let address = proxy.address;
    let _unkeyed = thread::spawn(move || {
        let _ = common::http::try_post(address, "/orders", &[], r#"{"item":"cake"}"#);
    });
    reached(&upstream, "");
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("no key was left claimed"), "{stderr}");
}

/// `--lease` and the watchdog: an upstream that works three times the lease keeps its
/// key (a duplicate meanwhile is in progress, never unknown), and the request runs once;
/// a proxy killed mid-request extends nothing, and after the lease a retry through a
/// restarted proxy finds the key Unknown, as before.
#[test]
fn a_request_slower_than_the_lease_keeps_its_key_until_its_proxy_dies() {
    let upstream = Upstream::start(Duration::from_millis(3_000));
    let idem = Idem::new();
    let flags = ["--tenant", "shop", "--lease", "1s"];
    let mut proxy = Proxy::start(&idem, &upstream.url(), &flags);
    let address = proxy.address;
    let slow = thread::spawn(move || post(address, "/orders", &KEYED, r#"{"item":"tea"}"#));
    reached(&upstream, "\"k-1\"");
    // Twice the lease into the upstream's work.
    thread::sleep(Duration::from_millis(2_000));
    let duplicate = post(proxy.address, "/orders", &KEYED, r#"{"item":"tea"}"#);
    assert_eq!(duplicate.status, 409, "{}", duplicate.body);
    assert_eq!(duplicate.problem(), "in-progress");
    let answer = slow.join().unwrap();
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(upstream.executions("\"k-1\""), 1, "it ran once");

    let second = [("Idempotency-Key", "\"k-2\"")];
    let _cut = thread::spawn(move || {
        let _ = common::http::try_post(address, "/orders", &second, r#"{"item":"cake"}"#);
    });
    reached(&upstream, "\"k-2\"");
    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    let killed = Instant::now();
    let restarted = Proxy::start(&idem, &upstream.url(), &flags);
    thread::sleep(Duration::from_millis(1_200).saturating_sub(killed.elapsed()));
    let retry = post(restarted.address, "/orders", &second, r#"{"item":"cake"}"#);
    assert_eq!(retry.status, 503, "{}", retry.body);
    assert_eq!(retry.problem(), "unknown");
    assert_eq!(upstream.executions("\"k-2\""), 1, "not run again");
}

/// Waits until the request under `key` (an `Idempotency-Key` value, or "" for none) has
/// reached `upstream`: it is in flight.
fn reached(upstream: &Upstream, key: &str) {
    let sent = Instant::now();
    while upstream.executions(key) == 0 {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the request never reached the upstream"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// With --wait-in-flight, duplicates of a request the upstream is still working on wait
/// for its answer and get the replay; the metrics count the waits by how they ended.
#[test]
fn duplicates_wait_for_the_running_request_and_get_its_replay() {
    let upstream = Upstream::start(Duration::from_millis(1_500));
    let idem = Idem::new();
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--wait-in-flight", "10s"],
    );
    let address = proxy.address;
    let first = thread::spawn(move || post(address, "/orders", &KEYED, r#"{"item":"tea"}"#));
    reached(&upstream, "\"k-1\"");
    let duplicates: Vec<_> = (0..5)
        .map(|_| thread::spawn(move || post(address, "/orders", &KEYED, r#"{"item":"tea"}"#)))
        .collect();
    let first = first.join().unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    for duplicate in duplicates {
        let duplicate = duplicate.join().unwrap();
        assert_eq!(
            (duplicate.status, &duplicate.body),
            (first.status, &first.body)
        );
        assert_eq!(
            duplicate.header("idempotent-replayed").as_deref(),
            Some("true")
        );
    }
    assert_eq!(upstream.executions("\"k-1\""), 1, "it ran once");
    let text = get(proxy.admin, "/metrics").body;
    assert_eq!(
        metric(&text, "idem_proxy_waits_total{ended=\"settled\"}"),
        5.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "idem_proxy_answers_total{answer=\"replayed\"}"),
        5.0
    );
}

/// 200 keyed requests whose clients hang up once they sent them: each runs, and each is
/// logged and counted, though nobody reads its answer.
#[test]
fn requests_whose_clients_hang_up_are_logged_and_counted() {
    let upstream = Upstream::start(Duration::from_millis(1_000));
    let idem = Idem::new();
    let log = idem.path("access.log");
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--access-log", log.to_str().unwrap()],
    );
    let mut sent = Vec::new();
    for k in 0..200 {
        let body = r#"{"item":"tea"}"#;
        let request = format!(
            "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"gone-{k}\"\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = TcpStream::connect(proxy.address).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        sent.push(stream);
    }
    // Every request reached the upstream, which works on it: the clients hang up.
    let reaching = Instant::now();
    while upstream.counts.lock().unwrap().executions.len() < 200 {
        assert!(
            reaching.elapsed() < Duration::from_secs(20),
            "the requests never reached the upstream"
        );
        thread::sleep(Duration::from_millis(10));
    }
    drop(sent);
    let started = Instant::now();
    loop {
        let lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        if lines >= 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{lines} lines logged of 200"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 200);
    let executed = text.lines().filter(|l| l.contains("\"executed\"")).count();
    assert_eq!(executed, 200, "every request ran and is logged as executed");
    let metrics = get(proxy.admin, "/metrics").body;
    assert_eq!(
        metric(&metrics, "idem_proxy_answers_total{answer=\"executed\"}"),
        200.0
    );
    let ran: usize = upstream.counts.lock().unwrap().executions.values().sum();
    assert_eq!(ran, 200);
}

/// Two routes with their own fingerprints: one leaves a client's `timestamp` out, the
/// other counts the whole body. A retry of each with a new timestamp is a replay on the
/// first and a 422 on the second; a path that matches no route takes the flags' rules.
/// A routes file with an error is refused with its line, before anything starts.
#[test]
fn routes_have_rules_of_their_own_and_a_bad_file_is_refused_by_line() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let routes = idem.file(
        "routes.toml",
        br#"# The proxy's routes.
[[route]]
path = "/orders"
methods = ["POST"]
fingerprint.ignore = ["/timestamp"]
kept_headers = ["content-type"]

[[route]]
path = "/payments/{id}/capture"
require_key = true

[[route]]
path = "/quotes/*"
fingerprint.only = ["/item"]
"#,
    );
    let check = idem.run(&["proxy", "--check-config", &routes]);
    check.code(0);
    assert_eq!(
        check.stdout,
        format!(
            "{routes}: 3 routes, valid\n  POST /orders: the fingerprint without /timestamp; replays headers content-type\n  POST|PATCH /payments/{{id}}/capture: a key required\n  POST|PATCH /quotes/*: the fingerprint of /item alone\n"
        )
    );
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--routes", &routes],
    );
    let order = |key: &str, path: &str, at: &str| {
        let key = format!("\"{key}\"");
        post(
            proxy.address,
            path,
            &[("Idempotency-Key", key.as_str())],
            &format!(r#"{{"item":"tea","timestamp":"{at}"}}"#),
        )
    };
    let first = order("o-1", "/orders", "12:00:00");
    let retry = order("o-1", "/orders", "12:00:05");
    assert_eq!((first.status, retry.status), (201, 201));
    assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(retry.body, first.body);
    assert!(
        first.header("location").is_some(),
        "the first answer is the upstream's"
    );
    assert_eq!(
        retry.header("location"),
        None,
        "the route keeps content-type alone"
    );

    let path = "/payments/p-1/capture";
    let first = order("p-1", path, "12:00:00");
    let retry = order("p-1", path, "12:00:05");
    assert_eq!(first.status, 201);
    assert_eq!((retry.status, retry.problem().as_str()), (422, "conflict"));
    // Another spelling of the route's path takes its rules too.
    for path in [
        path,
        "/payments//p-2/capture/",
        "/payments/%70-2/capture",
        "/x/../payments/p-2/capture",
    ] {
        let keyless = post(proxy.address, path, &[], "{}");
        assert_eq!(keyless.status, 400, "{path}: the route requires a key");
    }
    // Only the item counts: a new timestamp is the same request, another item is not.
    let first = order("q-1", "/quotes/eu/tea", "12:00:00");
    let retry = order("q-1", "/quotes/eu/tea", "12:00:05");
    assert_eq!((first.status, retry.status), (201, 201));
    assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
    let other = post(
        proxy.address,
        "/quotes/eu/tea",
        &[("Idempotency-Key", "\"q-1\"")],
        r#"{"item":"cake","timestamp":"12:00:00"}"#,
    );
    assert_eq!(other.status, 422);
    // No route: the flags' rules (the whole body counts, no key required).
    let first = order("x-1", "/refunds", "12:00:00");
    let retry = order("x-1", "/refunds", "12:00:05");
    assert_eq!((first.status, retry.status), (201, 422));
    assert_eq!(post(proxy.address, "/refunds", &[], "{}").status, 201);
    assert_eq!(upstream.executions("\"o-1\""), 1);
    assert_eq!(upstream.executions("\"p-1\""), 1);

    let bad = idem.file(
        "bad.toml",
        b"[[route]]\npath = \"/orders\"\nfingerprint.ignore = [\"timestamp\"]\n",
    );
    for args in [
        vec!["proxy", "--check-config", bad.as_str()],
        vec![
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--tenant",
            "shop",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--routes",
            bad.as_str(),
        ],
    ] {
        idem.run(&args).code(2).one_error_line(&[
            &format!("{bad}:3: fingerprint.ignore"),
            "\"timestamp\" is not a JSON Pointer",
        ]);
    }
}

/// Built without the `otel` feature (the default), the binary links no span exporter:
/// not one of the variables that configure it is in it (tests/otel.rs checks the
/// other build).
#[cfg(not(feature = "otel"))]
#[test]
fn without_the_otel_feature_no_exporter_is_linked() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_idem")).unwrap();
    for needle in [
        &b"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"[..],
        b"OTEL_EXPORTER_OTLP_PROTOCOL",
        b"exporting spans to",
    ] {
        assert!(
            !binary.windows(needle.len()).any(|w| w == needle),
            "{}",
            String::from_utf8_lossy(needle)
        );
    }
}

/// A route's retention: its answers are forgotten after it (410), while the answers of
/// requests under the flags' rules are still replayed.
#[test]
fn a_routes_retention_is_its_own() {
    let upstream = Upstream::start(Duration::ZERO);
    let idem = Idem::new();
    let routes = idem.file(
        "routes.toml",
        b"[[route]]\npath = \"/quotes\"\nretention = \"1s\"\nlease = \"2m\"\n",
    );
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--routes", &routes],
    );
    for path in ["/quotes", "/orders"] {
        assert_eq!(post(proxy.address, path, &KEYED, "{}").status, 201);
    }
    thread::sleep(Duration::from_millis(1_300));
    let quote = post(proxy.address, "/quotes", &KEYED, "{}");
    assert_eq!((quote.status, quote.problem().as_str()), (410, "forgotten"));
    let order = post(proxy.address, "/orders", &KEYED, "{}");
    assert_eq!(order.status, 201);
    assert_eq!(order.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(upstream.executions("\"k-1\""), 2, "each ran once");
}
