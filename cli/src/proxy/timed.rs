//! A receiver that times every call of the one it wraps, for the proxy's metrics.
//!
//! It gives the store's (the file's or the database's) latency and failures, per call.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Instant;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, Terms, Timestamp, Verdict,
};
use idem_store::maintain::{
    Abandoned, Check, ReconcileError, ReconcileReport, Stats, SweepReport, Transferred,
};
use idem_store::{CommitCounts, Error, GiveUp, ImportError, ListFilter, MaintainError, Receiver};

use super::metrics::Metrics;

/// `R`, timed.
pub(super) struct Timed<R> {
    pub(super) inner: Arc<R>,
    pub(super) metrics: Arc<Metrics>,
}

impl<R: Receiver> Timed<R> {
    async fn timed<T, E: std::fmt::Display>(
        &self,
        call: &'static str,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = work.await;
        self.metrics.store_call(
            call,
            started.elapsed(),
            result.as_ref().err().map(|e| super::metrics::cause_of(e)),
        );
        result
    }
}

impl<R: Receiver> Receiver for Timed<R> {
    fn config(&self) -> &Config {
        self.inner.config()
    }

    async fn ready(&self) -> bool {
        self.inner.ready().await
    }

    async fn unready(&self) -> Option<String> {
        self.inner.unready().await
    }

    async fn degraded(&self) -> Option<String> {
        self.inner.degraded().await
    }

    async fn idle(&self) {
        self.inner.idle().await;
    }

    fn commit_counts(&self) -> Option<CommitCounts> {
        self.inner.commit_counts()
    }

    async fn unknown_keys(&self) -> Result<u64, MaintainError> {
        self.timed("unknown_keys", self.inner.unknown_keys()).await
    }

    async fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Decision, Error> {
        self.timed("begin", self.inner.begin_with(id, fingerprint, now, terms))
            .await
    }

    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        self.timed(
            "heartbeat",
            self.inner.heartbeat_with(id, generation, now, terms),
        )
        .await
    }

    async fn complete_with(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        self.timed(
            "complete",
            self.inner
                .complete_with(id, generation, verdict, outcome, now, terms),
        )
        .await
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.timed("release", self.inner.release(id, generation, now))
            .await
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.timed("mark_unknown", self.inner.mark_unknown(id, generation, now))
            .await
    }

    async fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        self.timed("resolve", self.inner.resolve(id, resolution, now))
            .await
    }

    fn give_up(&self, id: &RecordId, generation: Generation, how: GiveUp, now: Timestamp) {
        self.inner.give_up(id, generation, how, now);
    }

    async fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        self.timed("get", self.inner.get(id)).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<(RecordId, Record)>, Error> {
        self.timed("list", self.inner.list(filter)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        self.timed("stats", self.inner.stats(now)).await
    }

    async fn sweep(
        &self,
        now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        self.timed("sweep", self.inner.sweep(now, limit, dry_run))
            .await
    }

    async fn recover_abandoned(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        self.timed(
            "recover_abandoned",
            self.inner.recover_abandoned(now, limit),
        )
        .await
    }

    async fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        self.timed("reconcile", self.inner.reconcile(now, limit, checker))
            .await
    }

    async fn export(&self, out: &mut (dyn Write + Send)) -> Result<Transferred, MaintainError> {
        self.timed("export", self.inner.export(out)).await
    }

    async fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Transferred, ImportError> {
        self.timed("import", self.inner.import(input)).await
    }
}
