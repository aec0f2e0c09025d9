//! The HTTP layer against a tower service, without sockets: docs/design.md §10's table, the
//! settling of claims (2xx and 4xx kept, 5xx released, panics Unknown), bad input, and
//! concurrent requests under one key.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use idem_store::http::{IdempotencyLayer, ReplayStatus, RequestBody, Settings, Settle, Tenant};
use idem_store::{RecordId, State, Store};
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;

struct Harness {
    store: Arc<Store>,
    executions: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path().join("http.redb")).unwrap());
        Harness {
            store,
            executions: Arc::new(AtomicUsize::new(0)),
            _dir: dir,
        }
    }

    /// A store that keeps a settled outcome for `retention_ms`, then its tombstone.
    fn with_retention(retention_ms: u64) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let config = idem_store::Config {
            success_retention_ms: retention_ms,
            failure_retention_ms: retention_ms,
            ..idem_store::Config::default()
        };
        let store = Store::builder()
            .config(config)
            .open(dir.path().join("http.redb"))
            .unwrap();
        Harness {
            store: Arc::new(store),
            executions: Arc::new(AtomicUsize::new(0)),
            _dir: dir,
        }
    }

    /// The layer around a handler that counts its runs and answers `status` with the
    /// request body echoed in JSON.
    fn service(
        &self,
        settings: Settings,
        status: u16,
    ) -> impl Service<
        Request<Body>,
        Response = Response<impl http_body::Body<Data = Bytes, Error = impl std::fmt::Debug>>,
        Error = Infallible,
    > + Clone {
        let executions = Arc::clone(&self.executions);
        let handler = tower::service_fn(move |request: Request<RequestBody<Body>>| {
            let executions = Arc::clone(&executions);
            async move {
                let n = executions.fetch_add(1, Ordering::SeqCst) + 1;
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let text = format!(
                    "{{\"order\":{n},\"request\":{}}}",
                    String::from_utf8_lossy(&body)
                );
                let response = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .header("location", format!("/orders/{n}"))
                    .header("x-not-kept", "1")
                    .body(Full::new(Bytes::from(text)))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        IdempotencyLayer::new(Arc::clone(&self.store), settings).layer(handler)
    }

    fn executions(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }

    fn record(&self, key: &str) -> Option<State> {
        let id = RecordId::new("shop", "POST /orders", key).unwrap();
        self.store.get(&id).unwrap().map(|r| r.state())
    }
}

fn settings() -> Settings {
    Settings {
        tenant: Tenant::Fixed("shop".into()),
        ..Settings::default()
    }
}

fn post(key: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post("/orders").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

struct Answered {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Answered {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// A problem document: its content type and its `idempotency` code.
    fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.body
        );
        let json: serde_json::Value = serde_json::from_str(&self.body).unwrap();
        assert_eq!(json["status"], self.status, "{}", self.body);
        json["idempotency"].as_str().unwrap().to_owned()
    }
}

async fn send<S, B>(service: &mut S, request: Request<Body>) -> Answered
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible>,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answered {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

const KEY: &str = "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";
const KEY_BARE: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

#[tokio::test]
async fn first_request_runs_retries_replay_another_body_conflicts() {
    let h = Harness::new();
    let mut service = h.service(settings(), 201);
    let first = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), None);
    // The same request, its JSON written another way: the stored answer, byte for byte.
    let again = send(&mut service, post(Some(KEY), r#"{ "item" : "tea" }"#)).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("location"), Some("/orders/1"));
    assert_eq!(again.header("x-not-kept"), None, "only the kept headers");
    let other = send(&mut service, post(Some(KEY), r#"{"item":"coffee"}"#)).await;
    assert_eq!(other.status, 422);
    assert_eq!(other.problem(), "conflict");
    assert_eq!(h.executions(), 1);
    assert_eq!(h.record(KEY_BARE), Some(State::Succeeded));

    let ok = Settings {
        answers: idem_store::http::AnswerConfig {
            replay_status: ReplayStatus::Ok,
            ..Default::default()
        },
        ..settings()
    };
    let mut service = h.service(ok, 201);
    let replay = send(&mut service, post(Some(KEY_BARE), r#"{"item":"tea"}"#)).await;
    assert_eq!(replay.status, 200, "a bare token is the same key");
    assert_eq!(replay.body, first.body);
    assert_eq!(h.executions(), 1);
}

#[tokio::test]
async fn a_retry_past_the_retention_is_gone_and_does_not_run() {
    let h = Harness::with_retention(50);
    // The layer's clock, moved by the test instead of waiting for time to pass.
    let time = Arc::new(std::sync::atomic::AtomicU64::new(1_700_000_000_000));
    let clock = {
        let time = Arc::clone(&time);
        Arc::new(move || idem_store::Timestamp(time.load(Ordering::SeqCst)))
    };
    let mut service = h.service(
        Settings {
            clock,
            ..settings()
        },
        201,
    );
    let first = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
    assert_eq!(first.status, 201);
    let later = time.fetch_add(120, Ordering::SeqCst) + 120;
    // Swept or not, the outcome is past its retention: only the tombstone answers.
    for sweep in [false, true] {
        if sweep {
            let report = h
                .store
                .sweep(idem_store::Timestamp(later), 100, false)
                .unwrap();
            assert_eq!(report.tombstoned, 1, "{report:?}");
        }
        let late = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
        assert_eq!(late.status, 410, "{}", late.body);
        assert_eq!(late.problem(), "forgotten");
        assert_eq!(h.executions(), 1, "a forgotten request does not run again");
    }
    assert_eq!(h.record(KEY_BARE), Some(State::Forgotten));
}

#[tokio::test]
async fn a_definitive_4xx_is_kept_a_5xx_releases() {
    let h = Harness::new();
    let mut failing = h.service(settings(), 404);
    assert_eq!(
        send(&mut failing, post(Some("\"a\""), "{}")).await.status,
        404
    );
    assert_eq!(
        send(&mut failing, post(Some("\"a\""), "{}")).await.status,
        404
    );
    assert_eq!(h.executions(), 1);
    assert_eq!(h.record("a"), Some(State::Failed));

    let mut broken = h.service(settings(), 500);
    assert_eq!(
        send(&mut broken, post(Some("\"b\""), "{}")).await.status,
        500
    );
    assert_eq!(h.record("b"), None, "released");
    let mut fixed = h.service(settings(), 201);
    assert_eq!(
        send(&mut fixed, post(Some("\"b\""), "{}")).await.status,
        201
    );
    assert_eq!(h.executions(), 3, "the retry after a 5xx ran again");
}

#[tokio::test]
async fn bad_input_is_a_problem_and_stores_nothing() {
    let h = Harness::new();
    let required = Settings {
        require_key: true,
        body_limit: 64,
        ..settings()
    };
    let mut service = h.service(required, 201);
    let missing = send(&mut service, post(None, "{}")).await;
    assert_eq!(
        (missing.status, missing.problem().as_str()),
        (400, "key-missing")
    );
    let malformed = send(&mut service, post(Some("\"open"), "{}")).await;
    assert_eq!(
        (malformed.status, malformed.problem().as_str()),
        (400, "key-malformed")
    );
    let mut two = post(Some("\"k\""), "{}");
    two.headers_mut()
        .append("idempotency-key", "\"k\"".parse().unwrap());
    let two = send(&mut service, two).await;
    assert_eq!((two.status, two.problem().as_str()), (400, "key-repeated"));
    let long = format!("\"{}\"", "k".repeat(256));
    let long = send(&mut service, post(Some(&long), "{}")).await;
    assert_eq!(
        (long.status, long.problem().as_str()),
        (400, "key-malformed")
    );
    assert!(
        long.body.contains("256 bytes, at most 255"),
        "{}",
        long.body
    );
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(100));
    let too_large = send(&mut service, post(Some("\"big\""), &big)).await;
    assert_eq!(
        (too_large.status, too_large.problem().as_str()),
        (413, "body-too-large")
    );
    let not_json = send(&mut service, post(Some("\"nj\""), "{\"a\":")).await;
    assert_eq!(
        (not_json.status, not_json.problem().as_str()),
        (400, "body-malformed")
    );
    assert_eq!(h.executions(), 0);
    for key in ["k", "big", "nj"] {
        assert_eq!(h.record(key), None, "{key}");
    }
    assert_eq!(h.store.generation().unwrap().0, 0, "no claim was ever made");

    // Without `require_key`, a request without a key passes through, unrecorded.
    let mut optional = h.service(settings(), 201);
    assert_eq!(send(&mut optional, post(None, "{}")).await.status, 201);
    assert_eq!(h.store.generation().unwrap().0, 0);
}

#[tokio::test]
async fn the_tenant_comes_from_the_configured_header() {
    let h = Harness::new();
    let mut service = h.service(Settings::default(), 201);
    let anonymous = send(&mut service, post(Some("\"t\""), "{}")).await;
    assert_eq!(
        (anonymous.status, anonymous.problem().as_str()),
        (400, "tenant-missing")
    );
    let mut request = post(Some("\"t\""), "{}");
    request
        .headers_mut()
        .insert("x-tenant", "shop".parse().unwrap());
    assert_eq!(send(&mut service, request).await.status, 201);
    assert_eq!(h.record("t"), Some(State::Succeeded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_or_says_unknown_leaves_the_key_unknown() {
    let h = Harness::new();
    let runs = Arc::clone(&h.executions);
    let handler = tower::service_fn(move |request: Request<RequestBody<Body>>| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if request.uri().path() == "/panic" {
                panic!("the handler failed halfway");
            }
            let mut response = Response::new(Full::new(Bytes::from_static(b"timeout")));
            *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
            response.extensions_mut().insert(Settle::Unknown);
            Ok::<_, Infallible>(response)
        }
    });
    let mut service = IdempotencyLayer::new(Arc::clone(&h.store), settings()).layer(handler);
    let request = |path: &str| {
        Request::post(path)
            .header("idempotency-key", "\"p\"")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let panicked = send(&mut service, request("/panic")).await;
    assert_eq!(
        (panicked.status, panicked.problem().as_str()),
        (500, "handler-panicked")
    );
    let id = RecordId::new("shop", "POST /panic", "p").unwrap();
    assert_eq!(
        h.store.get(&id).unwrap().map(|r| r.state()),
        Some(State::Unknown)
    );
    let retry = send(&mut service, request("/panic")).await;
    assert_eq!((retry.status, retry.problem().as_str()), (503, "unknown"));
    assert_eq!(retry.header("retry-after"), Some("60"));

    let timed_out = send(&mut service, request("/slow")).await;
    assert_eq!(timed_out.status, 504);
    let id = RecordId::new("shop", "POST /slow", "p").unwrap();
    assert_eq!(
        h.store.get(&id).unwrap().map(|r| r.state()),
        Some(State::Unknown)
    );
    assert_eq!(h.executions(), 2, "an Unknown key never runs again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_under_one_key_run_once() {
    let h = Harness::new();
    let entered = Arc::new(tokio::sync::Notify::new());
    let (finish, finished) = tokio::sync::watch::channel(false);
    let runs = Arc::clone(&h.executions);
    let handler = {
        let entered = Arc::clone(&entered);
        tower::service_fn(move |_request: Request<RequestBody<Body>>| {
            let (runs, entered, mut finished) =
                (Arc::clone(&runs), Arc::clone(&entered), finished.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                entered.notify_one();
                finished.wait_for(|done| *done).await.unwrap();
                let mut response = Response::new(Full::new(Bytes::from_static(b"done")));
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        })
    };
    let service = IdempotencyLayer::new(Arc::clone(&h.store), settings()).layer(handler);
    let mut first = service.clone();
    let first = tokio::spawn(async move { send(&mut first, post(Some(KEY), "{}")).await });
    entered.notified().await;
    // While the first runs, 63 more: each is told to come back later.
    let others: Vec<_> = (0..63)
        .map(|_| {
            let mut service = service.clone();
            tokio::spawn(async move { send(&mut service, post(Some(KEY), "{}")).await })
        })
        .collect();
    for other in others {
        let answered = other.await.unwrap();
        assert_eq!(answered.status, 409, "{}", answered.body);
        assert_eq!(answered.problem(), "in-progress");
        let retry_after: u64 = answered.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=30).contains(&retry_after), "{retry_after}");
    }
    finish.send(true).unwrap();
    assert_eq!(first.await.unwrap().status, 201);
    let mut late = service.clone();
    let replay = send(&mut late, post(Some(KEY), "{}")).await;
    assert_eq!((replay.status, replay.body.as_str()), (201, "done"));
    assert_eq!(h.executions(), 1);
}

/// A waker that records that it was woken.
struct Woken(std::sync::atomic::AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_request_dropped_at_any_point_leaves_its_key_released_or_forwarded() {
    use std::future::Future;
    use std::task::{Context, Waker};
    use std::time::{Duration, Instant};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The handler's task is spawned on this runtime; the test polls the request itself.
    let _entered = runtime.enter();
    let h = Harness::new();
    let service = h.service(settings(), 201);
    let mut reached_the_end = false;
    let mut keys = Vec::new();
    // A client hangs up after its request was polled `polls` times: right after a poll
    // (its input queued, the commit not yet done), or once its waker was woken (the
    // answer there, not yet read).
    for polls in 1..40 {
        for at_once in [true, false] {
            let key = format!("hang-{polls}-{at_once}");
            let woken = Arc::new(Woken(false.into()));
            let waker = Waker::from(Arc::clone(&woken));
            let mut context = Context::from_waker(&waker);
            let mut call = Box::pin(
                service
                    .clone()
                    .oneshot(post(Some(&format!("\"{key}\"")), r#"{"item":"tea"}"#)),
            );
            for poll in 1..=polls {
                woken.0.store(false, Ordering::SeqCst);
                if call.as_mut().poll(&mut context).is_ready() {
                    reached_the_end = true;
                    break;
                }
                if poll == polls && at_once {
                    break;
                }
                let deadline = Instant::now() + Duration::from_secs(10);
                while !woken.0.load(Ordering::SeqCst) {
                    assert!(Instant::now() < deadline, "{key}: never woken");
                    std::thread::yield_now();
                }
            }
            drop(call);
            keys.push(key);
        }
        if reached_the_end {
            break;
        }
    }
    assert!(
        reached_the_end,
        "every request was dropped before it was answered"
    );
    // Every key ends released (the handler did not run) or settled; none stays Pending.
    let deadline = Instant::now() + Duration::from_secs(10);
    let states: Vec<Option<State>> = loop {
        let states: Vec<Option<State>> = keys.iter().map(|key| h.record(key)).collect();
        if !states.contains(&Some(State::Pending)) {
            break states;
        }
        assert!(Instant::now() < deadline, "stranded: {keys:?} {states:?}");
        std::thread::yield_now();
    };
    let settled = states
        .iter()
        .filter(|state| **state == Some(State::Succeeded))
        .count();
    assert!(
        states
            .iter()
            .all(|state| matches!(state, None | Some(State::Succeeded))),
        "{states:?}"
    );
    assert_eq!(
        h.executions(),
        settled,
        "a handler ran without its answer kept"
    );
    assert!(states.contains(&None), "no hang-up came before the claim");
}

/// A receiver over a [`Store`] whose begin fails while `failing` is set: the layer on
/// another implementation of the seam than the redb store itself.
struct Flaky {
    store: Store,
    failing: std::sync::atomic::AtomicBool,
}

impl idem_store::Receiver for Flaky {
    fn config(&self) -> &idem_store::Config {
        self.store.config()
    }

    async fn ready(&self) -> bool {
        !self.failing.load(Ordering::SeqCst)
    }

    async fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: idem_store::Fingerprint,
        now: idem_store::Timestamp,
        terms: idem_store::Terms,
    ) -> Result<idem_store::Decision, idem_store::Error> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(idem_store::Error::Busy {
                waited: std::time::Duration::from_secs(5),
            });
        }
        idem_store::Receiver::begin_with(&self.store, id, fingerprint, now, terms).await
    }

    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: idem_store::Generation,
        now: idem_store::Timestamp,
        terms: idem_store::Terms,
    ) -> Result<idem_store::Record, idem_store::Error> {
        idem_store::Receiver::heartbeat_with(&self.store, id, generation, now, terms).await
    }

    async fn complete_with(
        &self,
        id: &RecordId,
        generation: idem_store::Generation,
        verdict: idem_store::Verdict,
        outcome: idem_store::Outcome,
        now: idem_store::Timestamp,
        terms: idem_store::Terms,
    ) -> Result<idem_store::Record, idem_store::Error> {
        idem_store::Receiver::complete_with(
            &self.store,
            id,
            generation,
            verdict,
            outcome,
            now,
            terms,
        )
        .await
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: idem_store::Generation,
        now: idem_store::Timestamp,
    ) -> Result<(), idem_store::Error> {
        idem_store::Receiver::release(&self.store, id, generation, now).await
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: idem_store::Generation,
        now: idem_store::Timestamp,
    ) -> Result<idem_store::Record, idem_store::Error> {
        idem_store::Receiver::mark_unknown(&self.store, id, generation, now).await
    }

    async fn resolve(
        &self,
        id: &RecordId,
        resolution: idem_store::Resolution,
        now: idem_store::Timestamp,
    ) -> Result<Option<idem_store::Record>, idem_store::Error> {
        idem_store::Receiver::resolve(&self.store, id, resolution, now).await
    }

    fn give_up(
        &self,
        id: &RecordId,
        generation: idem_store::Generation,
        how: idem_store::GiveUp,
        now: idem_store::Timestamp,
    ) {
        idem_store::Receiver::give_up(&self.store, id, generation, how, now);
    }

    async fn get(&self, id: &RecordId) -> Result<Option<idem_store::Record>, idem_store::Error> {
        self.store.get(id)
    }

    async fn list(
        &self,
        filter: &idem_store::ListFilter,
    ) -> Result<Vec<(RecordId, idem_store::Record)>, idem_store::Error> {
        idem_store::Receiver::list(&self.store, filter).await
    }

    async fn stats(
        &self,
        now: idem_store::Timestamp,
    ) -> Result<idem_store::maintain::Stats, idem_store::MaintainError> {
        self.store.stats(now)
    }

    async fn sweep(
        &self,
        now: idem_store::Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<idem_store::maintain::SweepReport, idem_store::Error> {
        self.store.sweep(now, limit, dry_run)
    }

    async fn recover_abandoned(
        &self,
        now: idem_store::Timestamp,
        limit: usize,
    ) -> Result<idem_store::maintain::Abandoned, idem_store::Error> {
        idem_store::Receiver::recover_abandoned(&self.store, now, limit).await
    }

    async fn reconcile<E: Send>(
        &self,
        now: idem_store::Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &idem_store::Record) -> Result<idem_store::maintain::Check, E>
        + Send,
    ) -> Result<idem_store::maintain::ReconcileReport, idem_store::maintain::ReconcileError<E>>
    {
        self.store.reconcile(now, limit, checker)
    }

    async fn export(
        &self,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<idem_store::maintain::Transferred, idem_store::MaintainError> {
        self.store.export(out)
    }

    async fn import(
        &self,
        input: &mut (dyn std::io::BufRead + Send),
    ) -> Result<idem_store::maintain::Transferred, idem_store::ImportError> {
        self.store.import(input)
    }
}

#[tokio::test]
async fn the_layer_runs_on_any_receiver_and_a_failed_begin_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Arc::new(Flaky {
        store: Store::open(dir.path().join("flaky.redb")).unwrap(),
        failing: true.into(),
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        tower::service_fn(move |_request: Request<RequestBody<Body>>| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"made")))) }
        })
    };
    let mut service = IdempotencyLayer::new(Arc::clone(&receiver), settings()).layer(handler);
    let failed = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert_eq!(failed.problem(), "store-failed");
    assert_eq!(failed.header("retry-after"), Some("1"));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing runs without a claim"
    );

    receiver.failing.store(false, Ordering::SeqCst);
    let first = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
    let retry = send(&mut service, post(Some(KEY), r#"{"item":"tea"}"#)).await;
    assert_eq!((first.status, retry.status), (200, 200));
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let id = RecordId::new("shop", "POST /orders", KEY_BARE).unwrap();
    assert_eq!(
        receiver.store.get(&id).unwrap().map(|r| r.state()),
        Some(State::Succeeded)
    );
}

/// A claimed request whose client hung up runs on, counted by the layer until its key is
/// settled: what a server waits for before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_by_its_client_is_running_until_its_key_is_settled() {
    let harness = Harness::new();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let wait = Arc::new(std::sync::Mutex::new(Some(wait)));
    let handler = tower::service_fn(move |_: Request<RequestBody<Body>>| {
        let wait = wait.lock().unwrap().take();
        async move {
            if let Some(wait) = wait {
                let _ = wait.await;
            }
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
        }
    });
    let layer = IdempotencyLayer::new(Arc::clone(&harness.store), settings());
    let running = layer.running();
    let service = layer.layer(handler);
    let request = service.oneshot(post(Some(KEY), "{}"));
    // The client hangs up while the handler runs.
    let gone = tokio::time::timeout(std::time::Duration::from_millis(200), request).await;
    assert!(gone.is_err(), "the handler is still waiting");
    assert_eq!(running.count(), 1);
    assert_eq!(harness.record(KEY_BARE), Some(State::Pending));
    let idle = tokio::spawn({
        let running = running.clone();
        async move { running.idle().await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!idle.is_finished(), "idle waits for the request");
    go.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), idle)
        .await
        .expect("idle once the key is settled")
        .unwrap();
    assert_eq!(harness.record(KEY_BARE), Some(State::Succeeded));
}

/// A response body whose first frame is an error.
struct Failing(Option<Box<dyn std::error::Error + Send + Sync>>);

impl http_body::Body for Failing {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(Err))
    }
}

/// A handler whose body fails with a [`BodyFailed`] gets that problem answered, and its
/// key is Unknown; any other body failure is the layer's 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_fails_with_a_problem_is_answered_with_it() {
    use idem_store::http::BodyFailed;
    let harness = Harness::new();
    let handler = tower::service_fn(|request: Request<RequestBody<Body>>| async move {
        let failure: Box<dyn std::error::Error + Send + Sync> = if request.uri().path() == "/orders"
        {
            Box::new(BodyFailed(idem_core::http::Problem::new(
                504,
                "upstream-timeout",
                "the upstream stalled",
            )))
        } else {
            "a broken pipe".into()
        };
        let body = Failing(Some(failure));
        Ok::<_, Infallible>(Response::new(body))
    });
    let mut service = IdempotencyLayer::new(Arc::clone(&harness.store), settings()).layer(handler);
    let answer = send(&mut service, post(Some(KEY), "{}")).await;
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (504, "upstream-timeout")
    );
    assert_eq!(harness.record(KEY_BARE), Some(State::Unknown));
    let mut other = post(Some("\"k-2\""), "{}");
    *other.uri_mut() = "/refunds".parse().unwrap();
    let answer = send(&mut service, other).await;
    assert_eq!(
        (answer.status, answer.problem().as_str()),
        (500, "handler-failed")
    );
}

/// The watchdog: a handler that runs more than three times the lease keeps its key,
/// since the layer extends the lease while it runs: the lease never runs out meanwhile,
/// a duplicate is in progress (never unknown), and the request runs once and settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_the_lease_keeps_its_key_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = idem_store::Config {
        lease_ms: 300,
        ..idem_store::Config::default()
    };
    let store = Arc::new(
        Store::builder()
            .config(config)
            .open(dir.path().join("http.redb"))
            .unwrap(),
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let handler = tower::service_fn({
        let executions = Arc::clone(&executions);
        move |_: Request<RequestBody<Body>>| {
            executions.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"{\"paid\":1}",
                ))))
            }
        }
    });
    let service = IdempotencyLayer::new(Arc::clone(&store), settings()).layer(handler);
    let first = tokio::spawn(service.clone().oneshot(post(Some(KEY), "{}")));
    let id = RecordId::new("shop", "POST /orders", KEY_BARE).unwrap();
    let started = std::time::Instant::now();
    let mut looked = 0;
    let mut duplicate = None;
    while !first.is_finished() {
        if let Some(record) = store.get(&id).unwrap() {
            // Settled as the handler returned, a moment before its task ends: no lease to
            // look at any more.
            if record.state() == State::Succeeded {
                break;
            }
            assert_eq!(record.state(), State::Pending);
            let lease_until = record.lease_until().unwrap();
            assert!(
                lease_until > idem_store::now(),
                "the lease ran out after {:?} while the handler ran",
                started.elapsed()
            );
            looked += 1;
        }
        if duplicate.is_none() && started.elapsed() > std::time::Duration::from_millis(700) {
            let mut service = service.clone();
            duplicate = Some(send(&mut service, post(Some(KEY), "{}")).await);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(looked > 20, "looked {looked} times");
    let duplicate = duplicate.expect("a duplicate was sent while the first ran");
    assert_eq!(duplicate.status, 409, "{}", duplicate.body);
    assert_eq!(duplicate.problem(), "in-progress");
    let answer = first.await.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(executions.load(Ordering::SeqCst), 1, "it ran once");
    assert_eq!(
        store.get(&id).unwrap().map(|r| r.state()),
        Some(State::Succeeded)
    );
}

#[allow(unreachable_pub)] // shared with the PostgreSQL tests
#[path = "../common/waiting.rs"]
mod waiting;

/// 50 duplicates of a running key wait for its outcome and all get the replay, woken by
/// the settle of the layer; with a wait shorter than the run, each gets 409 once its
/// wait ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_running_key_wait_for_its_outcome() {
    let harness = Harness::new();
    let waits = waiting::duplicates_of_a_running_key(
        &harness.store,
        &harness.store,
        "waited-1",
        std::time::Duration::from_millis(600),
        50,
        std::time::Duration::from_secs(10),
    )
    .await;
    waiting::assert_all_replayed(&waits);

    let waits = waiting::duplicates_of_a_running_key(
        &harness.store,
        &harness.store,
        "waited-2",
        std::time::Duration::from_millis(1_000),
        5,
        std::time::Duration::from_millis(200),
    )
    .await;
    waiting::assert_all_timed_out(&waits);
}
