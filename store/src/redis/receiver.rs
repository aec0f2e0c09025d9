//! `impl Receiver for RedisStore`: the protocol inputs as function calls. idem-core
//! decides; each write is applied over the record's bytes the engine read; the steps are
//! in `two_phase.rs`.

use std::io::{BufRead, Write};

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, Terms, Timestamp, Verdict,
};

use super::RedisStore;
use super::keys::{decode, record_key};
use super::two_phase::{BEGIN_ATTEMPTS, failed};
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::claiming::{Claiming, written};
use crate::seam::filter::ListFilter;
use crate::seam::receiver::{GiveUp, Receiver};
use crate::seam::reconcile;
use crate::seam::report::{
    Abandoned, Check, ReconcileError, ReconcileReport, Stats, SweepReport, Transferred,
};

impl RedisStore {
    /// A begin's calls: a claim, or the core's answer on the record in the way.
    async fn claim_or_answer(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        terms: Terms,
    ) -> Result<Decision, Error> {
        for _ in 0..BEGIN_ATTEMPTS {
            if let Some(decision) = self.begin_once(id, fingerprint, terms).await? {
                return Ok(decision);
            }
        }
        Err(Error::Contended {
            attempts: BEGIN_ATTEMPTS,
        })
    }
}

impl Receiver for RedisStore {
    fn config(&self) -> &Config {
        &self.inner.config
    }

    fn accepted_risk(&self) -> Option<&str> {
        self.inner.accepted_risk.as_deref()
    }

    async fn ready(&self) -> bool {
        self.unready().await.is_none()
    }

    /// Why claims are refused: a server that does not answer, or one short of room under
    /// its `maxmemory`.
    async fn unready(&self) -> Option<String> {
        if !self.ping().await {
            return Some("the Redis server does not answer".to_owned());
        }
        match self.room_for_claim().await {
            Ok(()) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Waits for the begins left by their callers and the give-ups, which run in tasks
    /// of their own.
    async fn idle(&self) {
        self.inner.background.idle().await;
    }

    /// Claims or answers on the server's clock; `now` is not used.
    ///
    /// The calls run in the caller's task; when this future is dropped before they answered,
    /// they finish in a task of their own, which gives back a claim they made.
    async fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        _now: Timestamp,
        terms: Terms,
    ) -> Result<Decision, Error> {
        if let Some(decision) = self.inner.cache.answer(id, fingerprint, &self.inner.config) {
            return Ok(decision);
        }
        let (store, key) = (self.clone(), id.clone());
        Claiming::new(
            self.clone(),
            id.clone(),
            self.inner.runtime.clone(),
            self.inner.background.clone(),
            Box::pin(async move { store.claim_or_answer(&key, fingerprint, terms).await }),
        )
        .await
    }

    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let record = self
            .fenced("heartbeat", id, |current, now| {
                protocol::heartbeat(current, generation, now, config).map(Some)
            })
            .await?;
        written(record)
    }

    async fn complete_with(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        _now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let record = self
            .fenced("complete", id, |current, now| {
                protocol::complete(current, generation, verdict, outcome.clone(), now, config)
                    .map(Some)
            })
            .await?;
        let record = written(record)?;
        self.inner.cache.keep(id, &record);
        Ok(record)
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
    ) -> Result<(), Error> {
        self.fenced("release", id, |current, _| {
            protocol::release(current, generation).map(|_| None)
        })
        .await
        .map(drop)
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
    ) -> Result<Record, Error> {
        let record = self
            .fenced("mark_unknown", id, |current, now| {
                protocol::mark_unknown(current, generation, now).map(Some)
            })
            .await?;
        written(record)
    }

    async fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        _now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        self.resolve_fenced("resolve", id, None, resolution).await
    }

    fn give_up(&self, id: &RecordId, generation: Generation, how: GiveUp, now: Timestamp) {
        let store = self.clone();
        let id = id.clone();
        let entered = self.inner.background.enter();
        self.inner.runtime.spawn(async move {
            let _entered = entered;
            // A failure leaves the claim Pending; a retry after its lease finds it as
            // the protocol says.
            let _given_up = match how {
                GiveUp::Release => store.release(&id, generation, now).await,
                GiveUp::MarkUnknown => store.mark_unknown(&id, generation, now).await.map(drop),
            };
        });
    }

    async fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        let mut conn = self.conn();
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(record_key(id))
            .query_async(&mut conn)
            .await
            .map_err(failed("get"))?;
        decode(&bytes.unwrap_or_default(), id)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<(RecordId, Record)>, Error> {
        self.list_records(filter).await
    }

    async fn stats(&self, _now: Timestamp) -> Result<Stats, MaintainError> {
        self.stats_now().await
    }

    /// Counted on the index of Unknown records.
    async fn unknown_keys(&self) -> Result<u64, MaintainError> {
        self.unknown_now().await
    }

    async fn sweep(
        &self,
        _now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        self.sweep_now(limit, dry_run).await
    }

    async fn recover_abandoned(&self, _now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        reconcile::recover_abandoned(self, Timestamp(0), limit).await
    }

    async fn reconcile<E: Send>(
        &self,
        _now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        reconcile::reconcile(self, Timestamp(0), limit, checker).await
    }

    async fn export(&self, out: &mut (dyn Write + Send)) -> Result<Transferred, MaintainError> {
        self.export_records(out).await
    }

    async fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Transferred, ImportError> {
        self.import_records(input).await
    }
}
