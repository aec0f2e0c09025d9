//! Reconciliation (docs/design.md §11): claims whose executor went silent turned Unknown, and
//! Unknown records settled by a checker that can tell what happened.
//!
//! The checker runs outside any transaction (it may ask a payment provider or read a
//! log); each answer is then applied in a transaction of its own, and only to the
//! record the checker saw: when the record changed meanwhile (someone else resolved it,
//! and perhaps a new claim of the key went Unknown again), the answer is not applied.

use idem_core::protocol::{self, Resolution};
use idem_core::{Generation, Outcome, RecordId, State, Write};
use serde::Serialize;

use crate::error::Error;
use crate::protocol::group::Step;

/// What a checker found out about one Unknown record, for [`crate::Store::reconcile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// The effect happened, with this outcome: the record settles as succeeded.
    Succeeded(Outcome),
    /// The request failed definitively, with this outcome: the record settles as failed.
    Failed(Outcome),
    /// Nothing was executed: the record is deleted, and a retry claims the key again.
    NotExecuted,
    /// The checker cannot tell: the record stays Unknown.
    CannotTell,
}

/// What [`crate::Store::reconcile`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Unknown records shown to the checker.
    pub examined: u64,
    /// Settled as succeeded.
    pub succeeded: u64,
    /// Settled as failed.
    pub failed: u64,
    /// Deleted as not executed.
    pub not_executed: u64,
    /// Left Unknown: the checker could not tell.
    pub undecided: u64,
    /// Not applied: the record changed between the checker's look and the write.
    pub changed_meanwhile: u64,
    /// True when Unknown records remain beyond the limit.
    pub remaining: bool,
}

/// [`crate::Store::reconcile`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError<E> {
    /// The checker failed on `id`; that record is unchanged, and the ones before it were
    /// reconciled as `report` says.
    #[error("the checker failed on {id}")]
    Checker {
        /// The record the checker was asked about.
        id: RecordId,
        /// What was done before it.
        report: ReconcileReport,
        /// The checker's error.
        #[source]
        source: E,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

/// What [`crate::Store::recover_abandoned`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// Claims whose lease had run out, turned Unknown (the default
    /// [`idem_core::LeaseExpiry::Unknown`] policy): each needs reconciliation.
    pub turned_unknown: Vec<RecordId>,
    /// Claims whose lease had run out, left Pending under
    /// [`idem_core::LeaseExpiry::Takeover`]: the next begin on each takes it over.
    pub left_for_takeover: Vec<RecordId>,
}

/// The claim `generation` turns Unknown if its lease has run out at the step's time;
/// true when it did.
pub(crate) fn abandon(generation: Generation) -> impl Step<bool> {
    move |_, current, _, now| match current {
        Some(record)
            if record.generation == generation
                && record
                    .lease_until()
                    .is_some_and(|lease_until| now >= lease_until) =>
        {
            let unknown = protocol::mark_unknown(current, generation, now)?;
            Ok((Write::Put(unknown), true))
        }
        _ => Ok((Write::Nothing, false)),
    }
}

/// The Unknown record of `generation` settles by `check`; `None` when the record is no
/// longer that Unknown one (nothing written), else the settled record, if any.
pub(crate) fn settle(
    generation: Generation,
    resolution: Resolution,
) -> impl Step<Option<Option<idem_core::Record>>> {
    move |_, current, config, now| match current {
        Some(record) if record.generation == generation && record.state() == State::Unknown => Ok(
            match protocol::resolve(current, resolution.clone(), now, config)? {
                Some(settled) => (Write::Put(settled.clone()), Some(Some(settled))),
                None => (Write::Delete, Some(None)),
            },
        ),
        _ => Ok((Write::Nothing, None)),
    }
}
