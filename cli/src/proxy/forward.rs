//! Forwarding to the upstream: its client, and what a request and its answer become.
//!
//! Hop-by-hop headers are removed both ways; when the upstream fails, the proxy answers
//! with a problem of its own and the [`Settle`] its failure calls for.
//!
//! The upstream call decides what becomes of a claimed key when it fails: a connection
//! that could not be made means the request was never sent (502, released: a retry
//! forwards it again); a failure after it was sent (a reset, a malformed answer, the
//! timeout) means the upstream may have acted (502 or 504, the key Unknown).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_core::http::Problem;
use idem_store::http::{RequestBody, ResponseBody, Settle};

use super::ProxyArgs;
use super::deadline::Deadline;
use super::metrics::Metrics;
use super::trace::{Exported, KEPT_TRACE};
use crate::exit::Failure;

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
pub(super) struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The URL's path without its trailing `/`, put before every request's path.
    prefix: String,
    client: Client<HttpConnector, RequestBody<Incoming>>,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

/// The upstream `--upstream` names, with its client and `--upstream-timeout`.
pub(super) fn upstream(args: &ProxyArgs, metrics: Arc<Metrics>) -> Result<Upstream, Failure> {
    let given = args.upstream.as_deref().unwrap_or_default();
    let bad = |rule: &str| Failure::usage(format!("--upstream: {given:?} {rule}"));
    let uri: Uri = given.parse().map_err(|_| bad("is not a URL"))?;
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

impl Upstream {
    /// Sends `request` upstream and returns its answer, or the proxy's own problem
    /// with the [`Settle`] its failure calls for.
    pub(super) async fn forward(
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
        // The proxy's span, for the outcome to keep (see `trace`).
        let trace = parts
            .extensions
            .get::<Exported>()
            .and_then(|_| parts.headers.get("traceparent").cloned());
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
                parts.headers.remove(KEPT_TRACE);
                if let Some(trace) = trace {
                    parts.headers.insert(KEPT_TRACE, trace);
                }
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
