//! The admin listener (`--admin-listen`, loopback by default): the proxy's own
//! `GET /healthz` and `GET /metrics`, apart from the public listener, which forwards
//! every path to the backend.
//!
//! An operator's endpoints stay off the port clients reach, as Envoy's admin port and
//! Linkerd's do: a backend's own `/metrics` and `/healthz` are reached through the proxy
//! as before it stood in front.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use idem_store::Receiver;
use idem_store::http::Unsettled;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// The most admin connections served at once: scrapes and health checks are few.
const CONNECTIONS: usize = 64;

/// What the admin listener answers from.
pub(super) struct Admin<R> {
    pub(super) store: Arc<R>,
    pub(super) metrics: Arc<Metrics>,
    /// The layer's settlements kept until the store takes them.
    pub(super) unsettled: Arc<dyn Fn() -> Unsettled + Send + Sync>,
    /// Set when the proxy stops: `/healthz` answers 503 from then on, so that a load
    /// balancer sends no more requests while the ones in flight finish.
    pub(super) stopping: Arc<AtomicBool>,
}

impl<R: Receiver + 'static> Admin<R> {
    /// Serves `listener` until the task running it is aborted.
    pub(super) async fn serve(self: Arc<Self>, listener: TcpListener) {
        let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
        loop {
            let Ok(permit) = Arc::clone(&connections).acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                // Reset before it was accepted, or out of files: a breath, then the next.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let admin = Arc::clone(&self);
            let service = tower::service_fn(move |request: Request<Incoming>| {
                let admin = Arc::clone(&admin);
                async move { Ok::<_, Infallible>(admin.answer(&request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            tokio::spawn(async move {
                let _ = connection.await;
                drop(permit);
            });
        }
    }

    async fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        if !matches!(path, "/healthz" | "/metrics") {
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "{path}: not an endpoint of the admin listener, which answers GET /healthz and GET /metrics; the backend's paths are on the public listener (--listen)\n"
                ),
            );
        }
        if request.method() != Method::GET && request.method() != Method::HEAD {
            let mut answer = text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{path} answers GET\n"),
            );
            answer
                .headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return answer;
        }
        if path == "/healthz" {
            self.healthz().await
        } else {
            self.scrape().await
        }
    }

    /// 200 when the store can take requests; 503 with the cause otherwise (a full disk,
    /// a database that does not answer) and while the proxy stops. A durability risk
    /// accepted at connect is named either way.
    async fn healthz(&self) -> Response<Full<Bytes>> {
        let risk = self
            .store
            .accepted_risk()
            .map(|risk| format!("durability risk accepted: {risk} (accept_unsafe_durability)\n"))
            .unwrap_or_default();
        if self.stopping.load(Ordering::SeqCst) {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("stopping: finishing the requests in flight, taking no new ones\n{risk}"),
            );
        }
        match self.store.unready().await {
            // Degraded is still ready: every replica of a fleet shares the database, so
            // taking one out of a load balancer would not help; the operator is told.
            None => match self.store.degraded().await {
                None => text(StatusCode::OK, format!("ready\n{risk}")),
                Some(why) => text(StatusCode::OK, format!("ready, degraded: {why}\n{risk}")),
            },
            Some(cause) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the store cannot take requests: {cause}\n{risk}"),
            ),
        }
    }

    async fn scrape(&self) -> Response<Full<Bytes>> {
        if let Some(counts) = self.store.commit_counts() {
            self.metrics.commit_counts(counts);
        }
        self.metrics.unsettled((self.unsettled)());
        self.metrics
            .risk_accepted(self.store.accepted_risk().is_some());
        self.metrics.degraded(self.store.degraded().await.is_some());
        if self.metrics.unknown_keys_due()
            && let Ok(count) = self.store.unknown_keys().await
        {
            self.metrics.unknown_keys(count);
        }
        let mut answer = Response::new(Full::new(Bytes::from(self.metrics.text())));
        answer.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        );
        answer
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}
