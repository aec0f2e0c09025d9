//! A small test server for the browser end-to-end test of idem-wasm (`wasm/e2e`): static
//! files plus `POST /orders` with the IETF Idempotency-Key semantics, on idem-store.
//!
//! ```text
//! cargo run -p idem-tests --example e2e-server -- --root SITE --db FILE [--work-ms 1500] [--lifetime-s 120]
//! ```
//!
//! Binds 127.0.0.1 on a free port and prints `listening http://127.0.0.1:PORT` as its first
//! line. `POST /orders` needs an `Idempotency-Key` header (400 without, or malformed): an
//! RFC 8941 String (`"…"`, as draft-ietf-httpapi-idempotency-key-header asks), or a bare
//! token as older clients send; one key per request. The key parsing, the fingerprint
//! (method, path and the body's RFC 8785 canonical form) and every answer that is not the
//! handler's own are the shared mapping of `idem_core::http` (DESIGN §10): problem
//! documents for 400, 409, 422 and 503 (an outcome that is unknown). A new key is claimed in the store, the order is "executed" (counted,
//! then `--work-ms` of work), and the outcome (201 and a JSON body) settles the record
//! before the answer is written. While the first request runs, a retry gets 409 with
//! `Retry-After` (the lease end, or the work's length if sooner); after it, the stored
//! outcome with `Idempotent-Replayed: true`; the key with another payload gets 422.
//!
//! `GET /stats` tells the test what happened (executions, every attempt's key, header and
//! status); `POST /shutdown` ends the process, and so does `--lifetime-s` running out.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use idem_core::http;
use idem_store::{Decision, RecordId, Store, Verdict, now};
use serde_json::{Value, json};

fn main() {
    if let Err(message) = run(std::env::args().skip(1).collect()) {
        eprintln!("e2e-server: {message}");
        std::process::exit(2);
    }
}

const MAX_CONNECTIONS: usize = 64;
const MAX_HEADERS: usize = 16 * 1024;
const MAX_BODY: usize = 64 * 1024;

struct Options {
    root: PathBuf,
    db: PathBuf,
    work: Duration,
    lifetime: Duration,
}

#[derive(Default)]
struct Log {
    /// Keys of `POST /orders` requests, in order of arrival.
    received: Vec<String>,
    /// Their `Idempotency-Key` headers as sent.
    headers: Vec<String>,
    /// Every answer to `POST /orders`.
    answered: Vec<Value>,
    /// Orders executed, by key.
    executed: Vec<String>,
}

struct Server {
    options: Options,
    store: Store,
    log: Mutex<Log>,
    connections: AtomicUsize,
}

struct Request {
    method: String,
    path: String,
    /// Every `Idempotency-Key` field as sent.
    keys: Vec<String>,
    body: Vec<u8>,
}

struct Response {
    status: u16,
    content_type: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    /// An answer of the shared mapping (`idem_core::http`): a problem document or a
    /// replay, with its headers.
    fn from_answer(answer: http::Answer) -> Response {
        let mut response = Response {
            status: answer.status,
            content_type: "application/json".into(),
            headers: Vec::new(),
            body: answer.body,
        };
        for (name, value) in answer.headers {
            let value = String::from_utf8_lossy(&value).into_owned();
            if name.eq_ignore_ascii_case("content-type") {
                response.content_type = value;
            } else {
                response.headers.push((name, value));
            }
        }
        response
    }

    fn problem(problem: &http::Problem) -> Response {
        Response::from_answer(problem.answer())
    }

    fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            content_type: "application/json".into(),
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let options = parse(args)?;
    let store = Store::open(&options.db).map_err(|e| format!("--db: {e}"))?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let lifetime = options.lifetime;
    let server = Arc::new(Server {
        options,
        store,
        log: Mutex::new(Log::default()),
        connections: AtomicUsize::new(0),
    });
    println!("listening http://127.0.0.1:{port}");
    thread::spawn(move || {
        thread::sleep(lifetime);
        eprintln!("e2e-server: lifetime over, exiting");
        std::process::exit(0);
    });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let server = Arc::clone(&server);
        if server.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            server.connections.fetch_sub(1, Ordering::AcqRel);
            continue; // dropped: the client sees a reset and retries
        }
        thread::spawn(move || {
            server.connection(stream);
            server.connections.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut root = None;
    let mut db = None;
    let mut work_ms = 1_500;
    let mut lifetime_s = 120;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag}: missing value"));
        match flag.as_str() {
            "--root" => root = Some(PathBuf::from(value()?)),
            "--db" => db = Some(PathBuf::from(value()?)),
            "--work-ms" => work_ms = value()?.parse().map_err(|e| format!("--work-ms: {e}"))?,
            "--lifetime-s" => {
                lifetime_s = value()?.parse().map_err(|e| format!("--lifetime-s: {e}"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Options {
        root: root.ok_or("--root: missing")?,
        db: db.ok_or("--db: missing")?,
        work: Duration::from_millis(work_ms),
        lifetime: Duration::from_secs(lifetime_s),
    })
}

impl Server {
    fn connection(&self, stream: TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        let mut reader = BufReader::new(&stream);
        let response = match read_request(&mut reader) {
            Ok(request) => self.handle(&request),
            Err(message) => Response::text(400, message),
        };
        // The browser may have gone away (offline): the answer is lost, as in life.
        let _ = write_response(&stream, &response);
    }

    fn handle(&self, request: &Request) -> Response {
        match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/orders") => self.order(request),
            ("GET", "/stats") => self.stats(),
            ("POST", "/shutdown") => {
                thread::spawn(|| {
                    thread::sleep(Duration::from_millis(50));
                    std::process::exit(0);
                });
                Response::text(200, "bye")
            }
            ("GET", path) => self.file(path),
            _ => Response::text(405, "method not allowed"),
        }
    }

    fn stats(&self) -> Response {
        let log = self.lock();
        Response::json(
            200,
            &json!({
                "received": log.received,
                "headers": log.headers,
                "answered": log.answered,
                "executed": log.executed,
            }),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn order(&self, request: &Request) -> Response {
        let key = match http::key_from_fields(request.keys.iter().map(String::as_bytes)) {
            Ok(Some(key)) => key,
            Ok(None) => return Response::problem(&http::Problem::key_missing()),
            Err(e) => return Response::problem(&http::Problem::key_malformed(&e)),
        };
        let header = request.keys.join(", ");
        {
            let mut log = self.lock();
            log.received.push(key.clone());
            log.headers.push(header);
        }
        let response = self.decide(&key, request);
        let replayed = response
            .headers
            .iter()
            .any(|(name, _)| name == http::IDEMPOTENT_REPLAYED);
        self.lock().answered.push(json!({
            "key": key,
            "status": response.status,
            "replayed": replayed,
        }));
        response
    }

    fn decide(&self, key: &str, request: &Request) -> Response {
        let id = match RecordId::new("shop", "orders", key) {
            Ok(id) => id,
            Err(e) => {
                return Response::problem(&http::Problem::new(400, "key-malformed", e.to_string()));
            }
        };
        let parts = http::RequestParts {
            method: &request.method,
            path: &request.path,
            content_type: Some(b"application/json"),
            body: &request.body,
            headers: &[],
        };
        let fingerprint = match parts.fingerprint(&[]) {
            Ok(fp) => fp,
            Err(e) => return Response::problem(&http::Problem::body_malformed(&e)),
        };
        let decision = match self.store.begin(&id, fingerprint, now()) {
            Ok(decision) => decision,
            Err(e) => return Response::text(500, e.to_string()),
        };
        let Decision::Claimed { generation, .. } = decision else {
            let mut answered = http::answer(&decision, now(), &http::AnswerConfig::default())
                .map_or_else(
                    || Response::text(500, "a claim without a handler"),
                    Response::from_answer,
                );
            if let Decision::InProgress { lease_until, .. } = decision {
                // The browser test waits for the work, not the whole lease: the sooner of
                // the two.
                let work = u64::try_from(self.options.work.as_millis()).unwrap_or(u64::MAX);
                let wait = lease_until.millis_since(now()).min(work);
                let seconds = wait.div_ceil(1_000).max(1);
                for (name, value) in &mut answered.headers {
                    if name.eq_ignore_ascii_case("retry-after") {
                        *value = seconds.to_string();
                    }
                }
            }
            return answered;
        };
        let number = {
            let mut log = self.lock();
            log.executed.push(key.to_owned());
            log.executed.len()
        };
        thread::sleep(self.options.work);
        let order: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let body = json!({ "order": number, "item": order.get("item"), "status": "confirmed" });
        let stored = http::StoredResponse {
            status: 201,
            headers: vec![("Content-Type".into(), b"application/json".to_vec())],
            body: body.to_string().into_bytes(),
        };
        match self.store.complete(
            &id,
            generation,
            Verdict::Succeeded,
            stored.to_outcome(),
            now(),
        ) {
            Ok(_) => Response {
                status: 201,
                content_type: "application/json".into(),
                headers: Vec::new(),
                body: stored.body,
            },
            Err(e) => Response::text(500, e.to_string()),
        }
    }

    fn file(&self, path: &str) -> Response {
        let path = path.split('?').next().unwrap_or("/");
        let relative = Path::new(path.trim_start_matches('/'));
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Response::text(404, "not found");
        }
        let mut full = self.options.root.join(relative);
        if path.ends_with('/') {
            full.push("index.html");
        }
        let Ok(body) = std::fs::read(&full) else {
            return Response::text(404, "not found");
        };
        let content_type = match full.extension().and_then(|e| e.to_str()) {
            Some("html") => "text/html; charset=utf-8",
            Some("js" | "mjs") => "text/javascript",
            Some("wasm") => "application/wasm",
            Some("json") => "application/json",
            _ => "application/octet-stream",
        };
        Response {
            status: 200,
            content_type: content_type.into(),
            headers: vec![("Cache-Control".into(), "no-store".into())],
            body,
        }
    }
}

fn read_request(reader: &mut impl BufRead) -> Result<Request, String> {
    let mut head = String::new();
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).map_err(|e| e.to_string())?;
        head.push_str(&line);
        if n == 0 || head.len() > MAX_HEADERS {
            return Err("request head: truncated or too large".into());
        }
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let mut first = lines.first().ok_or("request line: missing")?.split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or("/").to_owned();
    let mut keys = Vec::new();
    let mut length = 0usize;
    for line in &lines[1..] {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("idempotency-key") {
            keys.push(value.to_owned());
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().map_err(|_| "Content-Length: not a number")?;
        }
    }
    if length > MAX_BODY {
        return Err(format!("body: {length} bytes, at most {MAX_BODY}"));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(Request {
        method,
        path,
        keys,
        body,
    })
}

fn write_response(mut stream: &TcpStream, response: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        http::reason_phrase(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}
