//! The reconciler: claims whose executor went silent, and Unknown records settled by a checker.

pub(crate) mod steps;

use std::ops::ControlFlow;

use idem_core::protocol::Resolution;
use idem_core::{LeaseExpiry, Record, RecordId, State, Timestamp};

use crate::error::Error;
use crate::file::read::steps as read;
use crate::file::store::Store;
use crate::seam::filter::ListFilter;
use crate::seam::report::{Abandoned, Check, ReconcileError, ReconcileReport};

impl Store {
    /// Finds the claims whose executor went silent (Pending, lease run out at `now`) and,
    /// under the default [`LeaseExpiry::Unknown`] policy, turns each Unknown, as a begin
    /// on its key would: the executor may have acted, so a reconciler must settle it.
    /// Under [`LeaseExpiry::Takeover`] they are only reported. Call it once at start-up,
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

    /// [`Store::recover_abandoned`] for at most `limit` silent claims, in key order.
    pub(crate) fn recover_at_most(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        self.shared.writer.ensure_writable("recover_abandoned")?;
        let at = now.max(self.clock_floor()?);
        let mut silent = Vec::new();
        let pending = ListFilter {
            state: Some(State::Pending),
            ..ListFilter::default()
        };
        read::list(&self.shared.writer, &pending, |id, record| {
            if record
                .lease_until()
                .is_some_and(|lease_until| at >= lease_until)
            {
                silent.push((id, record.generation));
            }
            if silent.len() < limit {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
        let mut found = Abandoned::default();
        for (id, generation) in silent {
            if self.shared.config.on_lease_expiry == LeaseExpiry::Takeover {
                found.left_for_takeover.push(id);
                continue;
            }
            let step = steps::abandon(generation);
            if self.shared.committer.input(
                &self.shared.writer,
                &self.shared.config,
                &id,
                now,
                step,
            )? {
                found.turned_unknown.push(id);
            }
        }
        Ok(found)
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
        mut checker: impl FnMut(&RecordId, &Record) -> Result<Check, E>,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        self.shared.writer.ensure_writable("reconcile")?;
        let unknown = ListFilter {
            state: Some(State::Unknown),
            limit: Some(limit.saturating_add(1)),
            ..ListFilter::default()
        };
        let mut records = Vec::new();
        read::list(&self.shared.writer, &unknown, |id, record| {
            records.push((id, record));
            ControlFlow::Continue(())
        })?;
        let mut report = ReconcileReport {
            remaining: records.len() > limit,
            ..ReconcileReport::default()
        };
        records.truncate(limit);
        for (id, record) in records {
            report.examined += 1;
            let check = match checker(&id, &record) {
                Ok(check) => check,
                Err(source) => {
                    report.examined -= 1;
                    return Err(ReconcileError::Checker { id, report, source });
                }
            };
            let (resolution, count) = match check {
                Check::CannotTell => {
                    report.undecided += 1;
                    continue;
                }
                Check::Succeeded(outcome) => {
                    (Resolution::Succeeded(outcome), &mut report.succeeded)
                }
                Check::Failed(outcome) => (Resolution::Failed(outcome), &mut report.failed),
                Check::NotExecuted => (Resolution::NotExecuted, &mut report.not_executed),
            };
            let epoch = self.shared.cache.epoch();
            let step = steps::settle(record.generation, resolution);
            match self.shared.committer.input(
                &self.shared.writer,
                &self.shared.config,
                &id,
                now,
                step,
            )? {
                Some(settled) => {
                    *count += 1;
                    if let Some(settled) = settled {
                        self.shared
                            .cache
                            .insert(&id.to_key_bytes(), &settled, epoch);
                    }
                }
                None => report.changed_meanwhile += 1,
            }
        }
        Ok(report)
    }
}
