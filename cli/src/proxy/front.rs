//! The proxy's front on its public listener: every request through the idempotency
//! layer (the CORS preflights of the origins `--cors-origin` names answered here),
//! counted and written to the access log. The proxy's own endpoints are on the admin
//! listener ([`super::admin`]), so every path reaches the backend.

use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use idem_store::http::{Answered, ResponseBody, Waited};
use tower::Service;

use super::cors::Cors;
use super::deadline::Deadline;
use super::metrics::Metrics;
use super::routes::Pattern;
use super::trace::{Ended, KEPT_TRACE, TraceParent, Tracing};

/// Where the access log goes: one JSON line per request.
pub(super) type AccessLog = Arc<Mutex<Box<dyn Write + Send>>>;

/// The layers of the routes (`--routes`) and the default one, each on the upstream.
pub(super) struct Router<K> {
    /// Each route's pattern, methods and service, first match first.
    pub(super) routes: Vec<(Pattern, Vec<Method>, K)>,
    /// For the requests that match no route: the flags' rules.
    pub(super) default: K,
}

impl<K> Router<K> {
    /// The service of the first route that matches `method` and `path` with that
    /// route's pattern, else the default.
    fn pick(&self, method: &Method, path: &str) -> (&K, Option<&Pattern>) {
        self.routes
            .iter()
            .find(|(pattern, methods, _)| methods.contains(method) && pattern.matches(path))
            .map_or((&self.default, None), |(pattern, _, service)| {
                (service, Some(pattern))
            })
    }
}

/// The proxy's front: every request through the idempotency layer of its route, each
/// counted and logged.
pub(super) struct Front<K> {
    pub(super) keyed: Arc<Router<K>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) log: Option<AccessLog>,
    pub(super) cors: Arc<Cors>,
    pub(super) tracing: Arc<Tracing>,
}

type Answer = Response<ResponseBody<ResponseBody<Deadline>>>;

impl<K> Clone for Front<K> {
    fn clone(&self) -> Self {
        Front {
            keyed: Arc::clone(&self.keyed),
            metrics: Arc::clone(&self.metrics),
            log: self.log.clone(),
            cors: Arc::clone(&self.cors),
            tracing: Arc::clone(&self.tracing),
        }
    }
}

impl<K> Front<K>
where
    K: Service<Request<Incoming>, Response = Answer, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    K::Future: Send,
{
    pub(super) async fn call(self, request: Request<Incoming>) -> Result<Answer, Infallible> {
        // A page of an origin `--cors-origin` named: its preflight is answered here, and
        // every answer it gets, the proxy's own included, is readable to it.
        let Some(origin) = self.cors.allowed(request.headers()) else {
            return self.answer(request).await;
        };
        if Cors::is_preflight(request.method(), request.headers()) {
            let mut preflight = own(204, "text/plain; charset=utf-8", String::new());
            Cors::preflight(origin, request.headers(), preflight.headers_mut());
            return Ok(preflight);
        }
        let mut answer = self.answer(request).await?;
        Cors::expose(origin, answer.headers_mut());
        Ok(answer)
    }

    async fn answer(self, request: Request<Incoming>) -> Result<Answer, Infallible> {
        if request.headers().contains_key("idempotency-key") {
            // A keyed request runs to its answer also when its client hangs up (the layer
            // settles its key): in a task of its own, so that it is counted and logged
            // too.
            return match tokio::spawn(self.served(request)).await {
                Ok(answer) => answer,
                Err(_) => Ok(own(
                    500,
                    "text/plain; charset=utf-8",
                    "the proxy failed this request\n".to_owned(),
                )),
            };
        }
        self.served(request).await
    }

    /// The answer of the layer to `request`, counted and logged.
    async fn served(self, mut request: Request<Incoming>) -> Result<Answer, Infallible> {
        let started = Instant::now();
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let key = request
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (keyed, route) = self.keyed.pick(request.method(), request.uri().path());
        let (mut keyed, route) = (keyed.clone(), route.map(|p| p.text.clone()));
        let traced = self.tracing.begin(&mut request);
        let mut response = keyed.call(request).await?;
        let took = started.elapsed();
        let answered = response
            .extensions()
            .get::<Answered>()
            .copied()
            .unwrap_or(Answered::PassedThrough);
        // The trace context kept with the outcome is the proxy's, never the client's.
        let ran_in = response
            .headers_mut()
            .remove(KEPT_TRACE)
            .and_then(|value| TraceParent::parse(value.to_str().ok()?))
            .filter(|_| answered == Answered::Replayed);
        self.metrics.answered(answered, took);
        if let Some(waited) = response.extensions().get::<Waited>() {
            self.metrics.waited(*waited);
        }
        if let Some(log) = &self.log {
            let line = serde_json::json!({
                "at": idem_store::now().0,
                "method": method.as_str(),
                "path": path,
                "key": key,
                "status": response.status().as_u16(),
                "answer": answered.name(),
                "ms": took.as_secs_f64() * 1_000.0,
                "trace_id": traced.trace_id,
                "span_id": traced.span_id,
            });
            let mut out = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A log that cannot be written does not fail the request.
            let _ = writeln!(out, "{line}");
        }
        self.tracing.end(
            traced,
            &Ended {
                method: method.as_str(),
                path: &path,
                route: route.as_deref(),
                status: response.status().as_u16(),
                answer: answered.name(),
                key: key.as_deref(),
                ran_in,
            },
        );
        Ok(response)
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
