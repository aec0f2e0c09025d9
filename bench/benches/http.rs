//! `idem proxy` under load: requests per second and p50/p99 latency of the proxy in
//! front of a small upstream, against the upstream alone, with 1 and 64 concurrent
//! clients, fresh keys and replays; then a fleet of one to three proxies on PostgreSQL,
//! on MariaDB, on a three-node Galera cluster (each proxy on its own node) and on Redis. Everything binds 127.0.0.1; every run sends a fixed
//! number of requests (2,000 from one client, 16,000 from 64).
//!
//! ```text
//! cargo build --release -p idem-cli && cargo bench -p idem-bench --bench http
//! ```
//!
//! The proxy is the real `idem` binary, found next to this benchmark's own directory
//! (`target/release/idem`); its store is a temporary file with the default durability
//! (an fsync per commit, shared by concurrent requests through group commit). The load
//! generator keeps one HTTP/1.1 connection per client, opened before the clock starts,
//! and sends its requests one after the other on it. Before the timed runs of each
//! number of clients, an untimed one (a few fresh keys per client) opens the proxy's
//! connections to its upstream and its database. After each run through the proxy on
//! a file, the inputs its group commits answered in that run and how many they shared a
//! commit, from its `/metrics`.

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "../../store/tests/common/postgres.rs"]
mod server;

#[path = "../../store/tests/common/mariadb.rs"]
mod mariadb_server;

#[path = "../../store/tests/common/redis.rs"]
mod redis_server;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;

/// Requests per timed run of `clients` clients: enough for a stable p99 and a second or
/// more of load at 64 clients, few enough to finish in seconds.
fn requests(clients: usize) -> usize {
    2_000 * clients.min(8)
}

/// Requests of each client in the untimed run before the timed ones of a target: the
/// proxy's connections to the upstream (and its database's) are open before the clock
/// starts.
const WARM_UP: usize = 4;
/// No run may take longer; a run that would is cut and reported as such.
const RUN_LIMIT: Duration = Duration::from_secs(60);

fn main() {
    let idem = match idem_binary() {
        Ok(idem) => idem,
        Err(message) => {
            eprintln!("http bench: {message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(&idem));
}

/// `target/<profile>/idem`, from this benchmark's `target/<profile>/deps/http-…`.
fn idem_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("cannot find the target directory")?;
    let idem = profile.join(format!("idem{}", std::env::consts::EXE_SUFFIX));
    if idem.exists() {
        Ok(idem)
    } else {
        Err(format!(
            "{} is missing: build it first (cargo build --release -p idem-cli)",
            idem.display()
        ))
    }
}

async fn run(idem: &PathBuf) {
    let upstream = upstream().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut proxy = Proxy::start(idem, dir.path().join("proxy.redb"), upstream.address);
    println!(
        "{:<28} {:>7} {:>8} {:>10} {:>9} {:>9}",
        "target", "clients", "requests", "req/s", "p50 ms", "p99 ms"
    );
    let mut fresh = 0usize;
    // What the upstream must have run: every request sent to it directly, every request
    // with a fresh key, and one per replayed key.
    let mut expected = 0;
    for clients in [1, 64] {
        for at in [upstream.address, proxy.address] {
            expected += load(&[at], clients, clients * WARM_UP, Keys::Fresh, &mut fresh)
                .await
                .requests;
        }
        for (name, at, keys) in [
            ("upstream alone", upstream.address, Keys::Fresh),
            ("idem proxy, fresh keys", proxy.address, Keys::Fresh),
            ("idem proxy, replays", proxy.address, Keys::Replay),
        ] {
            // The upstream counts every request it is sent: only the proxy is asked.
            let proxied = at == proxy.address;
            let before = if proxied {
                commits(proxy.admin).await
            } else {
                None
            };
            let report = load(&[at], clients, requests(clients), keys, &mut fresh).await;
            let after = if proxied {
                commits(proxy.admin).await
            } else {
                None
            };
            let batched = before.zip(after).map(|(before, after)| after.since(before));
            println!(
                "{:<28} {:>7} {:>8} {:>10.0} {:>9.2} {:>9.2}{}",
                name,
                clients,
                report.requests,
                report.per_second,
                report.p50.as_secs_f64() * 1e3,
                report.p99.as_secs_f64() * 1e3,
                if report.cut {
                    "  (cut at the time limit)"
                } else {
                    ""
                }
            );
            if let Some(batched) = batched.filter(|b| b.batches > 0.0) {
                println!(
                    "{:<28} {:>7} {:>8.0} inputs in {:.0} group commits, {:.1} a commit",
                    "  its store file",
                    clients,
                    batched.inputs,
                    batched.batches,
                    batched.inputs / batched.batches
                );
            }
            assert_eq!(report.unexpected, 0, "{name}: answers other than 201");
            expected += match keys {
                Keys::Fresh => report.requests,
                Keys::Replay => clients,
            };
        }
    }
    let executions = upstream.executions.load(Ordering::SeqCst);
    println!(
        "upstream executions: {executions}, expected {expected} (one per fresh key, one per replayed key)"
    );
    assert_eq!(
        executions, expected,
        "the upstream ran a replayed request again"
    );
    proxy.stop();
    let postgres = server::Server::start();
    fleet(idem, &upstream, &mut fresh, "PostgreSQL", &[postgres.url()]).await;
    drop(postgres);
    let mariadb = mariadb_server::Server::start();
    mariadb.sql("CREATE DATABASE fleet");
    let url = mariadb.url_of("fleet");
    fleet(idem, &upstream, &mut fresh, "MariaDB", &[url]).await;
    drop(mariadb);
    // Each proxy on its own node of a Galera cluster.
    let nodes = mariadb_server::Server::galera_cluster(3);
    nodes[0].sql("CREATE DATABASE fleet");
    let urls: Vec<String> = nodes.iter().map(|node| node.url_of("fleet")).collect();
    fleet(idem, &upstream, &mut fresh, "Galera, 3 nodes", &urls).await;
    drop(nodes);
    let redis = redis_server::Server::start();
    fleet(idem, &upstream, &mut fresh, "Redis", &[redis.url()]).await;
}

/// The fleet: one, two and three proxies, proxy `i` on the database `urls[i % len]` (a
/// throwaway server of the benchmark's own, or the nodes of a cluster), 64 clients spread
/// over them, fresh keys and replays.
async fn fleet(
    idem: &PathBuf,
    upstream: &Upstream,
    fresh: &mut usize,
    engine: &str,
    urls: &[String],
) {
    let mut proxies: Vec<Proxy> = Vec::new();
    println!();
    println!(
        "{:<28} {:>7} {:>8} {:>10} {:>9} {:>9}",
        format!("fleet on {engine}"),
        "clients",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms"
    );
    let before = upstream.executions.load(Ordering::SeqCst);
    let mut expected = 0;
    for replicas in 1..=3 {
        while proxies.len() < replicas {
            let url = &urls[proxies.len() % urls.len()];
            proxies.push(Proxy::start(
                idem,
                std::ffi::OsStr::new(url),
                upstream.address,
            ));
        }
        let at: Vec<SocketAddr> = proxies.iter().map(|p| p.address).collect();
        expected += load(&at, 64, 64 * WARM_UP, Keys::Fresh, fresh)
            .await
            .requests;
        for (keys, what) in [(Keys::Fresh, "fresh keys"), (Keys::Replay, "replays")] {
            let report = load(&at, 64, requests(64), keys, fresh).await;
            println!(
                "{:<28} {:>7} {:>8} {:>10.0} {:>9.2} {:>9.2}",
                format!("{replicas} replica(s), {what}"),
                64,
                report.requests,
                report.per_second,
                report.p50.as_secs_f64() * 1e3,
                report.p99.as_secs_f64() * 1e3,
            );
            assert_eq!(report.unexpected, 0, "the fleet answered other than 201");
            expected += match keys {
                Keys::Fresh => report.requests,
                Keys::Replay => 64,
            };
        }
    }
    let executions = upstream.executions.load(Ordering::SeqCst) - before;
    println!("upstream executions through the fleet: {executions}, expected {expected}");
    assert_eq!(
        executions, expected,
        "the fleet ran a replayed request again"
    );
    for mut proxy in proxies {
        proxy.stop();
    }
}

/// Whether each request gets a key of its own or one client's requests share one key
/// (after its first request, every one is a replay).
#[derive(Clone, Copy)]
enum Keys {
    Fresh,
    Replay,
}

struct Report {
    requests: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    unexpected: usize,
    cut: bool,
}

/// `requests` requests from `clients` clients, client `i` on the replica
/// `at[i % at.len()]`. The clock starts once every client is connected.
async fn load(
    at: &[SocketAddr],
    clients: usize,
    requests: usize,
    keys: Keys,
    fresh: &mut usize,
) -> Report {
    let per_client = requests / clients;
    let first_key = *fresh;
    *fresh += clients * per_client;
    let connected = Arc::new(Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let at = at[client % at.len()];
            let connected = Arc::clone(&connected);
            tokio::spawn(async move {
                let stream = TcpStream::connect(at).await.expect("connect");
                stream.set_nodelay(true).expect("nodelay");
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .expect("handshake");
                tokio::spawn(connection);
                connected.wait().await;
                let deadline = Instant::now() + RUN_LIMIT;
                let mut latencies = Vec::with_capacity(per_client);
                let mut unexpected = 0;
                for i in 0..per_client {
                    if Instant::now() > deadline {
                        break;
                    }
                    let key = match keys {
                        Keys::Fresh => first_key + client * per_client + i,
                        Keys::Replay => first_key + client * per_client,
                    };
                    let request = Request::post("/orders")
                        .header("host", at.to_string())
                        .header("idempotency-key", format!("\"bench-{key}\""))
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(format!(
                            "{{\"item\":\"tea\",\"n\":{key}}}"
                        ))))
                        .expect("request");
                    let sent = Instant::now();
                    sender.ready().await.expect("connection ready");
                    let response = sender.send_request(request).await.expect("answer");
                    let status = response.status().as_u16();
                    response.into_body().collect().await.expect("body");
                    latencies.push(sent.elapsed());
                    if status != 201 {
                        unexpected += 1;
                    }
                }
                (latencies, unexpected)
            })
        })
        .collect();
    connected.wait().await;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(requests);
    let mut unexpected = 0;
    for task in tasks {
        let (mut mine, bad) = task.await.expect("client");
        latencies.append(&mut mine);
        unexpected += bad;
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Report {
        requests: latencies.len(),
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        unexpected,
        cut: latencies.len() < clients * per_client,
    }
}

/// A proxy's group commits so far, from its `/metrics`.
#[derive(Clone, Copy)]
struct Commits {
    batches: f64,
    inputs: f64,
}

impl Commits {
    fn since(self, before: Commits) -> Commits {
        Commits {
            batches: self.batches - before.batches,
            inputs: self.inputs - before.inputs,
        }
    }
}

/// The group commits of the proxy whose admin listener is `at` (from its `/metrics`), or
/// `None` for a proxy that shows none (on a database).
async fn commits(at: SocketAddr) -> Option<Commits> {
    let stream = TcpStream::connect(at).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = Request::get("/metrics")
        .header("host", at.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("answer");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    Some(Commits {
        batches: value("idem_proxy_store_batches_total")?,
        inputs: value("idem_proxy_store_batched_inputs_total")?,
    })
}

struct Upstream {
    address: SocketAddr,
    executions: Arc<AtomicUsize>,
}

/// The upstream: answers every request 201 with a small JSON body, at once.
async fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&executions);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let counted = Arc::clone(&counted);
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    let _ = request.into_body().collect().await;
                    let body = format!("{{\"order\":{n},\"status\":\"confirmed\"}}");
                    let response = Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body)))
                        .expect("response");
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Upstream {
        address,
        executions,
    }
}

struct Proxy {
    child: Child,
    address: SocketAddr,
    /// The admin listener, where `/metrics` is.
    admin: SocketAddr,
}

impl Proxy {
    fn start(idem: &PathBuf, db: impl AsRef<std::ffi::OsStr>, upstream: SocketAddr) -> Proxy {
        let mut child = Command::new(idem)
            .arg("--db")
            .arg(db)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--tenant",
                "bench",
                "--upstream",
            ])
            .arg(format!("http://{upstream}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("idem proxy starts");
        let mut lines = BufReader::new(child.stdout.as_mut().expect("stdout")).lines();
        let mut address = |prefix: &str| {
            let line = lines.next().and_then(Result::ok).unwrap_or_default();
            line.strip_prefix(prefix)
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("idem proxy said {line:?}"))
        };
        let (address, admin) = (address("listening http://"), address("admin http://"));
        Proxy {
            child,
            address,
            admin,
        }
    }

    fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
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
