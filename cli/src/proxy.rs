//! `idem proxy`: a reverse proxy that gives any HTTP backend idempotency keys, on the
//! store's tower layer (`idem_store::http`).
//!
//! The upstream call decides what becomes of a claimed key when it fails: a connection
//! that could not be made means the request was never sent (502, released: a retry
//! forwards it again); a failure after it was sent (a reset, a malformed answer, the
//! timeout) means the upstream may have acted (502 or 504, the key Unknown).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_core::Config;
use idem_core::http::Problem;
use idem_store::Receiver;
use idem_store::http::{
    AnswerConfig, IdempotencyLayer, ReplayStatus, RequestBody, ResponseBody, Settings, Settle,
    Tenant,
};
use tower::Layer;

use crate::args::ProxyArgs;
use crate::exit::{Ending, Failure};
use crate::session::{Access, Session};

/// How long a stop waits for the requests in flight.
const DRAIN: Duration = Duration::from_secs(30);

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

/// The upstream: where requests go and the client that takes them.
#[derive(Clone)]
struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The URL's path without its trailing `/`, put before every request's path.
    prefix: String,
    client: Client<HttpConnector, RequestBody<Incoming>>,
    timeout: Duration,
}

pub(crate) fn run(session: &Session, args: &ProxyArgs) -> Ending {
    let settings = settings(args)?;
    let upstream = upstream(args)?;
    let store = Arc::new(session.open(Config::default(), Access::Create)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("proxy: cannot start the runtime: {e}")))?;
    runtime.block_on(serve(args.listen, store, settings, upstream))?;
    Ok(0)
}

fn settings(args: &ProxyArgs) -> Result<Settings, Failure> {
    let tenant = match (&args.tenant, &args.tenant_header) {
        (Some(name), _) => {
            idem_core::RecordId::new(name, "o", "k")
                .map_err(|e| Failure::usage(format!("--tenant: {}", e.problem())))?;
            Tenant::Fixed(name.clone())
        }
        (None, Some(header)) => Tenant::Header(header_name("--tenant-header", header)?),
        (None, None) => Settings::default().tenant,
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

fn upstream(args: &ProxyArgs) -> Result<Upstream, Failure> {
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
    })
}

/// Serves on `listen` until a stop signal, on any receiver.
async fn serve<R: Receiver>(
    listen: SocketAddr,
    store: Arc<R>,
    settings: Settings,
    upstream: Upstream,
) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::runtime(format!("--listen {listen}: {e}")))?;
    let forward = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
        let upstream = upstream.clone();
        async move { Ok::<_, Infallible>(upstream.forward(request).await) }
    });
    let service = IdempotencyLayer::new(store, settings).layer(forward);
    println!("listening http://{local}");
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop_signal());
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted (reset, out of files):
                // the next one may work.
                Err(_) => continue,
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(service.clone()),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that hangs up mid-request: its claimed request finishes anyway.
            let _ = connection.await;
        });
    }
    drop(listener);
    eprintln!("idem proxy: stopping, finishing the requests in flight");
    tokio::select! {
        () = graceful.shutdown() => Ok(()),
        () = tokio::time::sleep(DRAIN) => Err(Failure::runtime(format!(
            "proxy: requests still in flight after {} s, stopped anyway; their keys stay pending until their lease ends",
            DRAIN.as_secs()
        ))),
    }
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
    ) -> Response<ResponseBody<Incoming>> {
        let (mut parts, body) = request.into_parts();
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
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        if let Ok(host) = HeaderValue::from_str(self.authority.as_str()) {
            parts.headers.insert(http::header::HOST, host);
        }
        let sent = tokio::time::timeout(
            self.timeout,
            self.client.request(Request::from_parts(parts, body)),
        );
        match sent.await {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                for name in HOP_BY_HOP {
                    parts.headers.remove(name);
                }
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

fn failed(problem: Problem, settle: Settle) -> Response<ResponseBody<Incoming>> {
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
