//! The HTTP receiver (feature `http`): a tower [`Layer`] that gives any HTTP service
//! idempotency keys, per docs/design.md §10, with the mapping of [`idem_core::http`].
//!
//! ```text
//! client ──▶ IdempotencyLayer ──▶ your service (axum router, hyper service, a proxy)
//! ```
//!
//! For each request of a keyed method (POST and PATCH by default) the layer:
//!
//! 1. reads the `Idempotency-Key` header ([`idem_core::http::key_from_fields`]). No key:
//!    the request passes through untouched, or, with [`Settings::require_key`], is
//!    answered 400. A malformed key, two key header fields, a key over 255 bytes: 400;
//! 2. takes the tenant from [`Settings::tenant`] (by default the `X-Tenant` header,
//!    which **must come from your auth**: a gateway that authenticated the caller sets
//!    it and strips the client's own; never let a client choose its tenant) and the
//!    operation from [`Settings::operation`] (by default the method and path, `POST
//!    /orders`; with axum, the matched route, see `examples/axum.rs`);
//! 3. buffers the body up to [`Settings::body_limit`] (413 past it, before the store
//!    is asked: nothing is stored) and computes the fingerprint (method, path, body as
//!    canonical JSON for a JSON content type or bytes otherwise, and
//!    [`Settings::fingerprint_headers`]);
//! 4. asks the store's [`Receiver::begin`]. A replay, a request in progress (409), a conflict (422)
//!    an unknown outcome (503) and a forgotten one (410, past its retention: only the
//!    tombstone is kept) are answered by the layer; a claim runs the service.
//!
//! The service's answer is kept as the outcome: its status, the headers in
//! [`Settings::kept_headers`] and its body. A 2xx settles as succeeded, a 3xx or 4xx
//! as failed (both replayed); a 5xx releases the key, so a retry runs the service
//! again. A service that knows better says so with a [`Settle`] in the response's
//! extensions (a proxy whose upstream timed out returns 504 with [`Settle::Unknown`]).
//!
//! # A handler that panics, fails or is cancelled
//!
//! The claimed request runs in a task of its own (`tokio::spawn`), so a client that
//! hangs up does not cancel it: the handler finishes, its answer is stored, and the
//! client's retry gets the replay. Cancelling it on a client's hang-up would leave the
//! key Unknown every time a client times out, which is the very case keys exist for.
//! A client that hangs up while its begin waits for its commit leaves nothing claimed:
//! a receiver gives back a claim whose begin was dropped ([`Receiver`]'s cancellation
//! rule), so a retry claims the key again.
//!
//! The key is left Unknown only when the handler may have acted:
//!
//! - the handler panicked, the service returned an error, or its response body failed:
//!   it ran, so it may have acted → Unknown (the caller gets a 500 problem, or the
//!   service's error; a retry gets 503 until a reconciler settles the key);
//! - the task was dropped (the runtime shut down) after the handler was first polled →
//!   Unknown; before it was ever polled → released: the handler did not start;
//! - the answer cannot be kept (over the store's `max_outcome_bytes`): the handler
//!   acted, the answer goes to the client, and the key becomes Unknown.
//!
//! A claim holds for the store's lease (`Config::lease_ms`, 30 s by default, or
//! [`Settings::terms`]'s); a handler
//! must answer within it, or a retry after it finds the key Unknown.
//!
//! # Group commit
//!
//! The layer works on any [`Receiver`]. On the redb [`Store`], every call of the layer
//! (begin, complete, release, mark unknown) goes through the store's group commit, so
//! concurrent requests share fsyncs, and a request waiting for its commit holds no
//! thread: its future is woken when its batch is durable.
//!
//! # The watchdog
//!
//! While a claimed request's handler runs, and while its body comes, the layer extends
//! the claim's lease every third of [`crate::Config::lease_ms`] ([`Receiver::heartbeat`],
//! fenced by the claim's generation): a handler slower than the lease keeps its key. A
//! process that dies extends nothing, and a retry after the lease finds the key as the
//! protocol says (Unknown by default).

mod service;
mod settling;
mod wait;

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderName, Method};
use idem_core::Timestamp;
pub use idem_core::http::{AnswerConfig, ReplayStatus, key_field_value};
use tower_layer::Layer;

pub use service::{Idempotency, RequestBody, ResponseBody};
pub use settling::Unsettled;
pub use wait::{WaitEnded, Waited};

pub use crate::seam::running::Running;

use crate::{Receiver, Store};

/// What the layer does with the key of a claimed request, when the service knows
/// better than its status: put it in the response's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Nothing was executed: delete the claim, a retry runs again (the default for 5xx).
    Release,
    /// The service may have acted and cannot tell: the key becomes Unknown, a
    /// reconciler settles it.
    Unknown,
}

/// The error a service's response body may fail with to choose the answer the client
/// gets: this problem instead of the layer's 500. The key becomes Unknown all the same
/// (the service may have acted). A proxy fails a body whose upstream stalled with a 504.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyFailed(pub idem_core::http::Problem);

impl fmt::Display for BodyFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.0.detail, self.0.code)
    }
}

impl std::error::Error for BodyFailed {}

/// What the layer made of a request, in the extensions of every response it gives: for
/// metrics and access logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Answered {
    /// Not keyed (another method, or no key where none is required): passed to the
    /// service as it came.
    PassedThrough,
    /// Claimed: the service ran, and its answer is the response.
    Executed,
    /// Settled before: the stored answer, replayed.
    Replayed,
    /// Claimed by a request still running: 409.
    InProgress,
    /// The key was used for another request: 422.
    Conflict,
    /// The outcome under the key is unknown: 503.
    Unknown,
    /// Settled long ago, the outcome no longer kept: 410.
    Forgotten,
    /// Refused before the store: a missing or malformed key or tenant, a body too large,
    /// unreadable or too slow.
    Refused,
    /// The store failed: 500, nothing executed.
    StoreFailed,
}

impl Answered {
    /// Lower-case name: `passed_through`, `executed`, `replayed`, `in_progress`,
    /// `conflict`, `unknown`, `forgotten`, `refused`, `store_failed`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Answered::PassedThrough => "passed_through",
            Answered::Executed => "executed",
            Answered::Replayed => "replayed",
            Answered::InProgress => "in_progress",
            Answered::Conflict => "conflict",
            Answered::Unknown => "unknown",
            Answered::Forgotten => "forgotten",
            Answered::Refused => "refused",
            Answered::StoreFailed => "store_failed",
        }
    }
}

/// Where a request's tenant comes from.
#[derive(Clone)]
pub enum Tenant {
    /// One tenant for every request: a single-tenant deployment.
    Fixed(String),
    /// A request header, set by your authentication (a gateway that strips the
    /// client's own). A keyed request without it is answered 400.
    Header(HeaderName),
    /// A function of the request head, such as one reading your auth's extension.
    /// `None` answers 400.
    From(TenantFn),
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tenant::Fixed(name) => f.debug_tuple("Fixed").field(name).finish(),
            Tenant::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Tenant::From(_) => f.write_str("From(..)"),
        }
    }
}

/// A function of the request head that names the tenant, `None` when it cannot.
pub type TenantFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// A function of the request head that names the operation.
pub type OperationFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;

/// The layer's clock: the time each store call is made at.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// How the layer reads requests and keeps answers. [`Settings::default`] is the
/// documented default of each field.
#[derive(Clone)]
pub struct Settings {
    /// Where the tenant comes from. Default: the `X-Tenant` header.
    pub tenant: Tenant,
    /// The operation of a request. Default: method and path (`POST /orders`).
    pub operation: OperationFn,
    /// The methods whose requests are keyed; others pass through. Default POST, PATCH.
    pub methods: Vec<Method>,
    /// Answer a keyed method's request without a key with 400, instead of passing it
    /// through. Default false.
    pub require_key: bool,
    /// The most body bytes buffered and fingerprinted; a larger body is answered 413.
    /// Default 1 MiB.
    pub body_limit: usize,
    /// Request headers that are part of the fingerprint. Default none.
    pub fingerprint_headers: Vec<HeaderName>,
    /// JSON Pointers removed from a JSON body before it is fingerprinted. Default none.
    pub ignored_json_paths: Vec<String>,
    /// When set, only the members at these JSON Pointers count toward a JSON body's
    /// fingerprint (`idem_core::JsonPaths::Only`), and `ignored_json_paths` is not
    /// used. A pointer that reaches nothing (misspelt, or a body of another shape), or
    /// an empty list, leaves nothing of the body to count: such requests under one key
    /// then differ only by method, path and headers. A body that is not JSON counts
    /// whole. Default none: the whole body counts.
    pub only_json_paths: Option<Vec<String>>,
    /// Response headers kept with the outcome and replayed. Default `content-type`,
    /// `location`, `content-location`, `etag`, `last-modified`.
    pub kept_headers: Vec<HeaderName>,
    /// The replay status and the 503's `Retry-After`.
    pub answers: AnswerConfig,
    /// How long a keyed request's body may take to arrive whole; past it the request is
    /// answered 408 and nothing is claimed. Default none (the server's own limits).
    pub body_timeout: Option<std::time::Duration>,
    /// How long a request whose key is claimed by a request still running waits for
    /// that one's outcome and gets its replay, instead of 409 at once; past it, 409 with
    /// `Retry-After` as without a wait. The waiters of one key share one reader of the
    /// store ([`Waited`] marks their responses). Default none: 409 at once.
    pub wait_in_flight: Option<std::time::Duration>,
    /// The lease a claim gets and the retention of its outcome, in place of the
    /// store's where given ([`crate::Terms`]): for a route whose requests run longer,
    /// or whose answers are kept longer, than the rest. The watchdog beats a third of
    /// this lease apart. Default none: the store's.
    pub terms: crate::Terms,
    /// The time of every store call and of `Retry-After`. Default the system clock
    /// ([`crate::now`]); a test gives its own.
    pub clock: Clock,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            tenant: Tenant::Header(HeaderName::from_static("x-tenant")),
            operation: Arc::new(method_and_path),
            methods: vec![Method::POST, Method::PATCH],
            require_key: false,
            body_limit: 1 << 20,
            fingerprint_headers: Vec::new(),
            ignored_json_paths: Vec::new(),
            only_json_paths: None,
            kept_headers: [
                http::header::CONTENT_TYPE,
                http::header::LOCATION,
                http::header::CONTENT_LOCATION,
                http::header::ETAG,
                http::header::LAST_MODIFIED,
            ]
            .into(),
            answers: AnswerConfig::default(),
            body_timeout: None,
            wait_in_flight: None,
            terms: crate::Terms::default(),
            clock: Arc::new(crate::now),
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("tenant", &self.tenant)
            .field("methods", &self.methods)
            .field("require_key", &self.require_key)
            .field("body_limit", &self.body_limit)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .field("ignored_json_paths", &self.ignored_json_paths)
            .field("only_json_paths", &self.only_json_paths)
            .field("kept_headers", &self.kept_headers)
            .field("answers", &self.answers)
            .field("body_timeout", &self.body_timeout)
            .field("wait_in_flight", &self.wait_in_flight)
            .field("terms", &self.terms)
            .finish_non_exhaustive()
    }
}

/// The default operation: `METHOD /path` (the path without the query).
#[must_use]
pub fn method_and_path(parts: &Parts) -> String {
    format!("{} {}", parts.method, parts.uri.path())
}

/// The tower layer: wraps a service in [`Idempotency`], on the receiver `R` (the redb
/// [`Store`] by default).
#[derive(Debug)]
pub struct IdempotencyLayer<R = Store> {
    store: Arc<R>,
    settings: Arc<Settings>,
    running: Running,
    keys: service::Keys,
}

impl<R> Clone for IdempotencyLayer<R> {
    fn clone(&self) -> IdempotencyLayer<R> {
        IdempotencyLayer {
            store: Arc::clone(&self.store),
            settings: Arc::clone(&self.settings),
            running: self.running.clone(),
            keys: self.keys.clone(),
        }
    }
}

impl<R: Receiver> IdempotencyLayer<R> {
    /// A layer on `store` with `settings`.
    #[must_use]
    pub fn new(store: Arc<R>, settings: Settings) -> IdempotencyLayer<R> {
        IdempotencyLayer {
            store,
            settings: Arc::new(settings),
            running: Running::default(),
            keys: service::Keys::default(),
        }
    }

    /// The claimed requests still running, in every service this layer made: a
    /// request runs on in a task of its own when its client hangs up, so a server that
    /// stops waits for [`Running::idle`] after its connections closed (and then for
    /// [`Receiver::idle`]).
    #[must_use]
    pub fn running(&self) -> Running {
        self.running.clone()
    }

    /// A layer with `settings` in place of this one's that shares its store, its
    /// running requests ([`IdempotencyLayer::running`]), its waiting duplicates and its
    /// kept settlements: for routes of one server with rules of their own (what is
    /// fingerprinted, what is kept), stopped and measured as one.
    #[must_use]
    pub fn with_settings(&self, settings: Settings) -> IdempotencyLayer<R> {
        IdempotencyLayer {
            store: Arc::clone(&self.store),
            settings: Arc::new(settings),
            running: self.running.clone(),
            keys: self.keys.clone(),
        }
    }

    /// The settlements the store failed (a full disk) that this layer keeps in memory
    /// until it takes them: what a metric shows.
    #[must_use]
    pub fn unsettled(&self) -> Unsettled {
        self.keys.settling.unsettled()
    }
}

impl<S, R: Receiver> Layer<S> for IdempotencyLayer<R> {
    type Service = Idempotency<S, R>;

    fn layer(&self, inner: S) -> Idempotency<S, R> {
        Idempotency::new(
            inner,
            Arc::clone(&self.store),
            Arc::clone(&self.settings),
            self.running.clone(),
            self.keys.clone(),
        )
    }
}
