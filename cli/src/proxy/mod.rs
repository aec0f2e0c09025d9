//! `idem proxy`: a reverse proxy that gives any HTTP backend idempotency keys, on the
//! store's tower layer (`idem_store::http`).
//!
//! The upstream call decides what becomes of a claimed key when it fails: a connection
//! that could not be made means the request was never sent (502, released: a retry
//! forwards it again); a failure after it was sent (a reset, a malformed answer, the
//! timeout) means the upstream may have acted (502 or 504, the key Unknown).

mod deadline;
mod metrics;
mod timed;

use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_core::Config;
use idem_core::http::Problem;
use idem_store::Receiver;
use idem_store::http::{
    AnswerConfig, Answered, IdempotencyLayer, ReplayStatus, RequestBody, ResponseBody, Settings,
    Settle, Tenant,
};
use tokio::sync::Semaphore;
use tower::{Layer, Service};

use crate::args::ProxyArgs;
use crate::exit::{Ending, Failure};
use crate::session::{Access, Session, open_failure};
use deadline::Deadline;
use metrics::Metrics;
use timed::Timed;

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes the headers that belong to one connection: those [`HOP_BY_HOP`] lists and
/// every header the `Connection` header names.
fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The upstream: where requests go and the client that takes them.
#[derive(Clone)]
struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The URL's path without its trailing `/`, put before every request's path.
    prefix: String,
    client: Client<HttpConnector, RequestBody<Incoming>>,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

/// Where the access log goes: one JSON line per request.
type AccessLog = Arc<Mutex<Box<dyn Write + Send>>>;

pub(crate) fn run(session: &Session, args: &ProxyArgs) -> Ending {
    let settings = settings(args)?;
    let file = session.engine()? == "file";
    let metrics = Arc::new(Metrics::new(file));
    let upstream = upstream(args, Arc::clone(&metrics))?;
    let log = access_log(args)?;
    if args.max_connections == 0 {
        return Err(Failure::usage("--max-connections: 0, needs at least 1"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("proxy: cannot start the runtime: {e}")))?;
    let serving = Serving {
        args,
        settings,
        upstream,
        metrics,
        log,
    };
    if file {
        // A file is opened on this thread, which waits for its lock.
        let store = session
            .builder(Config::default(), Access::Create)?
            .open_blocking(&session.db)
            .map_err(open_failure)?;
        runtime.block_on(serving.serve(Arc::new(store.into_store())))?;
    } else {
        if args.pool == 0 {
            return Err(Failure::usage("--pool: 0 connections, needs at least 1"));
        }
        let builder = session
            .builder(Config::default(), Access::Create)?
            .pool_size(args.pool);
        runtime.block_on(async {
            let store = builder.open(&session.db).await.map_err(open_failure)?;
            serving.serve(Arc::new(store)).await
        })?;
    }
    Ok(0)
}

fn access_log(args: &ProxyArgs) -> Result<Option<AccessLog>, Failure> {
    let Some(path) = &args.access_log else {
        return Ok(None);
    };
    let out: Box<dyn Write + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::LineWriter::new(std::io::stdout()))
    } else {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Failure::runtime(format!("--access-log: cannot open {}: {e}", path.display()))
            })?;
        Box::new(std::io::LineWriter::new(file))
    };
    Ok(Some(Arc::new(Mutex::new(out))))
}

fn settings(args: &ProxyArgs) -> Result<Settings, Failure> {
    let tenant = match (&args.tenant, &args.tenant_header) {
        (Some(name), _) => {
            idem_core::RecordId::new(name, "o", "k")
                .map_err(|e| Failure::usage(format!("--tenant: {}", e.problem())))?;
            Tenant::Fixed(name.clone())
        }
        (None, Some(header)) => Tenant::Header(header_name("--tenant-header", header)?),
        (None, None) => {
            return Err(Failure::usage(
                "--tenant or --tenant-header: give one; without either, each client would pick its tenant with a header of its own",
            ));
        }
    };
    let fingerprint_headers = args
        .fingerprint_header
        .iter()
        .map(|name| header_name("--fingerprint-header", name))
        .collect::<Result<_, _>>()?;
    let replay_status = match args.replay_status.as_str() {
        "200" => ReplayStatus::Ok,
        _ => ReplayStatus::Original,
    };
    if args.body_limit == 0 {
        return Err(Failure::usage("--body-limit: 0 bytes, needs at least 1"));
    }
    Ok(Settings {
        tenant,
        require_key: args.require_key,
        body_limit: args.body_limit,
        body_timeout: Some(Duration::from_millis(args.body_timeout.max(1))),
        fingerprint_headers,
        answers: AnswerConfig {
            replay_status,
            ..AnswerConfig::default()
        },
        ..Settings::default()
    })
}

fn header_name(flag: &str, name: &str) -> Result<HeaderName, Failure> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Failure::usage(format!("{flag}: {name:?} is not an HTTP header name")))
}

fn upstream(args: &ProxyArgs, metrics: Arc<Metrics>) -> Result<Upstream, Failure> {
    let bad = |rule: &str| Failure::usage(format!("--upstream: {:?} {rule}", args.upstream));
    let uri: Uri = args.upstream.parse().map_err(|_| bad("is not a URL"))?;
    if uri.scheme() != Some(&Scheme::HTTP) {
        return Err(bad(
            "needs http:// (put TLS in front of the proxy, not behind it)",
        ));
    }
    let authority = uri.authority().cloned().ok_or_else(|| bad("has no host"))?;
    if uri.query().is_some() {
        return Err(bad("has a query; give the base URL only"));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Ok(Upstream {
        scheme: Scheme::HTTP,
        authority,
        prefix: uri.path().trim_end_matches('/').to_owned(),
        client: Client::builder(TokioExecutor::new()).build(connector),
        timeout: Duration::from_millis(args.upstream_timeout.max(1)),
        metrics,
    })
}

/// What one proxy serves with, whatever its store.
struct Serving<'a> {
    args: &'a ProxyArgs,
    settings: Settings,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    log: Option<AccessLog>,
}

impl Serving<'_> {
    /// Serves on `--listen` until a stop signal, on any receiver.
    async fn serve<R: Receiver>(self, store: Arc<R>) -> Result<(), Failure> {
        let Serving {
            args,
            settings,
            upstream,
            metrics,
            log,
        } = self;
        let listen = args.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
        let timed = Arc::new(Timed {
            inner: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
        });
        let forward = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
            let upstream = upstream.clone();
            async move { Ok::<_, Infallible>(upstream.forward(request).await) }
        });
        let layer = IdempotencyLayer::new(timed, settings);
        let running = layer.running();
        let keyed = layer.layer(forward);
        let front = Front {
            keyed,
            store: Arc::clone(&store),
            metrics,
            log,
        };
        let service = tower::service_fn(move |request: Request<Incoming>| {
            let front = front.clone();
            async move { front.call(request).await }
        });
        println!("listening http://{local}");
        let graceful = GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(args.max_connections));
        let header_timeout = Duration::from_millis(args.header_timeout.max(1));
        let mut stop = std::pin::pin!(stop_signal());
        loop {
            // At the bound, no connection is accepted until one ends: the operating
            // system's backlog holds the next ones.
            let permit = tokio::select! {
                permit = Arc::clone(&connections).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = &mut stop => break,
            };
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // A connection that failed before it was accepted (reset), or no
                    // file left for it: the next one may work, after a breath so that a
                    // process out of files does not spin.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
                () = &mut stop => break,
            };
            let _ = stream.set_nodelay(true);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(service.clone()),
                );
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                // A client that hangs up mid-request: its claimed request finishes anyway.
                let _ = connection.await;
                drop(permit);
            });
        }
        drop(listener);
        eprintln!("idem proxy: stopping, finishing the requests in flight");
        let drain = Duration::from_millis(args.drain_timeout.max(1));
        let drained = async {
            graceful.shutdown().await;
            // A request whose client hung up runs on in a task of its own until its key
            // is settled, and the store may still be giving back a claim nobody took.
            running.idle().await;
            store.idle().await;
        };
        tokio::select! {
            () = drained => Ok(()),
            () = tokio::time::sleep(drain) => Err(Failure::runtime(format!(
                "proxy: requests still running after {} ms (--drain-timeout), stopped anyway; a key claimed by a request cut off stays pending until its lease ends",
                drain.as_millis()
            ))),
        }
    }
}

/// The proxy's front: its own `GET /healthz` and `GET /metrics`, every other request
/// through the idempotency layer, each counted and logged.
struct Front<K, R> {
    keyed: K,
    store: Arc<R>,
    metrics: Arc<Metrics>,
    log: Option<AccessLog>,
}

impl<K: Clone, R> Clone for Front<K, R> {
    fn clone(&self) -> Self {
        Front {
            keyed: self.keyed.clone(),
            store: Arc::clone(&self.store),
            metrics: Arc::clone(&self.metrics),
            log: self.log.clone(),
        }
    }
}

type Answer = Response<ResponseBody<ResponseBody<Deadline>>>;

impl<K, R> Front<K, R>
where
    K: Service<Request<Incoming>, Response = Answer, Error = Infallible> + Clone,
    R: Receiver,
{
    async fn call(mut self, request: Request<Incoming>) -> Result<Answer, Infallible> {
        if request.method() == http::Method::GET {
            match request.uri().path() {
                "/healthz" => return Ok(self.healthz().await),
                "/metrics" => return Ok(self.metrics().await),
                _ => {}
            }
        }
        let started = Instant::now();
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let key = request
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let response = self.keyed.call(request).await?;
        let took = started.elapsed();
        let answered = response
            .extensions()
            .get::<Answered>()
            .copied()
            .unwrap_or(Answered::PassedThrough);
        self.metrics.answered(answered, took);
        if let Some(log) = &self.log {
            let line = serde_json::json!({
                "at": idem_store::now().0,
                "method": method.as_str(),
                "path": path,
                "key": key,
                "status": response.status().as_u16(),
                "answer": answered.name(),
                "ms": took.as_secs_f64() * 1_000.0,
            });
            let mut out = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A log that cannot be written does not fail the request.
            let _ = writeln!(out, "{line}");
        }
        Ok(response)
    }

    /// 200 when the store can take requests, 503 otherwise.
    async fn healthz(&self) -> Answer {
        let (status, body) = if self.store.ready().await {
            (200, "ready\n")
        } else {
            (503, "the store cannot take requests\n")
        };
        own(status, "text/plain; charset=utf-8", body.to_owned())
    }

    async fn metrics(&self) -> Answer {
        if let Some(counts) = self.store.commit_counts() {
            self.metrics.commit_counts(counts);
        }
        if self.metrics.unknown_keys_due()
            && let Ok(count) = self.store.unknown_keys().await
        {
            self.metrics.unknown_keys(count);
        }
        own(
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            self.metrics.text(),
        )
    }
}

/// An answer of the proxy itself.
fn own(status: u16, content_type: &'static str, body: String) -> Answer {
    let mut response = Response::new(http_body_util::Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    response
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

impl Upstream {
    /// Sends `request` upstream and returns its answer, or the proxy's own problem
    /// with the [`Settle`] its failure calls for.
    async fn forward(
        &self,
        request: Request<RequestBody<Incoming>>,
    ) -> Response<ResponseBody<Deadline>> {
        let (mut parts, body) = request.into_parts();
        // A keyed request's body was buffered; one passed through streams.
        let keyed = matches!(body, http_body_util::Either::Left(_));
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path}", self.prefix))
            .build();
        let Ok(uri) = uri else {
            return failed(
                Problem::new(400, "path-malformed", "path: not a valid request target"),
                Settle::Release,
            );
        };
        parts.uri = uri;
        strip_hop_by_hop(&mut parts.headers);
        if let Ok(host) = HeaderValue::from_str(self.authority.as_str()) {
            parts.headers.insert(http::header::HOST, host);
        }
        let started = Instant::now();
        // One deadline for the whole answer of a keyed request: its head here, its body
        // as it streams (a request passed through has its head's only).
        let deadline = tokio::time::Instant::now() + self.timeout;
        let sent = tokio::time::timeout_at(
            deadline,
            self.client.request(Request::from_parts(parts, body)),
        )
        .await;
        self.metrics.upstream(started.elapsed());
        match sent {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let body = Deadline::new(body, keyed.then_some(deadline), self.timeout);
                Response::from_parts(parts, http_body_util::Either::Right(body))
            }
            Ok(Err(e)) if e.is_connect() => failed(
                Problem::new(
                    502,
                    "upstream-unreachable",
                    format!(
                        "the upstream could not be reached ({}); nothing was sent, retry",
                        source(&e)
                    ),
                ),
                Settle::Release,
            ),
            Ok(Err(e)) => failed(
                Problem::new(
                    502,
                    "upstream-failed",
                    format!(
                        "the upstream failed after the request was sent ({}); it may have acted, the outcome under this key is unknown",
                        source(&e)
                    ),
                ),
                Settle::Unknown,
            ),
            Err(_) => failed(
                Problem::new(
                    504,
                    "upstream-timeout",
                    format!(
                        "the upstream did not answer within {} ms; it may have acted, the outcome under this key is unknown",
                        self.timeout.as_millis()
                    ),
                ),
                Settle::Unknown,
            ),
        }
    }
}

/// The innermost cause of a client error: the one that says what happened.
fn source(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn failed(problem: Problem, settle: Settle) -> Response<ResponseBody<Deadline>> {
    let answer = problem.answer();
    let mut response = Response::new(http_body_util::Either::Left(Full::new(Bytes::from(
        answer.body,
    ))));
    *response.status_mut() =
        http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response.extensions_mut().insert(settle);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_one_connection_are_not_forwarded() {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Session-Secret"),
            ("connection", " x-trace-hop "),
            ("x-session-secret", "s3cret"),
            ("x-trace-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("idempotency-key", "k-1"),
            ("content-type", "application/json"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-type", "idempotency-key"]);
    }
}
