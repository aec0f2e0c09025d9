//! The reconciler's rules, written once for every engine (docs/design.md §11): which
//! Unknown records a checker is shown and in what order, what its answers settle, what
//! the report counts; and which silent claims turn Unknown. An engine supplies the reads
//! and the conditional writes ([`Reconciling`]); idem-core decides each write.
//!
//! The checker runs outside any transaction (it may ask a payment provider or read a
//! log); each answer is applied on its own, and only to the record the checker saw: when
//! the record changed meanwhile (someone else resolved it, and perhaps a new claim of the
//! key went Unknown again), the answer is not applied and counts as changed meanwhile.

use idem_core::protocol::Resolution;
use idem_core::{Config, Generation, LeaseExpiry, Record, RecordId, Timestamp};

use crate::error::Error;
use crate::seam::report::{Abandoned, Check, ReconcileError, ReconcileReport};

/// What an engine offers the reconciler: reads in the order the rules need, and writes
/// conditioned on what was read.
pub(crate) trait Reconciling {
    /// The protocol settings the engine applies.
    fn settings(&self) -> &Config;

    /// Unknown records, oldest first: by `created_at`, then by id; at most `limit`.
    async fn unknown_records(&self, limit: usize) -> Result<Vec<(RecordId, Record)>, Error>;

    /// Settles the Unknown record of `generation` under `id` by `resolution`, at `now`
    /// (a server engine: its own clock); false, with nothing written, when the record
    /// under `id` is no longer that Unknown one.
    async fn settle_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<bool, Error>;

    /// Pending records whose lease ran out at `now` (a server engine: its own clock), at
    /// most `limit`, each with the time it was found silent at.
    async fn silent_claims(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(RecordId, Record, Timestamp)>, Error>;

    /// Turns the silent claim `record` under `id` Unknown, at `at`, if it is still that
    /// claim with its lease run out; true when it did.
    async fn abandon_claim(
        &self,
        id: &RecordId,
        record: &Record,
        at: Timestamp,
    ) -> Result<bool, Error>;
}

/// Shows the Unknown records to `checker`, oldest first, at most `limit`, and settles
/// each one it can answer. `examined` counts the records the checker answered: one whose
/// check failed is in the error, unchanged, and not in the report.
// Its error carries the record and the report so far; it ends a run, once.
#[allow(clippy::result_large_err)]
pub(crate) async fn reconcile<E>(
    engine: &impl Reconciling,
    now: Timestamp,
    limit: usize,
    mut checker: impl FnMut(&RecordId, &Record) -> Result<Check, E>,
) -> Result<ReconcileReport, ReconcileError<E>> {
    let mut records = engine.unknown_records(limit.saturating_add(1)).await?;
    let mut report = ReconcileReport {
        remaining: records.len() > limit,
        ..ReconcileReport::default()
    };
    records.truncate(limit);
    for (id, record) in records {
        let check = match checker(&id, &record) {
            Ok(check) => check,
            Err(source) => return Err(ReconcileError::Checker { id, report, source }),
        };
        report.examined += 1;
        let (resolution, count) = match check {
            Check::CannotTell => {
                report.undecided += 1;
                continue;
            }
            Check::Succeeded(outcome) => (Resolution::Succeeded(outcome), &mut report.succeeded),
            Check::Failed(outcome) => (Resolution::Failed(outcome), &mut report.failed),
            Check::NotExecuted => (Resolution::NotExecuted, &mut report.not_executed),
        };
        if engine
            .settle_unknown(&id, record.generation, resolution, now)
            .await?
        {
            *count += 1;
        } else {
            report.changed_meanwhile += 1;
        }
    }
    Ok(report)
}

/// Finds the claims whose executor went silent, at most `limit`: under
/// [`LeaseExpiry::Unknown`] each turns Unknown, as a begin on its key would; under
/// [`LeaseExpiry::Takeover`] they are only reported. A claim renewed or settled meanwhile
/// is left alone.
pub(crate) async fn recover_abandoned(
    engine: &impl Reconciling,
    now: Timestamp,
    limit: usize,
) -> Result<Abandoned, Error> {
    let silent = engine.silent_claims(now, limit).await?;
    let mut found = Abandoned::default();
    for (id, record, at) in silent {
        if engine.settings().on_lease_expiry == LeaseExpiry::Takeover {
            found.left_for_takeover.push(id);
        } else if engine.abandon_claim(&id, &record, at).await? {
            found.turned_unknown.push(id);
        }
    }
    Ok(found)
}
