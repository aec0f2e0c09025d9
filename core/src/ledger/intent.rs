//! One intent and its transitions: pure functions a durable store applies row by row.
//!
//! Every function here changes one [`Intent`] in place and says what happened. A store
//! reads the intent's row, calls one function, writes the row back when the result says
//! it changed, and commits before acting on the result (sending an [`Attempt`]).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use super::{BackoffRng, LedgerConfig, LedgerError, key};
use crate::encoding::{self, DecodeError};
use crate::id::{self, Field};
use crate::{Fingerprint, IdError, Outcome, Timestamp};

/// Where an intent is in its life.
///
/// The variant order is part of the persisted format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum IntentState {
    /// Waiting for its next attempt at `next_attempt_at`.
    Queued,
    /// Sent; waiting for a reply or a transport error.
    InFlight,
    /// The receiver answered 2xx. Terminal.
    Completed,
    /// The receiver answered with a definitive failure (3xx, most 4xx). Terminal.
    Failed,
    /// The receiver saw this key with another payload (422): a bug, surfaced. Terminal.
    Conflict,
    /// No definitive answer before the deadline: never sent again. Terminal, but not
    /// settled until [`Intent::resolve`] records what happened (its `resolution`).
    Expired,
    /// The receiver does not know the outcome under this key either: it claimed the key,
    /// its handler may have acted, and nobody has settled the key yet (idem's 503 problem
    /// `unknown`, see [`ReplyClass::of_reply`]). Never sent again: a person must look.
    /// The reply is its outcome; terminal, but not settled until [`Intent::resolve`]
    /// records what they found. Format version 3 added it.
    Unknown,
}

impl IntentState {
    /// Every state, in a fixed order.
    pub const ALL: [IntentState; 7] = [
        IntentState::Queued,
        IntentState::InFlight,
        IntentState::Completed,
        IntentState::Failed,
        IntentState::Conflict,
        IntentState::Expired,
        IntentState::Unknown,
    ];

    /// Lower-case name: `queued`, `in_flight`, `completed`, `failed`, `conflict`,
    /// `expired`, `unknown`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            IntentState::Queued => "queued",
            IntentState::InFlight => "in_flight",
            IntentState::Completed => "completed",
            IntentState::Failed => "failed",
            IntentState::Conflict => "conflict",
            IntentState::Expired => "expired",
            IntentState::Unknown => "unknown",
        }
    }

    /// Parses a name as given by [`IntentState::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<IntentState> {
        IntentState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// True for the states no reply changes any more: completed, failed, conflict,
    /// expired, unknown. An expired or unknown intent still awaits its resolution: see
    /// [`Intent::is_settled`].
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        !matches!(self, IntentState::Queued | IntentState::InFlight)
    }

    /// True for the states whose effect may or may not have happened, which a person
    /// resolves ([`Intent::resolve`]): expired, unknown.
    #[must_use]
    pub const fn is_unsettled_end(self) -> bool {
        matches!(self, IntentState::Expired | IntentState::Unknown)
    }
}

impl fmt::Display for IntentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an operator or a checker found about an expired or unknown intent: did its
/// effect happen?
///
/// The variant order is part of the persisted format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResolvedAs {
    /// The receiver executed it (found in its records, on a statement).
    Completed,
    /// The receiver refused it for good.
    Failed,
    /// The receiver never executed it: the user may start it again, as a new intent.
    NotExecuted,
}

impl ResolvedAs {
    /// Every resolution, in a fixed order.
    pub const ALL: [ResolvedAs; 3] = [
        ResolvedAs::Completed,
        ResolvedAs::Failed,
        ResolvedAs::NotExecuted,
    ];

    /// Lower-case name: `completed`, `failed`, `not_executed`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ResolvedAs::Completed => "completed",
            ResolvedAs::Failed => "failed",
            ResolvedAs::NotExecuted => "not_executed",
        }
    }

    /// Parses a name as given by [`ResolvedAs::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<ResolvedAs> {
        ResolvedAs::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for ResolvedAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The resolution of an expired or unknown intent, recorded by [`Intent::resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentResolution {
    /// What happened to the effect.
    pub resolved_as: ResolvedAs,
    /// Why the operator or checker says so (1–[`MAX_REASON_LEN`] bytes, not blank, no
    /// control characters).
    pub reason: String,
    /// When it was resolved.
    pub resolved_at: Timestamp,
}

/// The longest resolution reason, in bytes of UTF-8.
pub const MAX_REASON_LEN: usize = 1024;

/// One business action the user asked for, with the key every send of it carries.
///
/// Its serde form is that of format version 1, without `resolution`; the persisted forms
/// ([`Intent::encode`], [`super::Ledger::snapshot`]) carry the resolution after it, so
/// that one reader serves both versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The idempotency key: a UUIDv7 made once, at [`Intent::new`].
    pub key: String,
    /// What kind of action (1–255 bytes of UTF-8 without control characters).
    pub operation: String,
    /// The bytes every attempt sends, unchanged.
    pub payload: Vec<u8>,
    /// Fingerprint of the business input, as the receiver will compute it.
    pub fingerprint: Fingerprint,
    /// Where the intent is.
    pub state: IntentState,
    /// Sends so far, including one whose reply is outstanding. Only ever grows.
    pub attempts: u32,
    /// When the user started the intent.
    pub created_at: Timestamp,
    /// When a queued intent is due; never later than `deadline` while the guard is on.
    pub next_attempt_at: Timestamp,
    /// Sends happen only strictly before this time: `created_at + server_retention −
    /// safety_margin`.
    pub deadline: Timestamp,
    /// Status of the most recent reply taken into account; `None` before any reply and
    /// after a transport error.
    pub last_status: Option<u16>,
    /// The definitive reply (status code and body) of a completed, failed, conflict or
    /// unknown intent (and of one expired by a 410); `None` otherwise.
    pub outcome: Option<Outcome>,
    /// What an expired or unknown intent was resolved as; `None` for every other state
    /// and for one nobody resolved yet. Not in the serde form (see above).
    #[serde(skip)]
    pub resolution: Option<IntentResolution>,
}

/// The format version [`Intent::encode`] writes: 2 added `resolution`, 3 the state
/// [`IntentState::Unknown`] (the layout of 2, one more variant).
pub(super) const INTENT_VERSION: u8 = 3;
// The decoders read version 1 as version 2 without its last field
// (`encoding::body_with_last_field`), and refuse Unknown in bytes older than 3; a version
// 4 needs its own reader.
const _: () = assert!(INTENT_VERSION == 3);

/// True when bytes of format `version` may hold `state`: Unknown came with version 3.
pub(super) fn state_in_version(state: IntentState, version: u8) -> bool {
    version >= 3 || state != IntentState::Unknown
}

/// One send to perform: put `key` in the `Idempotency-Key` header and send `payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The intent's key.
    pub key: String,
    /// The intent's operation.
    pub operation: String,
    /// The intent's payload, the same bytes on every attempt.
    pub payload: Vec<u8>,
    /// Which send this is, from 1.
    pub attempt: u32,
}

/// What the receiver answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    /// The HTTP status code.
    pub status: u16,
    /// The response body.
    pub body: Vec<u8>,
    /// When the receiver asks for the next attempt: the lease end of a 409, or a
    /// `Retry-After` of a 429 or 503 (not one that says the outcome is unknown: that
    /// intent is not sent again). Honoured for every retryable reply, capped by the
    /// deadline; `None` falls back to the backoff.
    pub retry_at: Option<Timestamp>,
}

pub use crate::http::ReplyClass;

/// What [`Intent::poll`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a polled intent is in flight: send the attempt, or it waits for a restart"]
pub enum Poll {
    /// Now in flight: send this (after persisting the intent).
    Send(Attempt),
    /// The deadline passed before the intent could be sent again; now Expired.
    Expired,
    /// Nothing to do: not yet due, in flight, or terminal. The intent is unchanged.
    Idle,
}

/// What a reply or a transport error did to an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The intent reached this terminal state.
    Finished(IntentState),
    /// The intent is queued again, due at `at`.
    Requeued {
        /// Its new `next_attempt_at`.
        at: Timestamp,
    },
    /// The input did not apply and the intent is unchanged: it was terminal already, or
    /// queued and the input was not a definitive reply (a late or duplicated one).
    Ignored,
}

impl Intent {
    /// A new intent, queued and due at once, with a fresh UUIDv7 key from `now` and
    /// `random`. This is the only place a key is made: retries reuse it.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Operation`] when `operation` breaks its rule.
    pub fn new(
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: [u8; 16],
        config: &LedgerConfig,
    ) -> Result<Intent, LedgerError> {
        check_operation(operation).map_err(LedgerError::Operation)?;
        Ok(Intent {
            key: key::uuid_v7(now, random),
            operation: operation.into(),
            payload,
            fingerprint,
            state: IntentState::Queued,
            attempts: 0,
            created_at: now,
            next_attempt_at: now,
            deadline: config.deadline(now),
            last_status: None,
            outcome: None,
            resolution: None,
        })
    }

    /// Call for a queued intent when `now` reaches [`Intent::wakeup`]. At or past the
    /// deadline it becomes Expired; otherwise, once due, it goes in flight and the
    /// attempt count grows by one.
    pub fn poll(&mut self, now: Timestamp, config: &LedgerConfig) -> Poll {
        if self.state != IntentState::Queued {
            return Poll::Idle;
        }
        if config.guarded() && now >= self.deadline {
            self.state = IntentState::Expired;
            return Poll::Expired;
        }
        if now < self.next_attempt_at {
            return Poll::Idle;
        }
        self.state = IntentState::InFlight;
        self.attempts = self.attempts.saturating_add(1);
        Poll::Send(Attempt {
            key: self.key.clone(),
            operation: self.operation.clone(),
            payload: self.payload.clone(),
            attempt: self.attempts,
        })
    }

    /// Takes the receiver's `reply` into account.
    ///
    /// In flight: a definitive reply settles the intent (keeping status and body as its
    /// outcome), a receiver's "outcome unknown" among them ([`ReplyClass::of_reply`]); 409 and retryable replies queue it again, at `reply.retry_at` when given
    /// or after a backoff, never past the deadline (at or past it, the intent expires).
    /// Queued after a transport error or a restart: a definitive reply is a late answer
    /// to an earlier attempt and settles it; any other reply is ignored. Terminal, or
    /// never sent: ignored. A terminal intent never changes.
    pub fn on_reply(
        &mut self,
        reply: Reply,
        now: Timestamp,
        config: &LedgerConfig,
        rng: &mut BackoffRng,
    ) -> Effect {
        let class = ReplyClass::of_reply(reply.status, &reply.body);
        let settles_as = class.settles_as();
        let applies = match self.state {
            IntentState::InFlight => true,
            IntentState::Queued => settles_as.is_some() && self.attempts > 0,
            _ => false,
        };
        if !applies {
            return Effect::Ignored;
        }
        self.last_status = Some(reply.status);
        match settles_as {
            Some(state) => {
                self.state = state;
                self.outcome = Some(Outcome::new(i32::from(reply.status), reply.body));
                Effect::Finished(state)
            }
            None => self.requeue(reply.retry_at, now, config, rng),
        }
    }

    /// The attempt in flight failed before any reply (connection lost, timeout): queue
    /// it again after a backoff, never past the deadline. Ignored unless in flight.
    pub fn on_transport_error(
        &mut self,
        now: Timestamp,
        config: &LedgerConfig,
        rng: &mut BackoffRng,
    ) -> Effect {
        if self.state != IntentState::InFlight {
            return Effect::Ignored;
        }
        self.last_status = None;
        self.requeue(None, now, config, rng)
    }

    /// After a crash or reload: an in-flight intent is queued again with the same key
    /// and its `next_attempt_at` unchanged (so it is due at once; the receiver's dedup
    /// makes the resend safe). Returns whether the intent changed.
    pub fn restart(&mut self) -> bool {
        let in_flight = self.state == IntentState::InFlight;
        if in_flight {
            self.state = IntentState::Queued;
        }
        in_flight
    }

    /// When [`Intent::poll`] has something to do: the earlier of `next_attempt_at` and
    /// the deadline for a queued intent; `None` otherwise (an in-flight intent waits
    /// for the network, a terminal one for nothing).
    #[must_use]
    pub fn wakeup(&self, config: &LedgerConfig) -> Option<Timestamp> {
        (self.state == IntentState::Queued).then(|| {
            if config.guarded() {
                self.next_attempt_at.min(self.deadline)
            } else {
                self.next_attempt_at
            }
        })
    }

    /// Records what happened to an expired or unknown intent, as an operator or a checker
    /// found out (asking the receiver, reading a statement), with the reason they give.
    /// Only then is it settled: [`super::Ledger::forget`] and retention may remove it.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Reason`] for a reason that breaks its rule,
    /// [`LedgerError::NotExpired`] when the intent is neither expired nor unknown, or
    /// already resolved. The intent is unchanged.
    pub fn resolve(
        &mut self,
        resolved_as: ResolvedAs,
        reason: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        if !self.state.is_unsettled_end() || self.resolution.is_some() {
            return Err(LedgerError::NotExpired {
                key: self.key.clone(),
                state: self.state,
                resolved: self.resolution.as_ref().map(|r| r.resolved_as),
            });
        }
        check_reason(reason)?;
        self.resolution = Some(IntentResolution {
            resolved_as,
            reason: reason.into(),
            resolved_at: now,
        });
        Ok(())
    }

    /// True when nothing is left to learn about this intent: completed, failed,
    /// conflict, or expired or unknown and resolved. Only a settled intent may be forgotten.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        self.state.is_terminal() && !self.needs_resolution()
    }

    /// Whether this intent may be forgotten (removed by the application or by a
    /// retention): only a settled one may ([`Intent::is_settled`]).
    ///
    /// # Errors
    ///
    /// [`LedgerError::NotTerminal`] for a queued or in-flight intent,
    /// [`LedgerError::Unresolved`] for an expired or unknown one nobody resolved.
    pub fn check_forget(&self) -> Result<(), LedgerError> {
        if !self.state.is_terminal() {
            return Err(LedgerError::NotTerminal {
                key: self.key.clone(),
                state: self.state,
            });
        }
        if self.needs_resolution() {
            return Err(LedgerError::Unresolved {
                key: self.key.clone(),
            });
        }
        Ok(())
    }

    /// True for an expired or unknown intent nobody resolved yet: its effect may or may
    /// not have happened.
    #[must_use]
    pub fn needs_resolution(&self) -> bool {
        self.state.is_unsettled_end() && self.resolution.is_none()
    }

    /// The persisted bytes of this intent: a version byte (3), then postcard of the
    /// intent's serde form and its resolution.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encoding::encode_as(INTENT_VERSION, &(self, &self.resolution))
    }

    /// Decodes bytes made by [`Intent::encode`] and checks the operation and key rules,
    /// so a damaged file cannot smuggle in an invalid intent.
    ///
    /// Version 1 (before resolutions) is read as an intent without one; version 2 as it
    /// is (it cannot hold the state Unknown).
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format, malformed or invalid bytes, and for
    /// bytes older than version 3 that hold the state Unknown.
    pub fn decode(bytes: &[u8]) -> Result<Intent, DecodeError> {
        const WHAT: &str = "intent";
        // Version 1 is version 2 without its last field, the resolution.
        let (version, body) = encoding::body_with_last_field(bytes, INTENT_VERSION)?;
        let (mut intent, resolution): (Intent, Option<IntentResolution>) =
            encoding::decode_body(&body, WHAT)?;
        if !state_in_version(intent.state, version) {
            return Err(DecodeError::Malformed { what: WHAT });
        }
        intent.resolution = resolution;
        if intent.check().is_err() {
            return Err(DecodeError::Invalid { what: WHAT });
        }
        Ok(intent)
    }

    /// The rules of a decoded or imported intent: operation and key, and a resolution
    /// only on an expired or unknown intent, with a reason that keeps its rule.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Operation`] for a broken operation or key,
    /// [`LedgerError::NotExpired`] for a resolution on another state,
    /// [`LedgerError::Reason`] for a reason that breaks its rule.
    pub fn check(&self) -> Result<(), LedgerError> {
        check_operation(&self.operation).map_err(LedgerError::Operation)?;
        id::check_key(&self.key).map_err(LedgerError::Operation)?;
        if let Some(resolution) = &self.resolution {
            if !self.state.is_unsettled_end() {
                return Err(LedgerError::NotExpired {
                    key: self.key.clone(),
                    state: self.state,
                    resolved: None,
                });
            }
            check_reason(&resolution.reason)?;
        }
        Ok(())
    }

    fn requeue(
        &mut self,
        retry_at: Option<Timestamp>,
        now: Timestamp,
        config: &LedgerConfig,
        rng: &mut BackoffRng,
    ) -> Effect {
        if config.guarded() && now >= self.deadline {
            self.state = IntentState::Expired;
            return Effect::Finished(IntentState::Expired);
        }
        // A time the receiver asks for that is already here (its clock ahead of ours, a
        // lease that ran out in transit) would send again at once, and again: back off.
        let at = match retry_at {
            Some(at) if at > now => at,
            _ => now.plus_millis(rng.delay(self.attempts, config)),
        };
        let at = if config.guarded() {
            at.min(self.deadline)
        } else {
            at
        };
        self.state = IntentState::Queued;
        self.next_attempt_at = at;
        Effect::Requeued { at }
    }
}

/// The operation rule of [`RecordId`]: 1–255 bytes of UTF-8 without control characters.
pub(crate) fn check_operation(operation: &str) -> Result<(), IdError> {
    id::check_text(Field::Operation, operation)
}

/// The rule of a resolution's reason: 1–[`MAX_REASON_LEN`] bytes of UTF-8, not only
/// white space, no control characters.
fn check_reason(reason: &str) -> Result<(), LedgerError> {
    let problem = if reason.chars().all(char::is_whitespace) {
        "empty, say why (who confirmed it, where)"
    } else if reason.len() > MAX_REASON_LEN {
        "too long, at most 1024 bytes"
    } else if reason.chars().any(char::is_control) {
        "contains a control character (a line break, a tab), keep it to one line"
    } else {
        return Ok(());
    };
    Err(LedgerError::Reason {
        len: reason.len(),
        problem,
    })
}
