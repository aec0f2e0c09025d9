//! The reconciler on a file: the seam's rules (`seam/reconcile.rs`) over the file's
//! reads and conditional writes, each write a step of its own commit (`steps.rs`).

pub(crate) mod steps;

use std::ops::ControlFlow;

use idem_core::protocol::Resolution;
use idem_core::{Config, Generation, Record, RecordId, State, Timestamp};

use crate::error::Error;
use crate::file::read::steps as read;
use crate::file::store::Store;
use crate::seam::filter::ListFilter;
use crate::seam::poll::block_on;
use crate::seam::reconcile::{self, Reconciling};
use crate::seam::report::{Abandoned, Check, ReconcileError, ReconcileReport};

impl Store {
    /// Finds the claims whose executor went silent (Pending, lease run out at `now`) and,
    /// under the default [`idem_core::LeaseExpiry::Unknown`] policy, turns each Unknown, as a begin
    /// on its key would: the executor may have acted, so a reconciler must settle it.
    /// Under [`idem_core::LeaseExpiry::Takeover`] they are only reported. Call it once at start-up,
    /// after a crash of the process that held the claims, and before
    /// [`Store::reconcile`].
    ///
    /// A claim renewed or settled meanwhile is left alone. Each change commits on its
    /// own.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; claims turned Unknown before the error stay so.
    pub fn recover_abandoned(&self, now: Timestamp) -> Result<Abandoned, Error> {
        self.recover_at_most(now, usize::MAX)
    }

    /// [`Store::recover_abandoned`] for at most `limit` silent claims.
    pub(crate) fn recover_at_most(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        self.shared.writer.ensure_writable("recover_abandoned")?;
        block_on(reconcile::recover_abandoned(self, now, limit))
    }

    /// Shows the Unknown records to `checker`, oldest first, at most `limit`, and
    /// settles each one it can answer: [`Check::Succeeded`] and [`Check::Failed`] settle
    /// the record with that outcome, [`Check::NotExecuted`] deletes it (a retry runs the
    /// request again), [`Check::CannotTell`] leaves it Unknown.
    ///
    /// `checker` runs outside any transaction, so it may take its time (ask the payment
    /// provider, read a log); its answer is applied only if the record is still the
    /// Unknown one it saw. Each answer commits on its own.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Checker`] when the checker fails (the records before it stay
    /// reconciled); [`ReconcileError::Store`] for storage errors.
    // Its error carries the record and the report so far; it ends a run, once.
    #[allow(clippy::result_large_err)]
    pub fn reconcile<E>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E>,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        self.shared.writer.ensure_writable("reconcile")?;
        block_on(reconcile::reconcile(self, now, limit, checker))
    }
}

impl Reconciling for Store {
    fn settings(&self) -> &Config {
        &self.shared.config
    }

    async fn unknown_records(&self, limit: usize) -> Result<Vec<(RecordId, Record)>, Error> {
        // The state index keeps Unknown records by `created_at`, then by id.
        let unknown = ListFilter {
            state: Some(State::Unknown),
            limit: Some(limit),
            ..ListFilter::default()
        };
        let mut records = Vec::new();
        read::list(&self.shared.writer, &unknown, |id, record| {
            records.push((id, record));
            ControlFlow::Continue(())
        })?;
        Ok(records)
    }

    async fn settle_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<bool, Error> {
        let epoch = self.shared.cache.epoch();
        let step = steps::settle(generation, resolution);
        let settled =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        if let Some(Some(record)) = &settled {
            self.shared.cache.insert(&id.to_key_bytes(), record, epoch);
        }
        Ok(settled.is_some())
    }

    async fn silent_claims(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(RecordId, Record, Timestamp)>, Error> {
        let at = now.max(self.clock_floor()?);
        let mut silent = Vec::new();
        let pending = ListFilter {
            state: Some(State::Pending),
            ..ListFilter::default()
        };
        read::list(&self.shared.writer, &pending, |id, record| {
            if silent.len() >= limit {
                return ControlFlow::Break(());
            }
            if record
                .lease_until()
                .is_some_and(|lease_until| at >= lease_until)
            {
                silent.push((id, record, at));
            }
            ControlFlow::Continue(())
        })?;
        Ok(silent)
    }

    async fn abandon_claim(
        &self,
        id: &RecordId,
        record: &Record,
        at: Timestamp,
    ) -> Result<bool, Error> {
        let step = steps::abandon(record.generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, at, step)
    }
}
