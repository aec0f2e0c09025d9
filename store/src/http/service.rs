//! [`Idempotency`]: the service the layer wraps around yours, and the claim it settles.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use idem_core::Field;
use idem_core::http::{
    Answer, IDEMPOTENCY_KEY, Problem, RequestParts, StoredResponse, answer, key_from_fields,
};
use tower_service::Service;

use super::settling::Settling;
use super::wait::{WaitEnded, Waited, Watches};
use super::{Answered, Settings, Settle, Tenant};
use crate::seam::running::Running;
use crate::{
    Decision, Fingerprint, Generation, GiveUp, Receiver, RecordId, State, Store, Terms, Verdict,
};

/// What the wrapped service receives: a keyed request's body, buffered
/// ([`Either::Left`]), or a body passed through untouched ([`Either::Right`]).
pub type RequestBody<B> = Either<Full<Bytes>, B>;
/// What the layer answers: its own or a buffered body ([`Either::Left`]), or the
/// service's body of a request passed through ([`Either::Right`]).
pub type ResponseBody<B> = Either<Full<Bytes>, B>;

type BoxError = Box<dyn StdError + Send + Sync>;

/// A service with idempotency keys in front of it; made by
/// [`super::IdempotencyLayer`].
#[derive(Debug)]
pub struct Idempotency<S, R = Store> {
    inner: S,
    store: Arc<R>,
    settings: Arc<Settings>,
    running: Running,
    keys: Keys,
}

/// What a layer knows of keys beyond the store, shared by every service it makes: the
/// duplicates waiting for an outcome, and the settlements the store could not take yet.
#[derive(Debug, Clone, Default)]
pub(super) struct Keys {
    pub(super) watches: Arc<Watches>,
    pub(super) settling: Arc<Settling>,
}

impl<S: Clone, R> Clone for Idempotency<S, R> {
    fn clone(&self) -> Idempotency<S, R> {
        Idempotency {
            inner: self.inner.clone(),
            store: Arc::clone(&self.store),
            settings: Arc::clone(&self.settings),
            running: self.running.clone(),
            keys: self.keys.clone(),
        }
    }
}

impl<S, R> Idempotency<S, R> {
    pub(super) fn new(
        inner: S,
        store: Arc<R>,
        settings: Arc<Settings>,
        running: Running,
        keys: Keys,
    ) -> Idempotency<S, R> {
        Idempotency {
            inner,
            store,
            settings,
            running,
            keys,
        }
    }
}

impl<S, R, B, RB> Service<Request<B>> for Idempotency<S, R>
where
    R: Receiver,
    S: Service<Request<RequestBody<B>>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was polled ready serves this request; the clone waits for
        // its own `poll_ready`.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let store = Arc::clone(&self.store);
        let settings = Arc::clone(&self.settings);
        Box::pin(serve(
            inner,
            store,
            settings,
            self.running.clone(),
            self.keys.clone(),
            request,
        ))
    }
}

/// What a keyed request became before the service runs: answered by the layer, passed
/// through, or claimed.
enum Admitted<B, R: Receiver> {
    Answer(Answer, Answered),
    PassThrough(Request<B>),
    Claimed(Claim<R>, Request<RequestBody<B>>),
}

async fn serve<S, R, B, RB>(
    inner: S,
    store: Arc<R>,
    settings: Arc<Settings>,
    running: Running,
    keys: Keys,
    request: Request<B>,
) -> Result<Response<ResponseBody<RB>>, S::Error>
where
    R: Receiver,
    S: Service<Request<RequestBody<B>>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let (admitted, waited) = admit(&store, &settings, &keys, &running, request).await;
    let response = match admitted {
        Admitted::Answer(answer, answered) => marked(to_response(answer), answered),
        Admitted::PassThrough(request) => {
            let mut inner = inner;
            let response = inner.call(request.map(Either::Right)).await?;
            marked(response.map(Either::Right), Answered::PassedThrough)
        }
        Admitted::Claimed(claim, request) => marked(
            run(inner, claim, &settings, &running, request).await?,
            Answered::Executed,
        ),
    };
    Ok(match waited {
        Some(waited) => {
            let mut response = response;
            response.extensions_mut().insert(waited);
            response
        }
        None => response,
    })
}

/// Everything before the service runs: key, tenant, operation, body, fingerprint,
/// begin, and a wait for the outcome of a key in progress; with how that wait ended.
async fn admit<B, R: Receiver>(
    store: &Arc<R>,
    settings: &Settings,
    keys: &Keys,
    running: &Running,
    request: Request<B>,
) -> (Admitted<B, R>, Option<Waited>)
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body, id, fingerprint) = match keyed(settings, request).await {
        Ok(keyed) => keyed,
        Err(admitted) => return (admitted, None),
    };
    let watches = &keys.watches;
    // A key whose outcome this layer keeps until the store takes it is in progress, as
    // far as any request can tell: it is never run again, nor answered unknown.
    let decision = if let Some(generation) = keys.settling.waiting(&id) {
        Ok(Decision::InProgress {
            generation,
            lease_until: (settings.clock)().plus_millis(1_000),
        })
    } else {
        // Dropped while it waits (the client hung up), the begin gives back what it
        // claimed; once it is answered, the claim's guard is made before the next
        // await.
        store
            .begin_with(&id, fingerprint, (settings.clock)(), settings.terms)
            .await
    };
    let (decision, waited) = match (decision, settings.wait_in_flight) {
        (Ok(in_progress @ Decision::InProgress { .. }), Some(wait)) if !wait.is_zero() => {
            let (decision, waited) = wait_for_outcome(
                store,
                settings,
                watches,
                &id,
                fingerprint,
                in_progress,
                wait,
            )
            .await;
            (decision, Some(waited))
        }
        (decision, _) => (decision, None),
    };
    let decision = match decision {
        Ok(decision) => decision,
        Err(e) => {
            return (
                Admitted::Answer(store_failed(&e).answer(), Answered::StoreFailed),
                waited,
            );
        }
    };
    let admitted = match decision {
        Decision::Claimed { generation, .. } => {
            let claim = Claim {
                store: Arc::clone(store),
                clock: Arc::clone(&settings.clock),
                watches: Arc::clone(watches),
                settling: Arc::clone(&keys.settling),
                running: running.clone(),
                id,
                generation,
                terms: settings.terms,
                started: false,
                settled: false,
            };
            let request = Request::from_parts(parts, Either::Left(Full::new(body)));
            Admitted::Claimed(claim, request)
        }
        other => {
            let answered = match other {
                Decision::Replay { .. } => Answered::Replayed,
                Decision::InProgress { .. } => Answered::InProgress,
                Decision::Conflict { .. } => Answered::Conflict,
                Decision::NeedsReconciliation { .. } => Answered::Unknown,
                Decision::Forgotten { .. } => Answered::Forgotten,
                Decision::Claimed { .. } => Answered::StoreFailed,
            };
            Admitted::Answer(
                answer(&other, (settings.clock)(), &settings.answers)
                    .unwrap_or_else(|| store_failed(&"a claim without a handler").answer()),
                answered,
            )
        }
    };
    (admitted, waited)
}

/// A request whose key is `in_progress` waits up to `wait` for the running request's
/// outcome (the module `wait` says how): the decision it ends with (a replay, the
/// key's new state, a claim of its own once the key is free again, or still in
/// progress when the wait ran out), and how the wait ended.
async fn wait_for_outcome<R: Receiver>(
    store: &Arc<R>,
    settings: &Settings,
    watches: &Arc<Watches>,
    id: &RecordId,
    fingerprint: Fingerprint,
    in_progress: Decision,
    wait: Duration,
) -> (Result<Decision, crate::Error>, Waited) {
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let waited = |ended| Waited {
        ended,
        took: started.elapsed(),
    };
    // The last in-progress answer, given when the wait runs out; and the claim watched
    // (any claim: the one another waiter's begin is making).
    let mut decision = in_progress;
    let mut watched = match &decision {
        Decision::InProgress { generation, .. } => Some(*generation),
        _ => None,
    };
    loop {
        let waiting = watches.join(store, id, watched);
        let mut waiting = waiting;
        let Some(record) = waiting.moved(deadline).await else {
            return (Ok(decision), waited(WaitEnded::TimedOut));
        };
        let now = (settings.clock)();
        // idem-core decides on the record read; the next generation is a stand-in, as
        // nothing is written from this decision.
        let stand_in = Generation(
            record
                .as_ref()
                .map_or(1, |r| r.generation.0.saturating_add(1)),
        );
        let decided =
            idem_core::protocol::begin(record.as_ref(), fingerprint, stand_in, now, store.config());
        if decided.write == idem_core::Write::Nothing {
            match decided.decision {
                Decision::InProgress { generation, .. } => {
                    watched = Some(generation);
                    decision = decided.decision;
                }
                other => return (Ok(other), waited(WaitEnded::Settled)),
            }
            continue;
        }
        // The key is free again: one waiter a round asks the store; the others wait
        // for what it made of the key.
        if !waiting.take_begin() {
            watched = None;
            continue;
        }
        drop(waiting);
        match store.begin_with(id, fingerprint, now, settings.terms).await {
            Ok(claimed @ Decision::Claimed { .. }) => {
                return (Ok(claimed), waited(WaitEnded::Claimed));
            }
            Ok(Decision::InProgress {
                generation,
                lease_until,
            }) => {
                watched = Some(generation);
                decision = Decision::InProgress {
                    generation,
                    lease_until,
                };
            }
            other => return (other, waited(WaitEnded::Settled)),
        }
    }
}

/// The key, tenant, operation, buffered body and fingerprint of a keyed request; or
/// what it became without them (passed through, refused).
async fn keyed<B, R: Receiver>(
    settings: &Settings,
    request: Request<B>,
) -> Result<(Parts, Bytes, RecordId, Fingerprint), Admitted<B, R>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if !settings.methods.contains(request.method()) {
        return Err(Admitted::PassThrough(request));
    }
    let fields = request.headers().get_all(IDEMPOTENCY_KEY);
    let key = match key_from_fields(fields.iter().map(HeaderValue::as_bytes)) {
        Ok(Some(key)) => key,
        Ok(None) if settings.require_key => {
            return Err(refused(Problem::key_missing()));
        }
        Ok(None) => return Err(Admitted::PassThrough(request)),
        Err(e) => return Err(refused(Problem::key_malformed(&e))),
    };
    let (parts, body) = request.into_parts();
    let Some(tenant) = tenant(&settings.tenant, &parts) else {
        return Err(refused(tenant_missing(&settings.tenant)));
    };
    let operation = (settings.operation)(&parts);
    let id = match RecordId::new(&tenant, &operation, &key) {
        Ok(id) => id,
        Err(e) => {
            let code = match e.field() {
                Field::Tenant => "tenant-malformed",
                Field::Operation => "operation-malformed",
                _ => "key-malformed",
            };
            return Err(refused(Problem::new(400, code, e.to_string())));
        }
    };
    let body = match buffer(&parts, body, settings.body_limit, settings.body_timeout).await {
        Ok(body) => body,
        Err(problem) => return Err(refused(problem)),
    };
    let headers: Vec<(&str, Vec<u8>)> = settings
        .fingerprint_headers
        .iter()
        .filter(|name| parts.headers.contains_key(*name))
        .map(|name| (name.as_str(), joined(&parts, name)))
        .collect();
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let paths: Vec<&str> = settings
        .only_json_paths
        .as_ref()
        .unwrap_or(&settings.ignored_json_paths)
        .iter()
        .map(String::as_str)
        .collect();
    let request = RequestParts {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(HeaderValue::as_bytes),
        body: &body,
        headers: &headers,
    };
    let fingerprint = match settings.only_json_paths {
        Some(_) => request.fingerprint_only(&paths),
        None => request.fingerprint(&paths),
    };
    let fingerprint = match fingerprint {
        Ok(fingerprint) => fingerprint,
        Err(e) => return Err(refused(Problem::body_malformed(&e))),
    };
    Ok((parts, body, id, fingerprint))
}

/// Runs the service for a claimed request in a task of its own and settles the key
/// from its answer (see the module docs for why a task, and what is Unknown).
async fn run<S, R, B, RB>(
    mut inner: S,
    claim: Claim<R>,
    settings: &Settings,
    running: &Running,
    request: Request<RequestBody<B>>,
) -> Result<Response<ResponseBody<RB>>, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    R: Receiver,
{
    let kept = settings.kept_headers.clone();
    // Counted until the key is settled, also when the client hung up meanwhile.
    let entered = running.enter();
    let task = tokio::spawn(async move {
        let _entered = entered;
        // Declared after the count: an unsettled claim is given up (in its drop) before
        // the count lets a stopping server go.
        let mut claim = claim;
        claim.started = true;
        // The watchdog: the lease is extended while the handler runs and its body comes.
        let watchdog = claim.watchdog();
        let response = match claim
            .unless_panic(beside(inner.call(request), &watchdog))
            .await
        {
            Ok(response) => response,
            Err(e) => {
                claim.settle(Settle::Unknown).await;
                return Err(e);
            }
        };
        let (parts, body) = response.into_parts();
        let collected = claim
            .unless_panic(beside(
                async { body.collect().await.map_err(Into::<BoxError>::into) },
                &watchdog,
            ))
            .await;
        let body = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                claim.settle(Settle::Unknown).await;
                let problem = match e.downcast::<super::BodyFailed>() {
                    Ok(failed) => failed.0,
                    Err(e) => Problem::new(
                        500,
                        "handler-failed",
                        format!("the handler's response body failed ({e}); its outcome is unknown"),
                    ),
                };
                return Ok(to_response(problem.answer()));
            }
        };
        let status = parts.status.as_u16();
        match parts.extensions.get::<Settle>().copied() {
            Some(settle) => claim.settle(settle).await,
            None if status >= 500 => claim.settle(Settle::Release).await,
            None => {
                let stored =
                    StoredResponse {
                        status,
                        headers: kept
                            .iter()
                            .flat_map(|name| {
                                parts.headers.get_all(name).iter().map(|value| {
                                    (name.as_str().to_owned(), value.as_bytes().to_vec())
                                })
                            })
                            .collect(),
                        body: body.to_vec(),
                    };
                claim.complete(stored).await;
            }
        }
        Ok(Response::from_parts(parts, Either::Left(Full::new(body))))
    });
    match task.await {
        Ok(answered) => answered,
        Err(e) => {
            let (code, what) = if e.is_panic() {
                ("handler-panicked", "panicked")
            } else {
                ("handler-cancelled", "was cancelled")
            };
            let detail = format!("the handler {what}; the outcome of this request is unknown");
            Ok(to_response(Problem::new(500, code, detail).answer()))
        }
    }
}

/// A claimed key that must be settled. Dropped unsettled (a panic, a task dropped by a
/// runtime shutting down), it marks the key Unknown if the handler was started and
/// releases it if not, in the background ([`Receiver::give_up`]): a drop never waits
/// for a commit.
struct Claim<R: Receiver> {
    store: Arc<R>,
    clock: super::Clock,
    /// The duplicates waiting for this key's outcome, woken once it is settled.
    watches: Arc<Watches>,
    /// Where a settlement the store failed waits to be stored.
    settling: Arc<Settling>,
    /// The layer's running work, which a settlement stored later counts in.
    running: Running,
    id: RecordId,
    generation: Generation,
    /// The layer's lease and retention for this claim's calls.
    terms: Terms,
    /// The handler's task was polled: from here on it may have acted.
    started: bool,
    settled: bool,
}

/// The heartbeats of one claim (docs/design.md §16, the watchdog): a third of the lease
/// apart, each extending the lease of the claim's generation, so that a handler slower
/// than the lease keeps its key while it runs. A holder that died sends none, and its
/// lease ends as the protocol says; a refused heartbeat (the claim was taken over or
/// settled) ends them, and the claim's late settlement is refused by its generation.
struct Watchdog<R: Receiver> {
    store: Arc<R>,
    clock: super::Clock,
    id: RecordId,
    generation: Generation,
    terms: Terms,
    period: Duration,
}

impl<R: Receiver> Watchdog<R> {
    /// Beats until a heartbeat is refused; a failure of the store is tried again at the
    /// next beat, while the lease may still be extended.
    async fn run(&self) {
        loop {
            tokio::time::sleep(self.period).await;
            let now = (self.clock)();
            let beat = self
                .store
                .heartbeat_with(&self.id, self.generation, now, self.terms);
            match beat.await {
                Ok(_) => {}
                Err(crate::Error::Refused(_)) => return,
                Err(_) => {}
            }
        }
    }
}

/// Runs `work` with `watchdog` beating beside it, until `work` is done.
async fn beside<F: Future, R: Receiver>(work: F, watchdog: &Watchdog<R>) -> F::Output {
    let mut work = std::pin::pin!(work);
    let beats = watchdog.run();
    let mut beats = std::pin::pin!(beats);
    let mut beating = true;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if beating && beats.as_mut().poll(cx).is_ready() {
            beating = false;
        }
        Poll::Pending
    })
    .await
}

impl<R: Receiver> Claim<R> {
    /// The watchdog of this claim, a third of its lease (the layer's, else the
    /// store's) between heartbeats.
    fn watchdog(&self) -> Watchdog<R> {
        let lease = self
            .terms
            .lease_ms
            .filter(|&ms| ms > 0)
            .unwrap_or(self.store.config().lease_ms);
        Watchdog {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            id: self.id.clone(),
            generation: self.generation,
            terms: self.terms,
            period: Duration::from_millis((lease / 3).max(1)),
        }
    }

    async fn settle(&mut self, settle: Settle) {
        self.finish(Finish::Settle(settle)).await;
    }

    async fn complete(&mut self, stored: StoredResponse) {
        let outcome = stored.to_outcome();
        if outcome.body.len() > self.store.config().max_outcome_bytes {
            // The handler acted and its answer cannot be kept.
            return self.settle(Settle::Unknown).await;
        }
        let verdict = if (200..300).contains(&stored.status) {
            Verdict::Succeeded
        } else {
            Verdict::Failed
        };
        self.finish(Finish::Complete(verdict, outcome)).await;
    }

    /// Ends the claim with `finish`. When the store fails it (a full disk), the
    /// settlement is kept and stored later, in a task of its own counted as running,
    /// tried again with a growing pause until the store takes it (`settling.rs`); past
    /// the bound on what is kept, the claim is left to its lease.
    async fn finish(&mut self, finish: Finish) {
        self.settled = true;
        let ending = Ending {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            id: self.id.clone(),
            generation: self.generation,
            terms: self.terms,
            finish,
        };
        if ending.store_once().await != Stored::Failed {
            self.watches.settled(&self.id);
            return;
        }
        if !self
            .settling
            .keep(&self.id, self.generation, ending.bytes())
        {
            return;
        }
        let (settling, watches) = (Arc::clone(&self.settling), Arc::clone(&self.watches));
        let entered = self.running.enter();
        tokio::spawn(async move {
            let _entered = entered;
            ending.until_stored().await;
            settling.stored(&ending.id);
            watches.settled(&ending.id);
        });
    }

    /// Runs `work` of the handler; if it panics, marks the key Unknown and waits for
    /// that to be durable before the panic goes on, so that the caller's 500 means the
    /// key is Unknown already.
    async fn unless_panic<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        let caught = std::future::poll_fn(|cx| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.as_mut().poll(cx)))
            {
                Ok(Poll::Pending) => Poll::Pending,
                Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
                Err(panicked) => Poll::Ready(Err(panicked)),
            }
        })
        .await;
        let panicked = match caught {
            Ok(output) => return output,
            Err(panicked) => panicked,
        };
        self.settle(Settle::Unknown).await;
        std::panic::resume_unwind(panicked)
    }
}

/// How a claim ends: settled with the handler's outcome, or released or Unknown.
#[derive(Clone)]
enum Finish {
    Complete(Verdict, idem_core::Outcome),
    Settle(Settle),
}

/// What became of one try to store a claim's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// Stored (or found stored: the failed commit had landed after all).
    Yes,
    /// The key moved on (an operator resolved it, another claim took it over): not
    /// this claim's to store any more.
    Gone,
    /// The store failed: try again later.
    Failed,
}

/// A claim's end, to store now or later.
struct Ending<R: Receiver> {
    store: Arc<R>,
    clock: super::Clock,
    id: RecordId,
    generation: Generation,
    terms: Terms,
    finish: Finish,
}

impl<R: Receiver> Ending<R> {
    /// The outcome's bytes, what keeping it costs.
    fn bytes(&self) -> usize {
        match &self.finish {
            Finish::Complete(_, outcome) => outcome.body.len() + 64,
            Finish::Settle(_) => 64,
        }
    }

    async fn store_once(&self) -> Stored {
        let (store, id, generation, now) = (&self.store, &self.id, self.generation, (self.clock)());
        let stored = match &self.finish {
            Finish::Complete(verdict, outcome) => store
                .complete_with(id, generation, *verdict, outcome.clone(), now, self.terms)
                .await
                .map(drop),
            Finish::Settle(Settle::Release) => store.release(id, generation, now).await,
            Finish::Settle(Settle::Unknown) => {
                store.mark_unknown(id, generation, now).await.map(drop)
            }
        };
        match stored {
            Ok(()) => Stored::Yes,
            // Refused: an earlier try that failed may have landed; else the key moved on.
            Err(crate::Error::Refused(_)) => match store.get(id).await {
                Ok(record) if self.landed(record.as_ref()) => Stored::Yes,
                Ok(_) => Stored::Gone,
                Err(_) => Stored::Failed,
            },
            Err(_) => Stored::Failed,
        }
    }

    /// Whether `record` is what this end wrote.
    fn landed(&self, record: Option<&idem_core::Record>) -> bool {
        let ours = record.filter(|r| r.generation == self.generation);
        match (&self.finish, ours) {
            (Finish::Complete(verdict, _), Some(record)) => matches!(
                (verdict, record.state()),
                (Verdict::Succeeded, State::Succeeded) | (Verdict::Failed, State::Failed)
            ),
            (Finish::Settle(Settle::Unknown), Some(record)) => record.state() == State::Unknown,
            // Released: the claim's record is gone.
            (Finish::Settle(Settle::Release), ours) => ours.is_none(),
            (_, None) => false,
        }
    }

    /// Tries again, 10 ms doubling to 1 s apart, until the store takes it or the key
    /// moved on.
    async fn until_stored(&self) {
        let mut pause = Duration::from_millis(10);
        loop {
            tokio::time::sleep(pause).await;
            if self.store_once().await != Stored::Failed {
                return;
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

impl<R: Receiver> Drop for Claim<R> {
    fn drop(&mut self) {
        if !self.settled {
            let how = if self.started {
                GiveUp::MarkUnknown
            } else {
                GiveUp::Release
            };
            self.store
                .give_up(&self.id, self.generation, how, (self.clock)());
        }
    }
}

fn tenant(source: &Tenant, parts: &Parts) -> Option<String> {
    match source {
        Tenant::Fixed(name) => Some(name.clone()),
        Tenant::Header(name) => parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        Tenant::From(extract) => extract(parts),
    }
}

fn tenant_missing(source: &Tenant) -> Problem {
    let detail = match source {
        Tenant::Header(name) => format!(
            "{name}: missing or not visible ASCII, this endpoint needs the tenant from the authentication in front of it"
        ),
        _ => {
            "tenant: missing, this endpoint needs the tenant from the authentication in front of it"
                .to_owned()
        }
    };
    Problem::new(400, "tenant-missing", detail)
}

/// The `Retry-After` of a 503 when the store failed: long enough for a pool to
/// reconnect or a standby to be promoted, short enough not to lose the client.
const STORE_RETRY_AFTER_S: u64 = 1;

/// A request the layer refused before the store (400, 408, 413).
fn refused<B, R: Receiver>(problem: Problem) -> Admitted<B, R> {
    Admitted::Answer(problem.answer(), Answered::Refused)
}

/// `response`, with what the layer made of its request in its extensions.
fn marked<RB>(mut response: Response<RB>, answered: Answered) -> Response<RB> {
    response.extensions_mut().insert(answered);
    response
}

/// The store failed (a database that went away, a file that needs a reopen): nothing
/// ran, and a retry after a moment may find the store back.
fn store_failed(e: &dyn std::fmt::Display) -> Problem {
    Problem {
        retry_after_s: Some(STORE_RETRY_AFTER_S),
        ..Problem::new(
            503,
            "store-failed",
            format!("the idempotency store failed ({e}); nothing was executed, retry"),
        )
    }
}

/// Every field of `name`, joined with `, ` as RFC 9110 §5.3 allows.
fn joined(parts: &Parts, name: &HeaderName) -> Vec<u8> {
    let values: Vec<&[u8]> = parts
        .headers
        .get_all(name)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    values.join(&b", "[..])
}

/// The body, whole, up to `limit` bytes; a 413 past it (by `Content-Length` before
/// anything is read), a 400 when it cannot be read, a 408 when it is not whole within
/// `timeout`.
async fn buffer<B>(
    parts: &Parts,
    body: B,
    limit: usize,
    timeout: Option<std::time::Duration>,
) -> Result<Bytes, Problem>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Problem::body_too_large(limit));
    }
    let collect = Limited::new(body, limit).collect();
    let collected = match timeout {
        Some(timeout) => match tokio::time::timeout(timeout, collect).await {
            Ok(collected) => collected,
            Err(_) => {
                return Err(Problem::new(
                    408,
                    "body-timeout",
                    format!(
                        "body: not received whole within {} ms; nothing was executed, send it again",
                        timeout.as_millis()
                    ),
                ));
            }
        },
        None => collect.await,
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::body_too_large(limit)),
        Err(e) => Err(Problem::new(
            400,
            "body-unreadable",
            format!("body: could not be read ({e})"),
        )),
    }
}

/// An answer of the layer as a response; a header the HTTP types refuse is left out
/// (a stored one came from a response that had it, so none is).
fn to_response<RB>(answer: Answer) -> Response<ResponseBody<RB>> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(answer.body))));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}
