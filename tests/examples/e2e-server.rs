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
//! token as older clients send. The body's fingerprint is SHA-256 of its RFC 8785
//! canonical form. A new key is claimed in the store, the order is "executed" (counted,
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

use idem_store::{Decision, Fingerprint, Outcome, RecordId, Store, Verdict, now};
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
    /// The `Idempotency-Key` header as sent.
    key: Option<String>,
    body: Vec<u8>,
}

struct Response {
    status: u16,
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
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
        let Some(header) = request.key.as_deref() else {
            return Response::text(400, "Idempotency-Key: missing, this endpoint needs one");
        };
        let key = match idempotency_key(header) {
            Ok(key) => key,
            Err(problem) => return Response::text(400, format!("Idempotency-Key: {problem}")),
        };
        {
            let mut log = self.lock();
            log.received.push(key.clone());
            log.headers.push(header.to_owned());
        }
        let response = self.decide(&key, &request.body);
        let replayed = response
            .headers
            .iter()
            .any(|(name, _)| *name == "Idempotent-Replayed");
        self.lock().answered.push(json!({
            "key": key,
            "status": response.status,
            "replayed": replayed,
        }));
        response
    }

    fn decide(&self, key: &str, body: &[u8]) -> Response {
        let id = match RecordId::new("shop", "orders", key) {
            Ok(id) => id,
            Err(e) => return Response::text(400, e.to_string()),
        };
        // Not `from_utf8_lossy`: two bodies that differ only in invalid bytes would both
        // become U+FFFD and share a fingerprint.
        let text = match std::str::from_utf8(body) {
            Ok(text) => text,
            Err(e) => return Response::text(400, format!("body: not UTF-8: {e}")),
        };
        let fingerprint = match Fingerprint::of_json(text, &[]) {
            Ok(fp) => fp,
            Err(e) => return Response::text(400, e.to_string()),
        };
        let decision = match self.store.begin(&id, fingerprint, now()) {
            Ok(decision) => decision,
            Err(e) => return Response::text(500, e.to_string()),
        };
        match decision {
            Decision::Claimed { generation, .. } => {
                let number = {
                    let mut log = self.lock();
                    log.executed.push(key.to_owned());
                    log.executed.len()
                };
                thread::sleep(self.options.work);
                let order: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                let outcome =
                    json!({ "order": number, "item": order.get("item"), "status": "confirmed" });
                let outcome = Outcome::new(201, outcome.to_string());
                match self.store.complete(
                    &id,
                    generation,
                    Verdict::Succeeded,
                    outcome.clone(),
                    now(),
                ) {
                    Ok(_) => Response {
                        status: 201,
                        content_type: "application/json",
                        headers: Vec::new(),
                        body: outcome.body,
                    },
                    Err(e) => Response::text(500, e.to_string()),
                }
            }
            Decision::InProgress { lease_until, .. } => {
                let work = u64::try_from(self.options.work.as_millis()).unwrap_or(u64::MAX);
                let wait = lease_until.millis_since(now()).min(work);
                let seconds = wait.div_ceil(1_000).max(1);
                let mut response = Response::text(409, "a request with this key is in progress");
                response.headers.push(("Retry-After", seconds.to_string()));
                response
            }
            Decision::Replay { outcome, .. } => Response {
                status: u16::try_from(outcome.code).unwrap_or(500),
                content_type: "application/json",
                headers: vec![("Idempotent-Replayed", "true".into())],
                body: outcome.body,
            },
            Decision::Conflict { .. } => {
                Response::text(422, "Idempotency-Key: already used with another payload")
            }
            Decision::NeedsReconciliation { .. } => {
                Response::text(500, "outcome unknown: the order needs reconciliation")
            }
            Decision::Forgotten { .. } => Response::text(
                410,
                "Idempotency-Key: this order ran long ago; its outcome is no longer kept",
            ),
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
            content_type,
            headers: vec![("Cache-Control", "no-store".into())],
            body,
        }
    }
}

/// The key of an `Idempotency-Key` header value: an RFC 8941 String (an Item, so
/// parameters may follow; they are ignored), or a bare token as older clients send it.
fn idempotency_key(value: &str) -> Result<String, String> {
    let Some(quoted) = value.strip_prefix('"') else {
        return if value.is_empty() {
            Err("empty".into())
        } else {
            Ok(value.to_owned())
        };
    };
    let mut key = String::new();
    let mut chars = quoted.chars();
    loop {
        match chars.next() {
            None => return Err("a String without its closing quote".into()),
            Some('"') => break,
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => key.push(c),
                _ => return Err("a String may escape only \" and \\".into()),
            },
            Some(c @ ' '..='~') => key.push(c),
            Some(c) => return Err(format!("{c:?} in a String, only printable ASCII")),
        }
    }
    let rest = chars.as_str();
    if !rest.is_empty() && !rest.starts_with(';') {
        return Err(format!("{rest:?} after the String"));
    }
    if key.is_empty() {
        return Err("an empty String".into());
    }
    Ok(key)
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
    let mut key = None;
    let mut length = 0usize;
    for line in &lines[1..] {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("idempotency-key") {
            key = Some(value.to_owned());
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
        key,
        body,
    })
}

fn write_response(mut stream: &TcpStream, response: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
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

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Content",
        _ => "Internal Server Error",
    }
}

#[cfg(test)]
mod tests {
    use super::idempotency_key;

    #[test]
    fn the_key_as_a_structured_field_string_or_a_bare_token() {
        let uuid = "01890a5d-ac96-774b-bcce-b302099a8057";
        assert_eq!(idempotency_key(&format!("\"{uuid}\"")).unwrap(), uuid);
        assert_eq!(idempotency_key(uuid).unwrap(), uuid);
        assert_eq!(idempotency_key(r#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(idempotency_key(r#""k";v=1"#).unwrap(), "k");
        for bad in [
            "",
            r#"""#,
            r#""""#,
            r#""open"#,
            r#""a\nb""#,
            r#""k" x"#,
            "\"caf\u{e9}\"",
        ] {
            assert!(idempotency_key(bad).is_err(), "{bad:?}");
        }
    }
}
