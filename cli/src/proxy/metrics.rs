//! The proxy's metrics in Prometheus text form (`GET /metrics`).
//!
//! Answers by kind, request, upstream and store latency, store failures, the keys waiting
//! for reconciliation, and on a store file its commits and how group commit batched them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use idem_store::CommitCounts;
use idem_store::http::{Answered, Unsettled, Waited};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How long a count of unknown keys is shown before it is read again: reading it costs
/// the store a count, and scrapes come every few seconds.
const UNKNOWN_KEYS_AGE: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabel {
    answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabel {
    ended: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabel {
    call: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabel {
    call: &'static str,
    cause: &'static str,
}

/// The cause of a store failure, as the metric names it: `disk_full` when the disk had
/// no space left (ENOSPC, in the error or in its reopen's, as the system words it),
/// `other` for the rest.
pub(super) fn cause_of(error: &dyn std::fmt::Display) -> &'static str {
    if error.to_string().contains("No space left on device") {
        "disk_full"
    } else {
        "other"
    }
}

/// Every metric of one proxy.
pub(super) struct Metrics {
    registry: Registry,
    answers: Family<AnswerLabel, Counter>,
    waits: Family<WaitLabel, Counter>,
    wait_seconds: Histogram,
    request_seconds: Histogram,
    upstream_seconds: Histogram,
    store_seconds: Family<CallLabel, Histogram>,
    store_failures: Family<FailureLabel, Counter>,
    unknown_keys: Gauge,
    risk_accepted: Gauge,
    degraded: Gauge,
    unsettled_keys: Gauge,
    unsettled_bytes: Gauge,
    unsettled_dropped: Counter,
    unknown_read: Mutex<Option<Instant>>,
    /// A store file's commits, batches and batched inputs, as last read; none on a
    /// database, whose statements commit on their own.
    commits: Option<Mutex<Commits>>,
}

/// The counters of a store file's commits, raised to the store's counts at each scrape.
struct Commits {
    commits: Counter,
    batches: Counter,
    batched_inputs: Counter,
}

/// Latency buckets from 0.25 ms to about 8 s.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

impl Metrics {
    /// The metrics of a proxy; `file` when its store is a file, whose commits it shows.
    pub(super) fn new(file: bool) -> Metrics {
        let mut registry = Registry::with_prefix("idem_proxy");
        let answers = Family::<AnswerLabel, Counter>::default();
        registry.register(
            "answers",
            "Requests by what the proxy made of them: executed (forwarded under a fresh claim), replayed, in_progress, conflict, unknown, forgotten, refused, store_failed, passed_through",
            answers.clone(),
        );
        let waits = Family::<WaitLabel, Counter>::default();
        registry.register(
            "waits",
            "Requests whose key was in progress and that waited for its outcome (--wait-in-flight), by how the wait ended: settled (answered with the outcome), claimed (the key was given back, and this request ran), timed_out (409)",
            waits.clone(),
        );
        let wait_seconds = latency();
        registry.register(
            "wait_seconds",
            "Time a request waited for the outcome of its key in progress",
            wait_seconds.clone(),
        );
        let request_seconds = latency();
        registry.register(
            "request_seconds",
            "Time from a request's head to the proxy's answer",
            request_seconds.clone(),
        );
        let upstream_seconds = latency();
        registry.register(
            "upstream_seconds",
            "Time the upstream took to answer a forwarded request",
            upstream_seconds.clone(),
        );
        let store_seconds = Family::<CallLabel, Histogram>::new_with_constructor(latency);
        registry.register(
            "store_seconds",
            "Time of each call to the store (the file or the database), by call",
            store_seconds.clone(),
        );
        let store_failures = Family::<FailureLabel, Counter>::default();
        registry.register(
            "store_failures",
            "Calls to the store that failed, by call and cause: disk_full (no space left on the store's disk), other",
            store_failures.clone(),
        );
        let unsettled_keys = Gauge::default();
        registry.register(
            "unsettled_keys",
            "Keys whose upstream answered and whose outcome the store could not take yet (a full disk): kept in memory and stored once it can",
            unsettled_keys.clone(),
        );
        let unsettled_bytes = Gauge::default();
        registry.register(
            "unsettled_bytes",
            "The bytes of the outcomes kept for unsettled keys (at most 64 MiB)",
            unsettled_bytes.clone(),
        );
        let unsettled_dropped = Counter::default();
        registry.register(
            "unsettled_dropped",
            "Outcomes the store could not take when 64 MiB were kept already: their keys turn Unknown at their leases",
            unsettled_dropped.clone(),
        );
        let unknown_keys = Gauge::default();
        registry.register(
            "unknown_keys",
            "Keys whose outcome is unknown and that wait for a reconciler (read at most every 10 s)",
            unknown_keys.clone(),
        );
        let risk_accepted = Gauge::default();
        registry.register(
            "durability_risk_accepted",
            "1 when the store runs under a server setting that can lose an answered request, accepted at connect (accept_unsafe_durability); /healthz names it",
            risk_accepted.clone(),
        );
        let degraded = Gauge::default();
        registry.register(
            "store_degraded",
            "1 when the store's answers are less durable than its server's settings promise at this moment (a semi-synchronous primary that fell back to asynchronous replication; read at each scrape); /healthz says why",
            degraded.clone(),
        );
        let commits = file.then(|| {
            let commits = Commits {
                commits: Counter::default(),
                batches: Counter::default(),
                batched_inputs: Counter::default(),
            };
            registry.register(
                "store_commits",
                "Write transactions the store file committed (each one waits for an fsync)",
                commits.commits.clone(),
            );
            registry.register(
                "store_batches",
                "Group commits of the store file: transactions that answered queued inputs together",
                commits.batches.clone(),
            );
            registry.register(
                "store_batched_inputs",
                "Inputs answered by group commits; over store_batches, the mean batch",
                commits.batched_inputs.clone(),
            );
            Mutex::new(commits)
        });
        Metrics {
            registry,
            answers,
            waits,
            wait_seconds,
            request_seconds,
            upstream_seconds,
            store_seconds,
            store_failures,
            unknown_keys,
            risk_accepted,
            degraded,
            unsettled_keys,
            unsettled_bytes,
            unsettled_dropped,
            unknown_read: Mutex::new(None),
            commits,
        }
    }

    /// The store's counts of commits, read at a scrape: each counter is raised to the
    /// store's count (they only grow while the store is open).
    pub(super) fn commit_counts(&self, counts: CommitCounts) {
        let Some(commits) = &self.commits else {
            return;
        };
        let commits = commits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (counter, count) in [
            (&commits.commits, counts.commits),
            (&commits.batches, counts.batches),
            (&commits.batched_inputs, counts.batched_inputs),
        ] {
            counter.inc_by(count.saturating_sub(counter.get()));
        }
    }

    /// One answered request.
    pub(super) fn answered(&self, answered: Answered, took: Duration) {
        self.answers
            .get_or_create(&AnswerLabel {
                answer: answered.name(),
            })
            .inc();
        self.request_seconds.observe(took.as_secs_f64());
    }

    /// One request that waited for the outcome of its key.
    pub(super) fn waited(&self, waited: Waited) {
        self.waits
            .get_or_create(&WaitLabel {
                ended: waited.ended.name(),
            })
            .inc();
        self.wait_seconds.observe(waited.took.as_secs_f64());
    }

    /// One forwarded request's upstream time.
    pub(super) fn upstream(&self, took: Duration) {
        self.upstream_seconds.observe(took.as_secs_f64());
    }

    /// One call to the store; `failed` with its cause when it failed.
    pub(super) fn store_call(
        &self,
        call: &'static str,
        took: Duration,
        failed: Option<&'static str>,
    ) {
        self.store_seconds
            .get_or_create(&CallLabel { call })
            .observe(took.as_secs_f64());
        if let Some(cause) = failed {
            self.store_failures
                .get_or_create(&FailureLabel { call, cause })
                .inc();
        }
    }

    /// The settlements the layer keeps until the store takes them, read at a scrape.
    pub(super) fn unsettled(&self, unsettled: Unsettled) {
        self.unsettled_keys
            .set(i64::try_from(unsettled.keys).unwrap_or(i64::MAX));
        self.unsettled_bytes
            .set(i64::try_from(unsettled.bytes).unwrap_or(i64::MAX));
        self.unsettled_dropped.inc_by(
            unsettled
                .dropped
                .saturating_sub(self.unsettled_dropped.get()),
        );
    }

    /// True when the count of unknown keys is old enough to be read again; the caller
    /// then reads it and calls [`Metrics::unknown_keys`].
    pub(super) fn unknown_keys_due(&self) -> bool {
        let mut read = self
            .unknown_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if read.is_some_and(|at| at.elapsed() < UNKNOWN_KEYS_AGE) {
            return false;
        }
        *read = Some(Instant::now());
        true
    }

    pub(super) fn unknown_keys(&self, count: u64) {
        self.unknown_keys
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether the store runs under an accepted durability risk (read at a scrape).
    pub(super) fn risk_accepted(&self, accepted: bool) {
        self.risk_accepted.set(i64::from(accepted));
    }

    /// Whether the store is degraded (read at a scrape).
    pub(super) fn degraded(&self, degraded: bool) {
        self.degraded.set(i64::from(degraded));
    }

    /// Every metric in Prometheus text form.
    pub(super) fn text(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
