//! Sender settings: [`LedgerConfig`] and its validation.

use core::fmt;
use serde::{Deserialize, Serialize};

use crate::Timestamp;

const SECOND: u64 = 1_000;
const HOUR: u64 = 3_600 * SECOND;

/// The sender's settings.
///
/// Build one with [`LedgerConfig::with_seed`] and override fields, or spell out every
/// field; [`LedgerConfig::validate`] (called by [`crate::ledger::Ledger::new`]) refuses
/// settings that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerConfig {
    /// How long the receiver replays an outcome (its retention), in ms: after that it may
    /// forget the key and would execute a resend again.
    pub server_retention_ms: u64,
    /// How much earlier than the retention the sender stops, in ms: covers clock skew
    /// between sender and receiver and the time a request spends in flight.
    pub safety_margin_ms: u64,
    /// The first retry waits up to this long, in ms; each further retry doubles it.
    pub base_backoff_ms: u64,
    /// No retry waits longer than this, in ms (unless the receiver names a later time).
    pub max_backoff_ms: u64,
    /// Seed of the backoff jitter. Give every client its own (from the OS at first start,
    /// then persisted) so that clients do not retry in lockstep.
    pub seed: u64,
    /// Test-only, with the cargo feature `test-unguarded-deadline`: never in a product.
    ///
    /// `true` turns the deadline guard off: intents never expire and are sent after their
    /// deadline, when the receiver may have forgotten the key and executes a resend twice.
    /// It exists so that a simulation can show the guard is load-bearing. A ledger
    /// snapshot does not keep it: a restored ledger always has the guard on.
    #[cfg(any(feature = "test-unguarded-deadline", test))]
    #[doc(hidden)]
    #[serde(skip)]
    pub unguarded_deadline: bool,
}

impl LedgerConfig {
    /// The defaults with `seed`: retention 24 h (the receiver's default), safety margin
    /// 1 h, backoff from 500 ms up to 60 s, deadline guard on.
    #[must_use]
    pub const fn with_seed(seed: u64) -> LedgerConfig {
        LedgerConfig {
            server_retention_ms: 24 * HOUR,
            safety_margin_ms: HOUR,
            base_backoff_ms: 500,
            max_backoff_ms: 60 * SECOND,
            seed,
            #[cfg(any(feature = "test-unguarded-deadline", test))]
            unguarded_deadline: false,
        }
    }

    /// The last moment (exclusive) an intent created at `created_at` may be sent:
    /// `created_at + server_retention − safety_margin`.
    #[must_use]
    pub const fn deadline(&self, created_at: Timestamp) -> Timestamp {
        created_at.plus_millis(
            self.server_retention_ms
                .saturating_sub(self.safety_margin_ms),
        )
    }

    /// True unless the test-only `unguarded_deadline` is set.
    pub(crate) const fn guarded(&self) -> bool {
        #[cfg(any(feature = "test-unguarded-deadline", test))]
        return !self.unguarded_deadline;
        #[cfg(not(any(feature = "test-unguarded-deadline", test)))]
        true
    }

    /// Checks that every setting can work.
    ///
    /// # Errors
    ///
    /// The first setting that cannot, in field order.
    pub fn validate(&self) -> Result<(), LedgerConfigError> {
        if self.safety_margin_ms == 0 {
            return Err(LedgerConfigError::ZeroSafetyMargin);
        }
        if self.safety_margin_ms >= self.server_retention_ms {
            return Err(LedgerConfigError::MarginNotBelowRetention {
                safety_margin_ms: self.safety_margin_ms,
                server_retention_ms: self.server_retention_ms,
            });
        }
        if self.base_backoff_ms == 0 {
            return Err(LedgerConfigError::ZeroBaseBackoff);
        }
        if self.max_backoff_ms < self.base_backoff_ms {
            return Err(LedgerConfigError::MaxBelowBase {
                max_backoff_ms: self.max_backoff_ms,
                base_backoff_ms: self.base_backoff_ms,
            });
        }
        Ok(())
    }
}

/// The settings as a ledger snapshot keeps them (format version 1): the fields in order,
/// then one byte where earlier builds kept the test-only switch. It is written as 0 and
/// ignored when read, so old snapshots still decode and no restored ledger runs without
/// its deadline guard.
#[derive(Serialize, Deserialize)]
pub(super) struct StoredConfig {
    server_retention_ms: u64,
    safety_margin_ms: u64,
    base_backoff_ms: u64,
    max_backoff_ms: u64,
    seed: u64,
    ignored_switch: bool,
}

impl From<&LedgerConfig> for StoredConfig {
    fn from(config: &LedgerConfig) -> StoredConfig {
        StoredConfig {
            server_retention_ms: config.server_retention_ms,
            safety_margin_ms: config.safety_margin_ms,
            base_backoff_ms: config.base_backoff_ms,
            max_backoff_ms: config.max_backoff_ms,
            seed: config.seed,
            ignored_switch: false,
        }
    }
}

impl From<StoredConfig> for LedgerConfig {
    fn from(stored: StoredConfig) -> LedgerConfig {
        LedgerConfig {
            server_retention_ms: stored.server_retention_ms,
            safety_margin_ms: stored.safety_margin_ms,
            base_backoff_ms: stored.base_backoff_ms,
            max_backoff_ms: stored.max_backoff_ms,
            ..LedgerConfig::with_seed(stored.seed)
        }
    }
}

/// A [`LedgerConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerConfigError {
    /// A safety margin of 0 would send right up to the moment the receiver forgets.
    ZeroSafetyMargin,
    /// The safety margin leaves no time to send at all.
    MarginNotBelowRetention {
        /// The margin given.
        safety_margin_ms: u64,
        /// The retention given.
        server_retention_ms: u64,
    },
    /// A base backoff of 0 would retry in a busy loop.
    ZeroBaseBackoff,
    /// The largest backoff is smaller than the first one.
    MaxBelowBase {
        /// The cap given.
        max_backoff_ms: u64,
        /// The base given.
        base_backoff_ms: u64,
    },
}

impl fmt::Display for LedgerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerConfigError::ZeroSafetyMargin => f.write_str(
                "safety_margin_ms: 0, must be at least 1 ms (it covers clock skew and time in flight)",
            ),
            LedgerConfigError::MarginNotBelowRetention { safety_margin_ms, server_retention_ms } => {
                write!(
                    f,
                    "safety_margin_ms: {safety_margin_ms}, must be less than server_retention_ms ({server_retention_ms})"
                )
            }
            LedgerConfigError::ZeroBaseBackoff => {
                f.write_str("base_backoff_ms: 0, must be at least 1 ms")
            }
            LedgerConfigError::MaxBelowBase { max_backoff_ms, base_backoff_ms } => write!(
                f,
                "max_backoff_ms: {max_backoff_ms}, must be at least base_backoff_ms ({base_backoff_ms})"
            ),
        }
    }
}

impl core::error::Error for LedgerConfigError {}
