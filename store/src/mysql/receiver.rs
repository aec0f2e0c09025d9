//! `impl Receiver for MySqlStore`: the protocol inputs as statements. idem-core decides;
//! each statement carries the core's write, conditioned on the revision the engine read;
//! the steps are in `two_phase.rs`.

use std::io::{BufRead, Write};

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, State, Terms, Timestamp, Verdict,
};
use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::MySqlStore;
use super::error::{ambiguous, database, read_only};
use super::row::{key_values, record_at};
use super::statements::GET;
use super::two_phase::BEGIN_ATTEMPTS;
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::claiming::{Claiming, written};
use crate::seam::filter::ListFilter;
use crate::seam::receiver::{GiveUp, Receiver};
use crate::seam::reconcile;
use crate::seam::report::{
    Abandoned, Check, ReconcileError, ReconcileReport, Stats, SweepReport, Transferred,
};
use crate::seam::template::stand_in;

impl MySqlStore {
    /// A begin's statements: a claim, or the core's answer on the record in the way.
    async fn claim_or_answer(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        terms: Terms,
    ) -> Result<Decision, Error> {
        let claimant = self.inner.claimants.next();
        for _ in 0..BEGIN_ATTEMPTS {
            let mut conn = self.conn("begin").await?;
            match self
                .begin_once(&mut conn, id, fingerprint, claimant, terms)
                .await
            {
                Ok(Some(decision)) => return Ok(decision),
                Ok(None) => {}
                // A demoted primary: start over on the host that takes writes now.
                Err(e) if read_only(&e) => self.inner.hosts.failed(),
                Err(e) => {
                    if ambiguous(&e) {
                        // The claim may have landed with nobody to run it: given back
                        // once the database answers again.
                        self.inner.hosts.failed();
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

impl Receiver for MySqlStore {
    fn config(&self) -> &Config {
        &self.inner.config
    }

    fn accepted_risk(&self) -> Option<&str> {
        self.inner.accepted_risk.as_deref()
    }

    async fn ready(&self) -> bool {
        self.ping().await
    }

    /// Why inputs cannot run: the database does not answer (the driver's error), or no
    /// host of the URL's list takes writes (each named with why).
    async fn unready(&self) -> Option<String> {
        self.answer().await.err().map(|e| match e {
            mysql_async::Error::Other(finding) => finding.to_string(),
            e => format!("the database does not answer: {e}"),
        })
    }

    /// A semi-synchronous primary that fell back to asynchronous replication, read from
    /// the server's status at each call; `None` too when the server does not answer
    /// (then [`Receiver::ready`] says so).
    async fn degraded(&self) -> Option<String> {
        let mut conn = self.inner.hosts.get_conn().await.ok()?;
        super::durability::degraded(&mut conn).await.ok().flatten()
    }

    /// Waits for the begins left by their callers and the give-ups, which run in tasks
    /// of their own.
    async fn idle(&self) {
        self.inner.background.idle().await;
    }

    /// Claims or answers on the database's clock; `now` is not used.
    ///
    /// The statements run in the caller's task; when this future is dropped before they
    /// answered, they finish in a task of their own, which gives back a claim they made.
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

    /// One statement when this replica holds the claim (`pending.rs`); else a read and
    /// a write.
    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let template = protocol::heartbeat(
            Some(&stand_in(generation, State::Pending)),
            generation,
            Timestamp(0),
            config,
        )?;
        if let Some(record) = self
            .update_pending("heartbeat", id, generation, &template.status)
            .await?
        {
            return Ok(record);
        }
        let record = self
            .fenced("heartbeat", id, |current, now| {
                protocol::heartbeat(current, generation, now, config).map(Some)
            })
            .await?;
        written(record)
    }

    /// One statement when this replica holds the claim (`pending.rs`); else a read and
    /// a write.
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
        let template = protocol::complete(
            Some(&stand_in(generation, State::Pending)),
            generation,
            verdict,
            outcome.clone(),
            Timestamp(0),
            config,
        )?;
        let settled = async {
            match self
                .update_pending("complete", id, generation, &template.status)
                .await?
            {
                Some(record) => Ok(record),
                None => written(
                    self.fenced("complete", id, |current, now| {
                        protocol::complete(
                            current,
                            generation,
                            verdict,
                            outcome.clone(),
                            now,
                            config,
                        )
                        .map(Some)
                    })
                    .await?,
                ),
            }
        };
        // Settled or refused, this replica holds the claim no longer.
        let settled = settled.await;
        self.inner.held.forget(id, generation);
        let record = settled?;
        self.inner.cache.keep(id, &record);
        Ok(record)
    }

    /// One statement (`pending.rs`) when the fence holds; else a read and a write.
    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        _now: Timestamp,
    ) -> Result<(), Error> {
        self.inner.held.forget(id, generation);
        if !self.delete_pending("release", id, generation).await? {
            self.fenced("release", id, |current, _| {
                protocol::release(current, generation).map(|_| None)
            })
            .await?;
        }
        Ok(())
    }

    /// One statement when this replica holds the claim (`pending.rs`); else a read and
    /// a write.
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
        let unknown = async {
            match self
                .update_pending("mark_unknown", id, generation, &template.status)
                .await?
            {
                Some(record) => Ok(record),
                None => written(
                    self.fenced("mark_unknown", id, |current, now| {
                        protocol::mark_unknown(current, generation, now).map(Some)
                    })
                    .await?,
                ),
            }
        };
        // Marked or refused, this replica holds the claim no longer.
        let unknown = unknown.await;
        self.inner.held.forget(id, generation);
        unknown
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
        let mut conn = self.conn("get").await?;
        let row: Option<Row> = conn
            .exec_first(GET, key_values(id).to_vec())
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
