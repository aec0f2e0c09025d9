//! A small test server for the browser end-to-end test of idem-wasm (`wasm/e2e`): static
//! files plus `POST /orders` behind the store's tower layer,
//! [`idem_store::http::IdempotencyLayer`], on hyper and tokio as `idem proxy` serves.
//!
//! ```text
//! cargo run -p idem-tests --example e2e-server -- --root SITE --db FILE [--work-ms 1500] [--lifetime-s 120]
//! ```
//!
//! Binds 127.0.0.1 on a free port and prints `listening http://127.0.0.1:PORT` as its first
//! line. `POST /orders` goes through the layer, which does everything about the key: it
//! needs an `Idempotency-Key` header (400 without, or malformed: an RFC 8941 String or a
//! bare token, one key per request), fingerprints the request, claims the key in the
//! store, replays a settled outcome with `Idempotent-Replayed: true`, and answers 409
//! while the first request runs, 422 for the key with another payload and 503 for an
//! outcome that is unknown (docs/design.md §10). The tenant is fixed (`shop`), the operation the
//! layer's default (`POST /orders`). Behind it the order handler is a plain service: it
//! counts the execution, works for `--work-ms`, and answers 201 with a JSON body.
//!
//! The store's lease is the work's length plus [`LEASE_MARGIN`], so the 409's
//! `Retry-After` (the lease end) is about as long as the work: the browser's retry comes
//! once the first request is done, not after the 30 s default lease.
//!
//! Around the layer, a small service logs what `GET /stats` tells the test: every
//! attempt's key and `Idempotency-Key` header as sent, every answer's status and whether
//! it was a replay, and every execution. A request runs to its end in a task of its own,
//! so an answer the browser never reads (it went offline) is still logged. `POST
//! /shutdown` ends the process, and so does `--lifetime-s` running out.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_core::Config;
use idem_core::http::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, key_from_fields};
use idem_store::Store;
use idem_store::http::{Idempotency, IdempotencyLayer, RequestBody, Settings, Tenant};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tower::{Layer, Service, ServiceExt};

fn main() {
    if let Err(message) = run(std::env::args().skip(1).collect()) {
        eprintln!("e2e-server: {message}");
        std::process::exit(2);
    }
}

/// How much longer than the work a claim's lease is: room for the store's commit.
const LEASE_MARGIN: Duration = Duration::from_millis(500);
/// The largest request body, as the layer buffers it.
const MAX_BODY: usize = 64 * 1024;
/// How long a stop waits for the requests in flight.
const DRAIN: Duration = Duration::from_secs(5);

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

/// The log, shared by the logging service, the order handler and `/stats`.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Log>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The key of a request, as the logging service read it, handed to the handler in the
/// request's extensions (the layer passes them on).
#[derive(Clone)]
struct OrderKey(String);

/// The order handler, behind the layer: counts the execution, works, answers 201.
#[derive(Clone)]
struct Orders {
    log: Shared,
    work: Duration,
}

impl Service<Request<RequestBody<Incoming>>> for Orders {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody<Incoming>>) -> Self::Future {
        let orders = self.clone();
        Box::pin(async move { Ok(orders.execute(request).await) })
    }
}

impl Orders {
    async fn execute(self, request: Request<RequestBody<Incoming>>) -> Response<Full<Bytes>> {
        let key = request
            .extensions()
            .get::<OrderKey>()
            .map_or_else(String::new, |key| key.0.clone());
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("body: {e}")),
        };
        let number = {
            let mut log = self.log.lock();
            log.executed.push(key);
            log.executed.len()
        };
        tokio::time::sleep(self.work).await;
        let order: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let body = json!({ "order": number, "item": order.get("item"), "status": "confirmed" });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = StatusCode::CREATED;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// Everything the routes need.
struct App {
    options: Options,
    log: Shared,
    /// The order handler behind the idempotency layer.
    orders: Idempotency<Orders>,
    stop: Notify,
}

fn run(args: Vec<String>) -> Result<(), String> {
    let options = parse(args)?;
    let lease = options.work.saturating_add(LEASE_MARGIN);
    let config = Config {
        lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        ..Config::default()
    };
    let store = Store::builder()
        .config(config)
        .open(&options.db)
        .map_err(|e| format!("--db: {e}"))?;
    let settings = Settings {
        tenant: Tenant::Fixed("shop".into()),
        require_key: true,
        body_limit: MAX_BODY,
        ..Settings::default()
    };
    let log = Shared::default();
    let orders = IdempotencyLayer::new(Arc::new(store), settings).layer(Orders {
        log: log.clone(),
        work: options.work,
    });
    let lifetime = options.lifetime;
    let app = Arc::new(App {
        options,
        log,
        orders,
        stop: Notify::new(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let served = runtime.block_on(serve(app, lifetime));
    // A handler still working after the drain is dropped: the layer marks its key
    // unknown. The store calls on the blocking pool get a moment to end.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

async fn serve(app: Arc<App>, lifetime: Duration) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    println!("listening http://127.0.0.1:{port}");
    let routes = Arc::clone(&app);
    let service = tower::service_fn(move |request: Request<Incoming>| {
        let app = Arc::clone(&routes);
        async move { Ok::<_, Infallible>(app.route(request).await) }
    });
    let graceful = GracefulShutdown::new();
    let mut lifetime = std::pin::pin!(tokio::time::sleep(lifetime));
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted: the next one may work.
                Err(_) => continue,
            },
            () = app.stop.notified() => break,
            () = &mut lifetime => {
                eprintln!("e2e-server: lifetime over, exiting");
                break;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(service.clone()),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // The browser may have gone away (offline): the answer is lost, as in life.
            let _ = connection.await;
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => eprintln!("e2e-server: requests still in flight, stopping anyway"),
    }
    Ok(())
}

impl App {
    async fn route(self: Arc<App>, request: Request<Incoming>) -> Response<Full<Bytes>> {
        match (request.method(), request.uri().path()) {
            (&Method::POST, "/orders") => self.order(request).await,
            (&Method::GET, "/stats") => self.stats(),
            (&Method::POST, "/shutdown") => {
                self.stop.notify_one();
                text(StatusCode::OK, "bye")
            }
            (&Method::GET, path) => self.file(path),
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        }
    }

    /// The logging service around the layer: a request with a well-formed key is logged
    /// as received, then answered by the layer (and the handler behind it) in a task of
    /// its own, whose answer is logged whether or not the browser reads it.
    async fn order(self: Arc<App>, mut request: Request<Incoming>) -> Response<Full<Bytes>> {
        let fields = request.headers().get_all(IDEMPOTENCY_KEY);
        let key = key_from_fields(fields.iter().map(HeaderValue::as_bytes))
            .ok()
            .flatten();
        if let Some(key) = &key {
            let header: Vec<String> = fields
                .iter()
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
                .collect();
            let mut log = self.log.lock();
            log.received.push(key.clone());
            log.headers.push(header.join(", "));
            drop(log);
            request.extensions_mut().insert(OrderKey(key.clone()));
        }
        let task = tokio::spawn(async move {
            let Ok(response) = self.orders.clone().oneshot(request).await;
            let (parts, body) = response.into_parts();
            let response = match body.collect().await {
                Ok(body) => Response::from_parts(parts, Full::new(body.to_bytes())),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("body: {e}")),
            };
            if let Some(key) = key {
                self.log.lock().answered.push(json!({
                    "key": key,
                    "status": response.status().as_u16(),
                    "replayed": response.headers().contains_key(IDEMPOTENT_REPLAYED),
                }));
            }
            response
        });
        task.await.unwrap_or_else(|e| {
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the order failed: {e}"),
            )
        })
    }

    fn stats(&self) -> Response<Full<Bytes>> {
        let log = self.log.lock();
        let body = json!({
            "received": log.received,
            "headers": log.headers,
            "answered": log.answered,
            "executed": log.executed,
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }

    fn file(&self, path: &str) -> Response<Full<Bytes>> {
        let relative = Path::new(path.trim_start_matches('/'));
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return text(StatusCode::NOT_FOUND, "not found");
        }
        let mut full = self.options.root.join(relative);
        if path.ends_with('/') {
            full.push("index.html");
        }
        let Ok(body) = std::fs::read(&full) else {
            return text(StatusCode::NOT_FOUND, "not found");
        };
        let content_type = match full.extension().and_then(|e| e.to_str()) {
            Some("html") => "text/html; charset=utf-8",
            Some("js" | "mjs") => "text/javascript",
            Some("wasm") => "application/wasm",
            Some("json") => "application/json",
            _ => "application/octet-stream",
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.into())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
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
