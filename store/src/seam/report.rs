//! What the seam's calls return: the answers of the layers after the key, and the
//! reports of the operator's work. Every engine returns these same types.

use idem_core::protocol::Decision;
use idem_core::{Generation, Outcome, Record, RecordId, State, Timestamp, TokenRefusal, Verdict};
use serde::Serialize;

use crate::error::Error;

/// What an atomic execute did ([`crate::Store::execute`] on a file, `PgStore::execute`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the outcome must be answered to the caller"]
pub enum Executed<T> {
    /// This call claimed the key and ran the work; its writes and the settled record
    /// committed together.
    Ran {
        /// What the work returned besides the outcome.
        value: T,
        /// The settled record, as committed.
        record: Record,
    },
    /// The work did not run: the key was settled ([`Decision::Replay`]), held by a
    /// two-phase executor ([`Decision::InProgress`]), live with another fingerprint
    /// ([`Decision::Conflict`]) or needs reconciliation
    /// ([`Decision::NeedsReconciliation`]). Never [`Decision::Claimed`].
    NotRun(Decision),
}

impl<T> Executed<T> {
    /// The settled verdict and outcome: the one just committed, or the one replayed.
    /// `None` when the work did not run and nothing is settled.
    #[must_use]
    pub fn outcome(&self) -> Option<(Verdict, &Outcome)> {
        match self {
            Executed::Ran { record, .. } => match &record.status {
                idem_core::Status::Settled {
                    verdict, outcome, ..
                } => Some((*verdict, outcome)),
                _ => None,
            },
            Executed::NotRun(Decision::Replay {
                verdict, outcome, ..
            }) => Some((*verdict, outcome)),
            Executed::NotRun(_) => None,
        }
    }
}

/// What an inbox's `handle` did with a delivery ([`crate::inbox::Inbox::handle`] on a file).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a handled or duplicate message is acknowledged to the queue"]
pub enum Handled<T> {
    /// First delivery: the handler ran, its writes and the message's record committed
    /// together. Acknowledge it.
    Ran {
        /// What the handler returned besides the outcome.
        value: T,
        /// The outcome kept for duplicates.
        outcome: Outcome,
    },
    /// A redelivery of a handled message: the handler did not run. Acknowledge it.
    Duplicate(Outcome),
    /// The message id was handled with other content ([`Decision::Conflict`]), or its
    /// record is held by a two-phase executor or unknown: the handler did not run, and
    /// the message needs a look before it is acknowledged.
    NotRun(Decision),
}

impl<T> Handled<T> {
    /// What the execute of a delivery came to, for its consumer: every engine's inbox
    /// answers with this.
    pub(crate) fn of(executed: Executed<T>) -> Handled<T> {
        match executed {
            Executed::Ran { value, record } => match record.status {
                idem_core::Status::Settled { outcome, .. } => Handled::Ran { value, outcome },
                // An execute that ran puts only settled records.
                other => unreachable!("an executed record is settled, not {other:?}"),
            },
            Executed::NotRun(Decision::Replay { outcome, .. }) => Handled::Duplicate(outcome),
            Executed::NotRun(decision) => Handled::NotRun(decision),
        }
    }
}

/// What a consume of a token answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a refused token must be answered to the caller"]
pub enum Consumed<T> {
    /// The token cannot be used; nothing was written.
    Refused(TokenRefusal),
    /// The token is admitted: what the protocol (or the atomic execute) did.
    Admitted(T),
}

/// What [`crate::Receiver::sweep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SweepReport {
    /// Records deleted (tombstones past their time, and settled records when
    /// tombstones are off); for a dry run, records that would be.
    pub removed: u64,
    /// Settled records past retention replaced by their tombstone; for a dry run,
    /// records that would be.
    pub tombstoned: u64,
    /// True when expired records remain beyond the limit.
    pub remaining_expired: bool,
}

/// Numbers for alerting, from one snapshot. See [`crate::Receiver::stats`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Records in state Pending.
    pub pending: u64,
    /// Records in state Succeeded.
    pub succeeded: u64,
    /// Records in state Failed.
    pub failed: u64,
    /// Records in state Unknown: each needs a reconciler.
    pub unknown: u64,
    /// Tombstones: requests whose outcome is past retention, kept so that a late
    /// retry is answered Forgotten instead of executing again.
    pub forgotten: u64,
    /// Pending records whose lease ran out: an executor died or hangs.
    pub pending_lease_expired: u64,
    /// Settled records and tombstones past their time, waiting for a sweep.
    pub expired: u64,
    /// Age (now − `created_at`) of the oldest Pending record.
    pub oldest_pending_age_ms: Option<u64>,
    /// How long the record that has been Unknown the longest has been so: now − the
    /// time it became Unknown (its `updated_at`).
    pub oldest_unknown_age_ms: Option<u64>,
    /// The clock floor: the latest time a write of a record used. Writes with a clock
    /// behind it use it instead; far from the system clock, a clock is off.
    pub clock_floor: Timestamp,
    /// Size of the store file in bytes; for a store on a backend
    /// ([`crate::StoreBuilder::open_on_backend`]), the backend's length.
    pub file_bytes: u64,
    /// The store-wide generation counter: the last generation handed out.
    pub generation: Generation,
    /// The outbox's intents by state.
    pub intents: IntentCounts,
}

/// The outbox's intents by state, in [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IntentCounts {
    /// Waiting for their next attempt.
    pub queued: u64,
    /// Sent, no answer yet.
    pub in_flight: u64,
    /// Answered 2xx.
    pub completed: u64,
    /// Answered with a definitive failure.
    pub failed: u64,
    /// The receiver saw their key with another payload.
    pub conflict: u64,
    /// No definitive answer before their deadline: each needs reconciling.
    pub expired: u64,
    /// The receiver does not know their outcome either: each needs a person to look.
    pub unknown: u64,
}

impl IntentCounts {
    /// The number of intents in every state.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.queued
            + self.in_flight
            + self.completed
            + self.failed
            + self.conflict
            + self.expired
            + self.unknown
    }
}

impl Stats {
    /// The number of records in `state`.
    #[must_use]
    pub fn count(&self, state: State) -> u64 {
        match state {
            State::Pending => self.pending,
            State::Succeeded => self.succeeded,
            State::Failed => self.failed,
            State::Unknown => self.unknown,
            State::Forgotten => self.forgotten,
        }
    }

    /// The number of records in every state, tombstones included.
    #[must_use]
    pub fn records(&self) -> u64 {
        self.pending + self.succeeded + self.failed + self.unknown + self.forgotten
    }
}

/// What a checker found out about one Unknown record, for [`crate::Receiver::reconcile`].
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

/// What [`crate::Receiver::reconcile`] did.
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

/// [`crate::Receiver::reconcile`] stopped.
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

/// What [`crate::Receiver::recover_abandoned`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// Claims whose lease had run out, turned Unknown (the default
    /// [`idem_core::LeaseExpiry::Unknown`] policy): each needs reconciliation.
    pub turned_unknown: Vec<RecordId>,
    /// Claims whose lease had run out, left Pending under
    /// [`idem_core::LeaseExpiry::Takeover`]: the next begin on each takes it over.
    pub left_for_takeover: Vec<RecordId>,
}

/// How many commits a store made and how its inputs were grouped, since it was opened.
/// See [`crate::Receiver::commit_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CommitCounts {
    /// Write transactions this store committed, on every path (each one fsync with
    /// the default durability).
    pub commits: u64,
    /// Group transactions run to their end: committed, or aborted because none of
    /// their inputs wrote anything.
    pub batches: u64,
    /// Inputs answered by those group transactions.
    pub batched_inputs: u64,
    /// The most inputs one group transaction answered.
    pub largest_batch: u64,
}

/// How much an export wrote or an import read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Transferred {
    /// Records of the receiver.
    pub records: u64,
    /// Intents of the outbox.
    pub intents: u64,
    /// Entities moved by a state machine.
    pub entities: u64,
    /// Claimed business values.
    pub unique: u64,
    /// Issued one-time tokens.
    pub tokens: u64,
}
