//! `impl Receiver for PgStore`: the protocol inputs as statements. idem-core decides;
//! each statement carries the core's write, conditioned on what the engine read (a
//! begin) or fenced by generation and state (the other inputs); the steps are in
//! `two_phase.rs`.

use std::io::{BufRead, Write};

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, State, Terms, Timestamp, Verdict,
};

use super::PgStore;
use super::error::{ambiguous, database};
use super::row::{PENDING, record_at};
use super::two_phase::{BEGIN_ATTEMPTS, Fence, key_params};
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::claiming::Claiming;
use crate::seam::filter::ListFilter;
use crate::seam::receiver::{GiveUp, Receiver};
use crate::seam::reconcile;
use crate::seam::report::{
    Abandoned, Check, ReconcileError, ReconcileReport, Stats, SweepReport, Transferred,
};
use crate::seam::template::stand_in;

impl PgStore {
    /// A begin's statements: a claim, or the core's answer on the record in the way.
    async fn claim_or_answer(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        terms: Terms,
    ) -> Result<Decision, Error> {
        let claimant = self.inner.claimants.next();
        for _ in 0..BEGIN_ATTEMPTS {
            let connection = self.connection("begin").await?;
            match self
                .begin_once(&connection, id, fingerprint, claimant, terms)
                .await
            {
                Ok(Some(decision)) => return Ok(decision),
                Ok(None) => {}
                Err(e) => {
                    if ambiguous(&e) {
                        // The claim may have landed with nobody to run it: given back
                        // once the database answers again.
                        self.give_back_later(id, claimant);
                    }
                    return Err(e);
                }
            }
        }
        Err(Error::Contended {
            attempts: BEGIN_ATTEMPTS,
        })
    }
}

impl Receiver for PgStore {
    fn config(&self) -> &Config {
        &self.inner.config
    }

    async fn ready(&self) -> bool {
        self.ping().await
    }

    /// Waits for the begins left by their callers and the give-ups, which run in tasks
    /// of their own: a claim whose caller left is given back before this is ready.
    async fn idle(&self) {
        self.inner.background.idle().await;
    }

    /// Claims or answers on the database's clock; `now` is not used.
    ///
    /// The statements run in the caller's task; when this future is dropped before they
    /// answered (the HTTP client hung up), they finish in a task of their own, which
    /// gives back a claim they made, so a retry claims the key again.
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
        let config = self.inner.config.with_terms(&terms);
        let template = protocol::heartbeat(
            Some(&stand_in(generation, State::Pending)),
            generation,
            Timestamp(0),
            &config,
        )?;
        let fence = Fence {
            generation: Some(generation),
            state: PENDING,
        };
        self.update("heartbeat", id, fence, &template.status, |current, now| {
            protocol::heartbeat(current, generation, now, &config).map(drop)
        })
        .await
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
        let config = self.inner.config.with_terms(&terms);
        let template = protocol::complete(
            Some(&stand_in(generation, State::Pending)),
            generation,
            verdict,
            outcome.clone(),
            Timestamp(0),
            &config,
        )?;
        let fence = Fence {
            generation: Some(generation),
            state: PENDING,
        };
        let record = self
            .update("complete", id, fence, &template.status, |current, now| {
                protocol::complete(current, generation, verdict, outcome.clone(), now, &config)
                    .map(drop)
            })
            .await?;
        self.inner.cache.keep(id, &record);
        Ok(record)
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
    ) -> Result<(), Error> {
        let fence = Fence {
            generation: Some(generation),
            state: PENDING,
        };
        self.delete("release", id, fence, |current| {
            protocol::release(current, generation).map(drop)
        })
        .await
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
    ) -> Result<Record, Error> {
        let template = protocol::mark_unknown(
            Some(&stand_in(generation, State::Pending)),
            generation,
            Timestamp(0),
        )?;
        let fence = Fence {
            generation: Some(generation),
            state: PENDING,
        };
        self.update(
            "mark_unknown",
            id,
            fence,
            &template.status,
            |current, now| protocol::mark_unknown(current, generation, now).map(drop),
        )
        .await
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
        let connection = self.connection("get").await?;
        let [t, o, k] = key_params(id);
        let row = connection
            .client
            .query_opt(&connection.statements.get, &[&t, &o, &k])
            .await
            .map_err(database("get"))?;
        row.map(|row| record_at(&row, 0, id)).transpose()
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<(RecordId, Record)>, Error> {
        self.list_records(filter).await
    }

    async fn stats(&self, _now: Timestamp) -> Result<Stats, MaintainError> {
        self.stats_now().await
    }

    /// Counted on the index of open records (pending and unknown), not the table.
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
        PgStore::recover_abandoned(self, limit).await
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
