//! The receiver protocol: pure transitions from (current record, input, now, config) to
//! a decision and the write to apply.
//!
//! Each function here takes the record as the caller read it (or `None` when the key is
//! absent), one input, the time, and the [`Config`]. It never reads a clock and never
//! touches storage. A store calls it inside a write transaction, applies the returned
//! [`Write`] in that same transaction, commits, and only then answers its caller.
//!
//! | input | current | result |
//! |---|---|---|
//! | [`begin`] | absent; settled past `expires_at` with tombstones off; tombstone past its `expires_at` | put Pending (new generation) → [`Decision::Claimed`] |
//! | [`begin`] | live record or tombstone, other fingerprint | nothing → [`Decision::Conflict`] |
//! | [`begin`] | tombstone, or settled past `expires_at` within `tombstone_retention_ms` | nothing → [`Decision::Forgotten`] |
//! | [`begin`] | Pending, lease running | nothing → [`Decision::InProgress`] |
//! | [`begin`] | Pending, lease run out | [`LeaseExpiry::Unknown`]: put Unknown → [`Decision::NeedsReconciliation`]; [`LeaseExpiry::Takeover`]: put Pending (new generation) → [`Decision::Claimed`] |
//! | [`begin`] | settled, not expired | nothing → [`Decision::Replay`] |
//! | [`begin`] | Unknown | nothing → [`Decision::NeedsReconciliation`] |
//! | [`heartbeat`] | Pending with the generation | put: lease renewed |
//! | [`complete`] | Pending with the generation | put: settled, expires after retention |
//! | [`release`] | Pending with the generation | delete |
//! | [`mark_unknown`] | Pending with the generation | put Unknown |
//! | [`resolve`] | Unknown | put settled, or delete for [`Resolution::NotExecuted`] |
//! | [`sweep`] | settled past `expires_at` | put its tombstone, or delete when tombstones are off or the tombstone's time is over too |
//! | [`sweep`] | tombstone past its `expires_at` | delete |
//!
//! Heartbeat, complete, release and mark-unknown with any other generation or state are
//! refused as [`Refusal::Stale`]: a late executor never overwrites a newer one or a
//! settled outcome.
//!
//! Each function returns the type of write it can make, and no other: [`begin`] a
//! [`Write`] (it may put, or write nothing), [`heartbeat`], [`complete`] and
//! [`mark_unknown`] the [`Record`] to put, [`release`] a [`Delete`], and [`resolve`] the
//! record to put or `None` to delete, and [`sweep`] a [`Swept`].
//!
//! **Tombstones.** A settled record past its retention answers as the tombstone sweep
//! would leave of it, whether or not a sweep ran: the answer to a retry never depends on
//! when maintenance happened.

use core::fmt;

use crate::{
    Config, Fingerprint, Generation, LeaseExpiry, Outcome, OutcomeError, Record, State, Status,
    Timestamp, Verdict,
};

/// What the store must do to the record, in the transaction in which it read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a transition's write must be applied before answering"]
pub enum Write {
    /// Leave the record as it is.
    Nothing,
    /// Store this record under the key (insert or replace).
    Put(Record),
    /// Remove the record.
    Delete,
}

/// The one write [`release`] makes: delete the record under the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the record must be deleted before answering"]
pub struct Delete;

/// A decision with the write that makes it true.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a transition's write must be applied before answering"]
pub struct Transition<D> {
    /// The answer for the caller, valid once `write` is committed.
    pub decision: D,
    /// The write to apply first.
    pub write: Write,
}

/// The answer to [`begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The caller holds the key: execute, then complete, release or mark unknown with
    /// this generation before `lease_until` (or heartbeat to extend it).
    Claimed {
        /// The caller's fencing token.
        generation: Generation,
        /// When the claim counts as abandoned.
        lease_until: Timestamp,
    },
    /// Another executor holds the key; retry after `lease_until`.
    InProgress {
        /// The holder's generation.
        generation: Generation,
        /// When the holder's lease ends.
        lease_until: Timestamp,
    },
    /// The request already settled: answer with this outcome, do not execute again.
    Replay {
        /// Succeeded or failed.
        verdict: Verdict,
        /// The stored answer, byte for byte.
        outcome: Outcome,
        /// When it settled.
        completed_at: Timestamp,
    },
    /// The key is live with another request's fingerprint: the client reused a key.
    Conflict {
        /// The stored record's state.
        state: State,
        /// The stored record's fingerprint.
        stored_fingerprint: Fingerprint,
    },
    /// Nobody knows whether the effect happened; a reconciler must [`resolve`] it.
    NeedsReconciliation {
        /// The generation whose outcome is unknown.
        generation: Generation,
    },
    /// The request ran and settled, but its outcome is past retention and no longer
    /// kept (only its tombstone is). Do not execute again; HTTP answers 410 Gone.
    Forgotten {
        /// The generation that ran.
        generation: Generation,
        /// How it settled.
        verdict: Verdict,
        /// When it settled.
        completed_at: Timestamp,
    },
}

/// How an Unknown record is reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The effect happened with this outcome.
    Succeeded(Outcome),
    /// The request failed definitively with this outcome.
    Failed(Outcome),
    /// Nothing was executed: delete the record so a retry claims a fresh generation.
    NotExecuted,
}

/// An input refused; nothing is written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// There is no record under the key.
    NotFound,
    /// The generation given is not the current pending one.
    Stale {
        /// The generation the caller named.
        given: Generation,
        /// The record's generation.
        current: Generation,
        /// The record's state.
        state: State,
    },
    /// The record is not in a state this input applies to (resolve needs Unknown).
    WrongState {
        /// The record's state.
        state: State,
        /// The state the input needs.
        expected: State,
    },
    /// The outcome is over the configured size.
    OutcomeTooLarge(OutcomeError),
    /// A claim needs a new generation and the counter is at `u64::MAX`: no new claim can
    /// be fenced. Only a restored snapshot can get a receiver there.
    GenerationsExhausted,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotFound => f.write_str("no record under this key"),
            Refusal::Stale {
                given,
                current,
                state,
            } => write!(
                f,
                "generation {given} is stale: the record is {state} with generation {current}; only the current pending generation may act"
            ),
            Refusal::WrongState { state, expected } => {
                write!(
                    f,
                    "record is {state}, this needs a record that is {expected}"
                )
            }
            Refusal::OutcomeTooLarge(e) => fmt::Display::fmt(e, f),
            Refusal::GenerationsExhausted => f.write_str(
                "generation counter exhausted: no generation after 18446744073709551615",
            ),
        }
    }
}

impl core::error::Error for Refusal {}

/// A request with `fingerprint` arrives for the key whose record is `current`.
///
/// `next_generation` is the generation a claim gets: the store's counter plus one. The
/// store must persist its counter when the decision is [`Decision::Claimed`].
pub fn begin(
    current: Option<&Record>,
    fingerprint: Fingerprint,
    next_generation: Generation,
    now: Timestamp,
    config: &Config,
) -> Transition<Decision> {
    let claim = || {
        let lease_until = now.plus_millis(config.lease_ms);
        Transition {
            decision: Decision::Claimed {
                generation: next_generation,
                lease_until,
            },
            write: Write::Put(Record {
                fingerprint,
                generation: next_generation,
                created_at: now,
                updated_at: now,
                status: Status::Pending { lease_until },
            }),
        }
    };
    let answer = |decision| Transition {
        decision,
        write: Write::Nothing,
    };

    // A settled record past its retention stands for its tombstone (see the module
    // docs); a record still past its time after that is as good as absent.
    let tombstone;
    let current = match current {
        Some(r) if r.is_expired(now) => {
            tombstone = r.tombstone(config.tombstone_retention_ms);
            tombstone.as_ref()
        }
        other => other,
    };
    let Some(record) = current.filter(|r| !r.is_expired(now)) else {
        return claim();
    };
    if record.fingerprint != fingerprint {
        return answer(Decision::Conflict {
            state: record.state(),
            stored_fingerprint: record.fingerprint,
        });
    }
    match &record.status {
        Status::Pending { lease_until } if now < *lease_until => answer(Decision::InProgress {
            generation: record.generation,
            lease_until: *lease_until,
        }),
        Status::Pending { .. } => match config.on_lease_expiry {
            LeaseExpiry::Takeover => claim(),
            LeaseExpiry::Unknown => Transition {
                decision: Decision::NeedsReconciliation {
                    generation: record.generation,
                },
                write: Write::Put(Record {
                    updated_at: now,
                    status: Status::Unknown,
                    ..record.clone()
                }),
            },
        },
        Status::Settled {
            verdict,
            outcome,
            completed_at,
            ..
        } => answer(Decision::Replay {
            verdict: *verdict,
            outcome: outcome.clone(),
            completed_at: *completed_at,
        }),
        Status::Unknown => answer(Decision::NeedsReconciliation {
            generation: record.generation,
        }),
        Status::Tombstone {
            verdict,
            completed_at,
            ..
        } => answer(Decision::Forgotten {
            generation: record.generation,
            verdict: *verdict,
            completed_at: *completed_at,
        }),
    }
}

/// The executor holding `generation` extends its lease to `now + lease`. Returns the
/// record to put under the key.
///
/// # Errors
///
/// [`Refusal::NotFound`] or [`Refusal::Stale`].
pub fn heartbeat(
    current: Option<&Record>,
    generation: Generation,
    now: Timestamp,
    config: &Config,
) -> Result<Record, Refusal> {
    let record = held(current, generation)?;
    let lease_until = now.plus_millis(config.lease_ms);
    Ok(Record {
        updated_at: now,
        status: Status::Pending { lease_until },
        ..record.clone()
    })
}

/// The executor holding `generation` settles the key with `verdict` and `outcome`; it is
/// replayed until `now` plus the verdict's retention. Returns the settled record to put
/// under the key.
///
/// # Errors
///
/// [`Refusal::NotFound`], [`Refusal::Stale`] or [`Refusal::OutcomeTooLarge`].
pub fn complete(
    current: Option<&Record>,
    generation: Generation,
    verdict: Verdict,
    outcome: Outcome,
    now: Timestamp,
    config: &Config,
) -> Result<Record, Refusal> {
    let record = held(current, generation)?;
    settle(record, verdict, outcome, now, config)
}

/// The executor holding `generation` did nothing: delete the record so a retry may claim.
///
/// # Errors
///
/// [`Refusal::NotFound`] or [`Refusal::Stale`].
pub fn release(current: Option<&Record>, generation: Generation) -> Result<Delete, Refusal> {
    held(current, generation)?;
    Ok(Delete)
}

/// The executor holding `generation` cannot tell whether its effect happened. Returns
/// the Unknown record to put under the key.
///
/// # Errors
///
/// [`Refusal::NotFound`] or [`Refusal::Stale`].
pub fn mark_unknown(
    current: Option<&Record>,
    generation: Generation,
    now: Timestamp,
) -> Result<Record, Refusal> {
    let record = held(current, generation)?;
    Ok(Record {
        updated_at: now,
        status: Status::Unknown,
        ..record.clone()
    })
}

/// A reconciler settles an Unknown record. Returns the settled record to put under the
/// key, or `None` for [`Resolution::NotExecuted`]: delete the record.
///
/// # Errors
///
/// [`Refusal::NotFound`], [`Refusal::WrongState`] when the record is not Unknown, or
/// [`Refusal::OutcomeTooLarge`].
pub fn resolve(
    current: Option<&Record>,
    resolution: Resolution,
    now: Timestamp,
    config: &Config,
) -> Result<Option<Record>, Refusal> {
    let record = current.ok_or(Refusal::NotFound)?;
    if record.status != Status::Unknown {
        return Err(Refusal::WrongState {
            state: record.state(),
            expected: State::Unknown,
        });
    }
    match resolution {
        Resolution::Succeeded(outcome) => {
            settle(record, Verdict::Succeeded, outcome, now, config).map(Some)
        }
        Resolution::Failed(outcome) => {
            settle(record, Verdict::Failed, outcome, now, config).map(Some)
        }
        Resolution::NotExecuted => Ok(None),
    }
}

/// True when sweep may delete `record` at `now` (or replace it by its tombstone):
/// settled, or a tombstone, past its retention. Pending and Unknown records are never
/// swept.
#[must_use]
pub fn sweepable(record: &Record, now: Timestamp) -> bool {
    record.is_expired(now)
}

/// What [`sweep`] does to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a sweep's write must be applied"]
pub enum Swept {
    /// Not past its retention: leave it.
    Keep,
    /// Put this tombstone in place of the settled record.
    Tombstone(Record),
    /// Remove the record.
    Delete,
}

/// Sweep meets `record` at `now`: a settled record past its retention leaves its
/// tombstone (kept `tombstone_retention_ms` more; 0 keeps none), a tombstone past its
/// own time is deleted, anything else stays.
pub fn sweep(record: &Record, now: Timestamp, config: &Config) -> Swept {
    if !sweepable(record, now) {
        return Swept::Keep;
    }
    match record.tombstone(config.tombstone_retention_ms) {
        Some(tombstone) if !tombstone.is_expired(now) => Swept::Tombstone(tombstone),
        _ => Swept::Delete,
    }
}

fn held(current: Option<&Record>, generation: Generation) -> Result<&Record, Refusal> {
    let record = current.ok_or(Refusal::NotFound)?;
    match record.status {
        Status::Pending { .. } if record.generation == generation => Ok(record),
        _ => Err(Refusal::Stale {
            given: generation,
            current: record.generation,
            state: record.state(),
        }),
    }
}

fn settle(
    record: &Record,
    verdict: Verdict,
    outcome: Outcome,
    now: Timestamp,
    config: &Config,
) -> Result<Record, Refusal> {
    outcome
        .check_size(config.max_outcome_bytes)
        .map_err(Refusal::OutcomeTooLarge)?;
    let retention = match verdict {
        Verdict::Succeeded => config.success_retention_ms,
        Verdict::Failed => config.failure_retention_ms,
    };
    Ok(Record {
        updated_at: now,
        status: Status::Settled {
            verdict,
            outcome,
            completed_at: now,
            expires_at: now.plus_millis(retention),
        },
        ..record.clone()
    })
}

#[cfg(test)]
mod tests;
