//! Protocol settings: [`Config`] and the lease-expiry policy.

use core::fmt;
use serde::{Deserialize, Serialize};

const SECOND: u64 = 1_000;
const HOUR: u64 = 3_600 * SECOND;
const DAY: u64 = 24 * HOUR;

/// What `begin` does with a pending record whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LeaseExpiry {
    /// Turn the record Unknown: the executor may have done the effect, so a human or a
    /// reconciler must decide. The safe default.
    #[default]
    Unknown,
    /// Claim a new generation; the old executor is fenced and can no longer complete.
    /// Only for effects that are safe to run twice when the first run is lost.
    Takeover,
}

/// The receiver's settings. Every field has a default; see [`Config::default`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// How long a claim holds before it counts as abandoned, in ms. Default 30 s.
    pub lease_ms: u64,
    /// How long a succeeded outcome is replayed, in ms. Default 24 h.
    pub success_retention_ms: u64,
    /// How long a failed outcome is replayed, in ms. Default 24 h.
    pub failure_retention_ms: u64,
    /// Largest outcome body accepted, in bytes. Default 1 MiB.
    pub max_outcome_bytes: usize,
    /// What `begin` does with an expired lease. Default [`LeaseExpiry::Unknown`].
    pub on_lease_expiry: LeaseExpiry,
    /// How long, after a settled outcome's retention ends, its tombstone (fingerprint,
    /// generation, verdict, completion time) is kept, in ms, so that a late retry is
    /// answered Forgotten instead of executing again. Default 30 days; 0 keeps no
    /// tombstone (a retry after retention executes again).
    pub tombstone_retention_ms: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            lease_ms: 30 * SECOND,
            success_retention_ms: 24 * HOUR,
            failure_retention_ms: 24 * HOUR,
            max_outcome_bytes: 1 << 20,
            on_lease_expiry: LeaseExpiry::Unknown,
            tombstone_retention_ms: 30 * DAY,
        }
    }
}

/// A [`Config`] value that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A lease of 0 ms would expire as it is granted.
    ZeroLease,
    /// A retention of 0 ms would forget an outcome before any retry could see it.
    ZeroRetention {
        /// `"success_retention_ms"` or `"failure_retention_ms"`.
        field: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLease => f.write_str("lease_ms: 0, must be at least 1 ms"),
            ConfigError::ZeroRetention { field } => {
                write!(f, "{field}: 0, must be at least 1 ms")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

impl Config {
    /// Checks that every setting can work.
    ///
    /// # Errors
    ///
    /// The first setting that cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ms == 0 {
            return Err(ConfigError::ZeroLease);
        }
        if self.success_retention_ms == 0 {
            return Err(ConfigError::ZeroRetention {
                field: "success_retention_ms",
            });
        }
        if self.failure_retention_ms == 0 {
            return Err(ConfigError::ZeroRetention {
                field: "failure_retention_ms",
            });
        }
        Ok(())
    }
}

/// A caller's terms for one input, in place of the store's [`Config`] where given: the
/// lease a claim gets (and a heartbeat extends it by), and how long an outcome it
/// settles is kept. What a route of an HTTP server with its own lease and retention
/// gives every call it makes; the store's settings for whatever is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terms {
    /// [`Config::lease_ms`] for a begin and a heartbeat.
    pub lease_ms: Option<u64>,
    /// [`Config::success_retention_ms`] and [`Config::failure_retention_ms`] for a
    /// completion.
    pub retention_ms: Option<u64>,
}

impl Terms {
    /// Checks that the terms can work, as [`Config::validate`] does.
    ///
    /// # Errors
    ///
    /// A lease or a retention of 0 ms.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ms == Some(0) {
            return Err(ConfigError::ZeroLease);
        }
        if self.retention_ms == Some(0) {
            return Err(ConfigError::ZeroRetention {
                field: "retention_ms",
            });
        }
        Ok(())
    }
}

impl Config {
    /// These settings under `terms`: the terms' lease and retention where given. A
    /// term of 0 ms, which cannot work ([`Terms::validate`]), is not applied: the
    /// store's setting stands.
    #[must_use]
    pub fn with_terms(&self, terms: &Terms) -> Config {
        let mut config = self.clone();
        if let Some(lease) = terms.lease_ms.filter(|&ms| ms > 0) {
            config.lease_ms = lease;
        }
        if let Some(retention) = terms.retention_ms.filter(|&ms| ms > 0) {
            config.success_retention_ms = retention;
            config.failure_retention_ms = retention;
        }
        config
    }
}
