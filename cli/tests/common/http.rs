//! An HTTP upstream that counts its executions, a running `idem proxy`, and a client
//! that speaks HTTP/1.1 by hand: what the proxy's tests share.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::Idem;

/// What the upstream did, by path and `Idempotency-Key`.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) executions: HashMap<String, usize>,
    /// The `traceparent` of each request that had one, with its key.
    pub(crate) traceparents: Vec<(String, String)>,
}

/// A small HTTP/1.1 backend: `POST /orders` counts one execution per key and answers
/// 201 with the order number after `work` (`/receipt` with a 20 KB receipt too); `/hang` counts and then never answers, and
/// `/stall` sends its head and the start of its body and then nothing (until the proxy
/// hangs up, at most 10 s). One connection per request (`Connection: close`).
pub(crate) struct Upstream {
    pub(crate) address: SocketAddr,
    pub(crate) counts: Arc<Mutex<Counts>>,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Upstream {
    pub(crate) fn start(work: Duration) -> Upstream {
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

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub(crate) fn executions(&self, key: &str) -> usize {
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

pub(crate) fn serve_upstream(stream: TcpStream, counts: &Mutex<Counts>, work: Duration) {
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
        if let Some(parent) = header_of(&head, "traceparent") {
            counts.traceparents.push((key.clone(), parent));
        }
        let n = counts.executions.entry(key).or_default();
        *n += 1;
        *n
    };
    if path == "/hang" {
        // Until the proxy gives up and closes the connection (or 10 s pass).
        let _ = reader.read_to_end(&mut Vec::new());
        return;
    }
    if path == "/stall" {
        // The head and a tenth of the body, then nothing until the proxy hangs up.
        let head = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"order\":";
        let _ = (&stream).write_all(head.as_bytes());
        let _ = reader.read_to_end(&mut Vec::new());
        return;
    }
    thread::sleep(work);
    // `/receipt` answers with a 20 KB receipt, to fill a disk.
    let receipt = if path == "/receipt" {
        format!(",\"receipt\":\"{}\"", "r".repeat(20_000))
    } else {
        String::new()
    };
    let body = format!("{{\"order\":{number},\"path\":\"{path}\"{receipt}}}");
    let answer = format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nLocation: /orders/{number}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&stream).write_all(answer.as_bytes());
}

/// One HTTP message from `reader`: the head (through the blank line) and the body by
/// `Content-Length`.
pub(crate) fn read_message(reader: &mut impl BufRead) -> Option<(String, Vec<u8>)> {
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

pub(crate) fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// A running `idem proxy`, killed on drop if it did not stop by itself.
pub(crate) struct Proxy {
    pub(crate) child: Child,
    /// The public listener.
    pub(crate) address: SocketAddr,
    /// The admin listener: `/healthz` and `/metrics`.
    pub(crate) admin: SocketAddr,
}

impl Proxy {
    /// Starts a proxy on free loopback ports, its admin listener too unless `flags`
    /// name one.
    pub(crate) fn start(idem: &Idem, upstream: &str, flags: &[&str]) -> Proxy {
        Proxy::start_with_env(idem, upstream, flags, &[])
    }

    /// As [`Proxy::start`], with `env` set for the proxy.
    pub(crate) fn start_with_env(
        idem: &Idem,
        upstream: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Proxy {
        let mut args = vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream];
        if !flags.contains(&"--admin-listen") {
            args.extend_from_slice(&["--admin-listen", "127.0.0.1:0"]);
        }
        args.extend_from_slice(flags);
        let mut child = idem
            .command(&args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read a byte at a time: the rest of stdout stays for the test (an access log).
        let stdout = child.stdout.as_mut().unwrap();
        let mut line = || {
            let mut line = Vec::new();
            let mut byte = [0];
            while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            String::from_utf8(line).unwrap()
        };
        let (first, second) = (line(), line());
        let address = first
            .strip_prefix("listening http://")
            .unwrap_or_else(|| panic!("first line {first:?}"))
            .parse()
            .unwrap();
        let admin = second
            .strip_prefix("admin http://")
            .unwrap_or_else(|| panic!("second line {second:?}"))
            .parse()
            .unwrap();
        Proxy {
            child,
            address,
            admin,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn terminate(self) -> (i32, String) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        self.terminate_waited()
    }

    /// Waits for the exit status of a proxy already sent its stop signal, and its stderr.
    pub(crate) fn terminate_waited(mut self) -> (i32, String) {
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
#[derive(Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        header_of(&self.head, name)
    }

    /// The `idempotency` code of a problem document, checking its content type.
    pub(crate) fn problem(&self) -> String {
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
pub(crate) fn post(
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    try_post(address, path, headers, body).expect("an answer")
}

/// As [`post`], or the error of a proxy that is not there or hung up.
pub(crate) fn try_post(
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Answer> {
    let stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    (&stream).write_all(request.as_bytes())?;
    let mut reader = BufReader::new(&stream);
    let (head, body) = read_message(&mut reader)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no answer"))?;
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Ok(Answer {
        status,
        head,
        body: String::from_utf8(body).unwrap(),
    })
}

/// `GET path` from `address`, on a connection of its own.
pub(crate) fn get(address: SocketAddr, path: &str) -> Answer {
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    (&stream).write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(&stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    // The proxy's own answers have a length; read to the end of the connection.
    let mut body = String::new();
    reader.read_to_string(&mut body).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Answer { status, head, body }
}
