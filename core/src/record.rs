//! What the receiver keeps per key: [`Record`], its [`Status`] and the [`Outcome`].

use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::{Fingerprint, Generation, Timestamp};

/// How an execution ended, as far as the caller is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// The effect happened.
    Succeeded,
    /// The request failed definitively; replayed like a success.
    Failed,
}

impl Verdict {
    /// Both verdicts, in a fixed order.
    pub const ALL: [Verdict; 2] = [Verdict::Succeeded, Verdict::Failed];

    /// Lower-case name: `succeeded`, `failed` (the name of the [`State`] it settles in).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Failed => "failed",
        }
    }

    /// Parses a lower-case name as given by [`Verdict::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.name() == name)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The stored answer: a code whose meaning the caller chooses (HTTP status, exit
/// status) and a body.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// The caller's code.
    pub code: i32,
    /// The caller's bytes.
    pub body: Vec<u8>,
}

/// An outcome larger than the configured limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeError {
    /// The body's length in bytes.
    pub len: usize,
    /// The configured limit ([`crate::Config::max_outcome_bytes`]).
    pub max: usize,
}

impl fmt::Display for OutcomeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outcome: {} bytes, at most {}", self.len, self.max)
    }
}

impl core::error::Error for OutcomeError {}

impl Outcome {
    /// An outcome with `code` and `body`.
    #[must_use]
    pub fn new(code: i32, body: impl Into<Vec<u8>>) -> Outcome {
        Outcome {
            code,
            body: body.into(),
        }
    }

    /// Refuses a body over `max` bytes.
    ///
    /// # Errors
    ///
    /// [`OutcomeError`] with the length and the limit.
    pub fn check_size(&self, max: usize) -> Result<(), OutcomeError> {
        if self.body.len() > max {
            Err(OutcomeError {
                len: self.body.len(),
                max,
            })
        } else {
            Ok(())
        }
    }
}

/// The state of a record, with what each state carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Claimed by the executor holding [`Record::generation`]; the lease runs until
    /// `lease_until`.
    Pending {
        /// When the claim counts as abandoned unless renewed.
        lease_until: Timestamp,
    },
    /// Settled: the outcome is replayed to every retry until `expires_at`.
    Settled {
        /// Succeeded or failed.
        verdict: Verdict,
        /// The stored answer.
        outcome: Outcome,
        /// When it settled.
        completed_at: Timestamp,
        /// When the record may be swept and the key claimed again.
        expires_at: Timestamp,
    },
    /// The outcome could not be confirmed; needs reconciliation. Never expires by time.
    Unknown,
    /// What sweep keeps of a settled record past its retention: the request ran with this
    /// verdict, its outcome is no longer kept. A retry with the same fingerprint is
    /// answered Forgotten and does not execute, until `expires_at`.
    Tombstone {
        /// Succeeded or failed, as settled.
        verdict: Verdict,
        /// When it settled.
        completed_at: Timestamp,
        /// When the tombstone may be swept and the key claimed again.
        expires_at: Timestamp,
    },
}

/// The state names of the protocol, without their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum State {
    /// Claimed, lease running or run out.
    Pending,
    /// Settled as succeeded.
    Succeeded,
    /// Settled as failed.
    Failed,
    /// Needs reconciliation.
    Unknown,
    /// Settled long ago; only a tombstone of the record is kept.
    Forgotten,
}

impl State {
    /// Every state, in a fixed order.
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Succeeded,
        State::Failed,
        State::Unknown,
        State::Forgotten,
    ];

    /// Lower-case name: `pending`, `succeeded`, `failed`, `unknown`, `forgotten`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Unknown => "unknown",
            State::Forgotten => "forgotten",
        }
    }

    /// Parses a lower-case name as given by [`State::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the receiver keeps for one `(tenant, operation, key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Fingerprint of the request that claimed the key.
    pub fingerprint: Fingerprint,
    /// The fencing token of the claim that created this record.
    pub generation: Generation,
    /// When this generation claimed the key.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// State and its data.
    pub status: Status,
}

impl Record {
    /// The state's name.
    #[must_use]
    pub fn state(&self) -> State {
        match &self.status {
            Status::Pending { .. } => State::Pending,
            Status::Settled {
                verdict: Verdict::Succeeded,
                ..
            } => State::Succeeded,
            Status::Settled {
                verdict: Verdict::Failed,
                ..
            } => State::Failed,
            Status::Unknown => State::Unknown,
            Status::Tombstone { .. } => State::Forgotten,
        }
    }

    /// When a settled record or a tombstone may be swept; `None` for Pending and
    /// Unknown, which time alone never removes.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        match &self.status {
            Status::Settled { expires_at, .. } | Status::Tombstone { expires_at, .. } => {
                Some(*expires_at)
            }
            Status::Pending { .. } | Status::Unknown => None,
        }
    }

    /// The lease end of a pending record.
    #[must_use]
    pub fn lease_until(&self) -> Option<Timestamp> {
        match &self.status {
            Status::Pending { lease_until } => Some(*lease_until),
            Status::Settled { .. } | Status::Unknown | Status::Tombstone { .. } => None,
        }
    }

    /// The tombstone this settled record leaves when its retention ends, kept
    /// `tombstone_retention_ms` past that end; `None` for any other state or when the
    /// retention is 0 (tombstones off). It is the same whenever it is made: its
    /// `updated_at` is the moment the outcome was forgotten, not the time of the sweep.
    #[must_use]
    pub fn tombstone(&self, tombstone_retention_ms: u64) -> Option<Record> {
        match &self.status {
            Status::Settled {
                verdict,
                completed_at,
                expires_at,
                ..
            } if tombstone_retention_ms > 0 => Some(Record {
                fingerprint: self.fingerprint,
                generation: self.generation,
                created_at: self.created_at,
                updated_at: *expires_at,
                status: Status::Tombstone {
                    verdict: *verdict,
                    completed_at: *completed_at,
                    expires_at: expires_at.plus_millis(tombstone_retention_ms),
                },
            }),
            _ => None,
        }
    }

    /// True when the record is settled (or a tombstone) and its retention has ended at
    /// `now`: sweep may delete it (or leave its tombstone).
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| now >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn verdict_names_round_trip_and_match_their_states() {
        let settled = [
            (Verdict::Succeeded, State::Succeeded),
            (Verdict::Failed, State::Failed),
        ];
        for (verdict, state) in settled {
            assert_eq!(verdict.name(), state.name());
            assert_eq!(Verdict::from_name(verdict.name()), Some(verdict));
            assert_eq!(verdict.to_string(), verdict.name());
        }
        assert_eq!(Verdict::ALL.map(Verdict::name), ["succeeded", "failed"]);
        for other in ["pending", "unknown", "Succeeded", "", "failed "] {
            assert_eq!(Verdict::from_name(other), None, "{other:?}");
        }
    }
}
