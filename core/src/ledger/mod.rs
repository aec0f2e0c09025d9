//! The sender ledger: intents, their idempotency keys and their retries.
//!
//! An [`Intent`] is one business action the user asked for. It gets one key (a UUIDv7
//! from injected time and random bytes) when it is started, and every retry sends that
//! key with the same payload, so the receiver executes it once. This module never reads a
//! clock and never asks the OS for randomness: `now`, the 16 random bytes of a key and
//! the backoff seed are arguments.
//!
//! Two ways to drive it:
//! - [`Intent`]'s methods are pure transitions of one intent, for a durable store that
//!   keeps intents in rows and its own [`BackoffRng`].
//! - [`Ledger`] is an in-memory collection of intents (what the browser bindings use),
//!   persisted whole with [`Ledger::snapshot`], or one record per intent
//!   ([`Intent::encode`]) beside [`Ledger::state_snapshot`], read back by
//!   [`Ledger::restore_parts`].
//!
//! | state | input | result |
//! |---|---|---|
//! | — | [`Ledger::begin`] | Queued, due now, new key |
//! | Queued | [`Ledger::due`], now ≥ deadline | Expired |
//! | Queued | [`Ledger::due`], now ≥ `next_attempt_at` | InFlight, attempts + 1, an [`Attempt`] to send |
//! | InFlight | reply 2xx / 422 / 3xx or other 4xx | Completed / Conflict / Failed, with the reply as outcome |
//! | InFlight | reply 410 (the receiver ran it but keeps only a tombstone) | Expired, with the reply as outcome: reconcile |
//! | InFlight | reply 503 with idem's problem `unknown` (the receiver does not know the outcome) | Unknown, with the reply as outcome: a person must look |
//! | InFlight | reply 409, 408, 425, 429, 5xx, non-final status; transport error | Queued at `retry_at` or after backoff, capped by the deadline; Expired if now ≥ deadline |
//! | Queued (sent before) | definitive reply (late) | as from InFlight |
//! | Queued | any other reply; transport error | ignored |
//! | InFlight | [`Ledger::restart`], [`Ledger::restore`] | Queued, same key, due at once |
//! | Expired or Unknown, unresolved | [`Ledger::resolve`] (completed, failed or not executed, a reason) | the same state with its `resolution` |
//! | Expired or Unknown, unresolved | [`Ledger::forget`] | refused ([`LedgerError::Unresolved`]): resolve it first |
//! | Completed, Failed, Conflict; Expired or Unknown resolved | [`Ledger::forget`] | removed |
//! | terminal | anything else | ignored |
//! | absent, Queued or InFlight | [`Ledger::put`] (a copy persisted elsewhere) | the copy |
//!
//! **Expired.** An expired intent had no definitive answer before its deadline: the
//! receiver may or may not have executed it, and only someone who asks the receiver (an
//! operator, a checker reading its records) can tell. It stays Expired and carries the
//! answer as its `resolution` ([`IntentResolution`]: completed, failed or not executed,
//! a reason, when), so the state still says how the intent ended and the resolution says
//! what was learned after. Until resolved it cannot be forgotten; a sender that shows or
//! cleans up intents asks [`Intent::needs_resolution`].
//!
//! **Unknown.** The receiver itself does not know whether the intent took effect: it
//! claimed the key and its handler may have acted (it crashed, timed out or failed
//! mid-way), and nobody has settled the key since. idem's receivers answer such a key
//! with 503 and the problem `unknown` until an operator reconciles it, so resending
//! tells nothing new: the intent stops, keeps that answer as its outcome, and waits
//! like an expired one for someone to look and record a `resolution`. Its key and
//! operation, with the receiver's problem, are what that person needs.
//!
//! **Deadline.** `deadline = created_at + server_retention − safety_margin`. An intent is
//! sent only while `now < deadline`: after it the receiver may have forgotten the key and
//! would execute a resend as new. An in-flight intent has no timeout here (the driver
//! owns the request timeout and reports it as a transport error); at its next scheduling
//! at or past the deadline it expires.
//!
//! **Backoff.** After attempt n (n ≥ 1) with no definitive answer, the next attempt waits
//! uniform in `[0, min(max_backoff, base_backoff · 2^(n−1))]` (full jitter), drawn from the
//! seeded [`BackoffRng`], and never past the deadline.

mod backoff;
mod config;
mod intent;
mod key;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_format;
#[cfg(test)]
mod tests_prop;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

pub use backoff::{BackoffRng, backoff_cap};
pub use config::{LedgerConfig, LedgerConfigError};
pub use intent::{
    Attempt, Effect, Intent, IntentResolution, IntentState, MAX_REASON_LEN, Poll, Reply,
    ReplyClass, ResolvedAs,
};
pub use key::{KEY_LEN, uuid_v7};

use crate::encoding::{self, DecodeError};
use crate::{Fingerprint, IdError, Timestamp};
use config::StoredConfig;
use intent::INTENT_VERSION;

/// An input the ledger refuses; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerError {
    /// The operation breaks its rule (1–255 bytes of UTF-8, no control characters).
    Operation(IdError),
    /// No intent has this key (never begun, or forgotten).
    UnknownKey {
        /// The key given.
        key: String,
    },
    /// The new key is already taken: the same random bytes were given twice in one ms.
    DuplicateKey {
        /// The key made.
        key: String,
    },
    /// Only a terminal intent may be forgotten: a live one still owns its key.
    NotTerminal {
        /// The key given.
        key: String,
        /// The intent's state.
        state: IntentState,
    },
    /// An expired or unknown intent nobody resolved cannot be forgotten: its effect may or
    /// may not have happened, and dropping it would lose that question.
    Unresolved {
        /// The key given.
        key: String,
    },
    /// Only an expired or unknown intent not yet resolved can be resolved.
    NotExpired {
        /// The key given.
        key: String,
        /// The intent's state.
        state: IntentState,
        /// What it was resolved as already, for an expired or unknown one.
        resolved: Option<ResolvedAs>,
    },
    /// The reason of a resolution breaks its rule (1–[`MAX_REASON_LEN`] bytes, not
    /// blank, one line).
    Reason {
        /// Its length in bytes.
        len: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::Operation(e) => fmt::Display::fmt(e, f),
            LedgerError::UnknownKey { key } => write!(f, "key {key}: no intent with this key"),
            LedgerError::DuplicateKey { key } => write!(
                f,
                "key {key}: already names an intent, every begin needs 16 fresh random bytes"
            ),
            LedgerError::NotTerminal { key, state } => write!(
                f,
                "key {key}: intent is {state}, only completed, failed, conflict or resolved expired or unknown intents may be forgotten"
            ),
            LedgerError::Unresolved { key } => write!(
                f,
                "key {key}: intent has no definitive answer (expired, or unknown at the receiver), its effect may or may not have happened; resolve it first (as completed, failed or not executed, with a reason)"
            ),
            LedgerError::NotExpired {
                key,
                resolved: Some(resolved),
                ..
            } => write!(
                f,
                "key {key}: intent is resolved already (as {resolved}), a resolution is final"
            ),
            LedgerError::NotExpired { key, state, .. } => write!(
                f,
                "key {key}: intent is {state}, only an expired or unknown intent is resolved (the others get their answer from the receiver)"
            ),
            LedgerError::Reason { len, problem } => write!(f, "reason: {len} bytes, {problem}"),
        }
    }
}

impl core::error::Error for LedgerError {}

/// The intents of one sender, in memory, by key.
///
/// UUIDv7 keys sort by creation time, so iteration and [`Ledger::due`] go oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    config: LedgerConfig,
    rng: BackoffRng,
    /// Sorted by key, no key twice. A sorted `Vec` rather than a `BTreeMap`: a ledger
    /// holds a handful of intents, new keys (UUIDv7) land at the end, and the map's code
    /// costs the npm package's wasm ~20 KB.
    intents: Vec<Intent>,
}

/// What [`Ledger::poll`] did: the attempts to send and the intents that expired.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use = "the attempts are in flight: send every one"]
pub struct Polled {
    /// Intents now in flight, oldest first: send every one.
    pub attempts: Vec<Attempt>,
    /// Keys of the intents that reached their deadline while queued and are now Expired.
    pub expired: Vec<String>,
}

/// The persisted form of a [`Ledger`], written by [`Ledger::snapshot`]. Version 2 added
/// `resolutions` (intents' serde form leaves them out), by key.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    config: StoredConfig,
    rng: BackoffRng,
    intents: Vec<&'a Intent>,
    resolutions: Vec<(&'a str, &'a IntentResolution)>,
}

/// What [`Ledger::restore`] reads; the same fields as [`SnapshotRef`].
#[derive(Deserialize)]
struct Snapshot {
    config: StoredConfig,
    rng: BackoffRng,
    intents: Vec<Intent>,
    resolutions: Vec<(String, IntentResolution)>,
}

impl Ledger {
    /// An empty ledger; the backoff jitter starts from `config.seed`.
    ///
    /// # Errors
    ///
    /// [`LedgerConfigError`] for settings that cannot work.
    pub fn new(config: LedgerConfig) -> Result<Ledger, LedgerConfigError> {
        config.validate()?;
        Ok(Ledger {
            rng: BackoffRng::new(config.seed),
            config,
            intents: Vec::new(),
        })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// Starts a new intent: a fresh key from `now` and `random` (16 bytes from the
    /// platform's secure random source), queued and due at once. Call once per user
    /// action, never for a retry.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Operation`] for an invalid operation, [`LedgerError::DuplicateKey`]
    /// when `random` was reused within the same millisecond.
    pub fn begin(
        &mut self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: [u8; 16],
    ) -> Result<&Intent, LedgerError> {
        let intent = Intent::new(operation, payload, fingerprint, now, random, &self.config)?;
        match position(&self.intents, &intent.key) {
            Ok(_) => Err(LedgerError::DuplicateKey { key: intent.key }),
            Err(at) => {
                self.intents.insert(at, intent);
                Ok(&self.intents[at])
            }
        }
    }

    /// Call when `now` reaches [`Ledger::next_wakeup`] (or at any time). Expires the
    /// queued intents at or past their deadline, and puts the due ones in flight,
    /// returning what to send, oldest first. Sending before or after persisting is
    /// equally safe: a restored ledger queues in-flight intents again and the receiver
    /// answers the resend from its record.
    #[must_use = "the intents are now in flight: send every attempt"]
    pub fn due(&mut self, now: Timestamp) -> Vec<Attempt> {
        self.poll(now).attempts
    }

    /// [`Ledger::due`], also naming the intents that expired: for a store that writes
    /// only the intents that changed.
    pub fn poll(&mut self, now: Timestamp) -> Polled {
        let config = &self.config;
        let mut polled = Polled::default();
        for intent in &mut self.intents {
            match intent.poll(now, config) {
                Poll::Send(attempt) => polled.attempts.push(attempt),
                Poll::Expired => polled.expired.push(intent.key.clone()),
                Poll::Idle => {}
            }
        }
        polled
    }

    /// Takes the receiver's reply for `key` into account; see [`Intent::on_reply`].
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`] when no intent has `key`. A reply for a terminal
    /// intent is not an error: it is [`Effect::Ignored`].
    pub fn on_reply(
        &mut self,
        key: &str,
        reply: Reply,
        now: Timestamp,
    ) -> Result<Effect, LedgerError> {
        let intent = find(&mut self.intents, key)?;
        Ok(intent.on_reply(reply, now, &self.config, &mut self.rng))
    }

    /// The attempt in flight for `key` failed before any reply; see
    /// [`Intent::on_transport_error`].
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`] when no intent has `key`.
    pub fn on_transport_error(&mut self, key: &str, now: Timestamp) -> Result<Effect, LedgerError> {
        let intent = find(&mut self.intents, key)?;
        Ok(intent.on_transport_error(now, &self.config, &mut self.rng))
    }

    /// After a crash or reload: every in-flight intent is queued again with the same key,
    /// due at once. [`Ledger::restore`] does this itself.
    pub fn restart(&mut self) {
        for intent in &mut self.intents {
            intent.restart();
        }
    }

    /// The earliest time [`Ledger::due`] has something to do (a queued intent falls due
    /// or reaches its deadline); `None` when nothing is queued. It may be in the past:
    /// call `due` at once.
    #[must_use]
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        self.intents
            .iter()
            .filter_map(|intent| intent.wakeup(&self.config))
            .min()
    }

    /// The intent with `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Intent> {
        let at = position(&self.intents, key).ok()?;
        self.intents.get(at)
    }

    /// Every intent, by key (oldest first).
    pub fn iter(&self) -> impl Iterator<Item = &Intent> {
        self.intents.iter()
    }

    /// How many intents the ledger holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.intents.len()
    }

    /// True when the ledger holds no intent.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.intents.is_empty()
    }

    /// Removes a settled intent (after the application took its outcome) and returns it.
    /// Queued and in-flight intents cannot be forgotten: their key may have reached the
    /// receiver, and the same action started again would get a new key and run twice. An
    /// expired intent must be resolved first ([`Ledger::resolve`]): its effect may or
    /// may not have happened.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`], [`LedgerError::NotTerminal`] or
    /// [`LedgerError::Unresolved`].
    pub fn forget(&mut self, key: &str) -> Result<Intent, LedgerError> {
        let at = position(&self.intents, key)
            .map_err(|_| LedgerError::UnknownKey { key: key.into() })?;
        self.intents[at].check_forget()?;
        Ok(self.intents.remove(at))
    }

    /// Records what happened to the expired or unknown intent `key`; see
    /// [`Intent::resolve`].
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`], [`LedgerError::NotExpired`] or
    /// [`LedgerError::Reason`]; nothing changed.
    pub fn resolve(
        &mut self,
        key: &str,
        resolved_as: ResolvedAs,
        reason: &str,
        now: Timestamp,
    ) -> Result<&Intent, LedgerError> {
        let intent = find(&mut self.intents, key)?;
        intent.resolve(resolved_as, reason, now)?;
        Ok(intent)
    }

    /// Takes in an intent changed or begun by another copy of this ledger (another
    /// browser tab, a service worker) and already persisted there: inserts it, or
    /// replaces the intent with its key, unless that one is terminal (a terminal intent
    /// never changes, so a late copy of an earlier state cannot bring it back), the one
    /// exception being the resolution of an expired or unknown intent. Returns whether
    /// the ledger changed.
    pub fn put(&mut self, intent: Intent) -> bool {
        match position(&self.intents, &intent.key) {
            Ok(at) => {
                let held = &mut self.intents[at];
                let resolves = held.needs_resolution()
                    && intent.state == held.state
                    && intent.resolution.is_some();
                if (held.state.is_terminal() && !resolves) || *held == intent {
                    return false;
                }
                *held = intent;
            }
            Err(at) => self.intents.insert(at, intent),
        }
        true
    }

    /// The whole ledger as bytes (version byte, then postcard): settings, backoff state
    /// and intents by key. Persist after every change; [`Ledger::restore`] reads it.
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        encoding::encode_as(
            INTENT_VERSION,
            &SnapshotRef {
                config: StoredConfig::from(&self.config),
                rng: self.rng,
                intents: self.intents.iter().collect(),
                resolutions: self
                    .intents
                    .iter()
                    .filter_map(|i| Some((i.key.as_str(), i.resolution.as_ref()?)))
                    .collect(),
            },
        )
    }

    /// The settings and the backoff state without the intents: a snapshot that holds no
    /// intent (the format of [`Ledger::snapshot`]), for a store that keeps each intent in
    /// a record of its own ([`Intent::encode`]). Write it again whenever it changes: a
    /// reply or a transport error that backs off draws from the jitter state.
    #[must_use]
    pub fn state_snapshot(&self) -> Vec<u8> {
        encoding::encode_as(
            INTENT_VERSION,
            &SnapshotRef {
                config: StoredConfig::from(&self.config),
                rng: self.rng,
                intents: Vec::new(),
                resolutions: Vec::new(),
            },
        )
    }

    /// The ledger kept as [`Ledger::state_snapshot`] and one record per intent, with
    /// restart applied: in-flight intents are queued again with the same key. `state`
    /// may be a whole [`Ledger::snapshot`] (the single-record form): its intents join
    /// `intents`.
    ///
    /// # Errors
    ///
    /// What [`Ledger::restore`] refuses in `state`, and [`DecodeError::Invalid`] when an
    /// intent breaks the operation or key rule or two intents share a key.
    pub fn restore_parts(
        state: &[u8],
        intents: impl IntoIterator<Item = Intent>,
    ) -> Result<Ledger, DecodeError> {
        let invalid = DecodeError::Invalid {
            what: "ledger intents",
        };
        let mut ledger = Ledger::restore(state)?;
        for mut intent in intents {
            intent.check().map_err(|_| invalid.clone())?;
            let Err(at) = position(&ledger.intents, &intent.key) else {
                return Err(invalid);
            };
            intent.restart();
            ledger.intents.insert(at, intent);
        }
        Ok(ledger)
    }

    /// The ledger [`Ledger::snapshot`] wrote, with restart applied: in-flight intents are
    /// queued again with the same key.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format or malformed bytes, and
    /// [`DecodeError::Invalid`] when the settings cannot work, an operation or key breaks
    /// its rule, the intents are not in strictly ascending key order (as `snapshot`
    /// writes them; two intents sharing a key are out of order), or a resolution names
    /// no expired or unknown intent, or one twice; [`DecodeError::Malformed`] for bytes
    /// older than version 3 that hold the state Unknown. Versions 1 (before resolutions)
    /// and 2 (before Unknown) are read too.
    pub fn restore(bytes: &[u8]) -> Result<Ledger, DecodeError> {
        const WHAT: &str = "ledger snapshot";
        let invalid = DecodeError::Invalid { what: WHAT };
        // Version 1 is version 2 without its last field, the resolutions.
        let (version, body) = encoding::body_with_last_field(bytes, INTENT_VERSION)?;
        let mut snapshot: Snapshot = encoding::decode_body(&body, WHAT)?;
        if !snapshot
            .intents
            .iter()
            .all(|i| intent::state_in_version(i.state, version))
        {
            return Err(DecodeError::Malformed { what: WHAT });
        }
        for (key, resolution) in snapshot.resolutions {
            match position(&snapshot.intents, &key) {
                Ok(at) if snapshot.intents[at].resolution.is_none() => {
                    snapshot.intents[at].resolution = Some(resolution);
                }
                _ => return Err(invalid),
            }
        }
        let config = LedgerConfig::from(snapshot.config);
        config.validate().map_err(|_| invalid.clone())?;
        let mut previous: Option<&str> = None;
        for intent in &snapshot.intents {
            intent.check().map_err(|_| invalid.clone())?;
            if previous.is_some_and(|p| p >= intent.key.as_str()) {
                return Err(invalid);
            }
            previous = Some(&intent.key);
        }
        for intent in &mut snapshot.intents {
            intent.restart();
        }
        Ok(Ledger {
            config,
            rng: snapshot.rng,
            intents: snapshot.intents,
        })
    }
}

/// Where `key` is in `intents` (sorted by key): `Ok` with its index, or `Err` with where
/// it would go.
fn position(intents: &[Intent], key: &str) -> Result<usize, usize> {
    intents.binary_search_by(|intent| intent.key.as_str().cmp(key))
}

fn find<'a>(intents: &'a mut [Intent], key: &str) -> Result<&'a mut Intent, LedgerError> {
    match position(intents, key) {
        Ok(at) => Ok(&mut intents[at]),
        Err(_) => Err(LedgerError::UnknownKey { key: key.into() }),
    }
}
