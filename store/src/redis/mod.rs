//! The Redis engine: a fleet of receivers sharing one Redis server (docs/design.md §15,
//! docs/redis.md).
//!
//! A [`RedisStore`] keeps the records of many replicas on one Redis server, as the
//! PostgreSQL and MariaDB engines do in a database. It implements the
//! [`crate::Receiver`] seam; the protocol is idem-core's: the engine reads a record with
//! the server's clock, hands both to the core, and applies the write the core returns
//! with a function that re-checks the record's bytes first (compare-and-set), so a write
//! lands only on the record it was decided on.
//!
//! - The code runs as a Redis function library (`FUNCTION LOAD`, [`RedisStore::library`]):
//!   it is kept and replicated by the server, so a failover needs no script reload.
//! - Every key carries the hash tag `{idem}`: a record, its indexes and the generation
//!   counter are in one hash slot, which every function call stays in.
//! - **The server's clock is the fleet's clock** (`TIME` inside the functions); the `now`
//!   a caller passes is not used.
//! - Generations come from one counter (`INCR`): unique and rising for the life of the
//!   data, also after a sweep deleted a record, also across a restart (with the
//!   durability the engine requires).
//! - Pending and Unknown records never expire by time; a settled record and its
//!   tombstone carry the time the protocol lets them go (`PEXPIREAT`), so the server
//!   drops them even when no sweep runs.
//! - **Honest durability.** At connect the engine reads the server's settings and
//!   refuses one that could lose an acknowledged claim: AOF off, `appendfsync` other than
//!   `always`, an eviction policy other than `noeviction`
//!   ([`ConnectError::UnsafeDurability`], naming the setting, its value and the fix),
//!   unless told to accept it ([`RedisStoreBuilder::accept_unsafe_durability`]).
//! - A call whose connection broke reads the record back before it answers.
//!
//! Entities (moved by a state machine with a version check), claimed values and one-time
//! tokens are kept beside the records, each written by a compare-and-set of its own. What
//! only a transaction of the caller's own can hold (atomic execute with the caller's
//! writes, the inbox) is not offered: Redis has no transaction that holds them.
//!
//! A `RedisStore` needs a tokio runtime: connect it from inside one.

mod durability;
mod entity;
mod keys;
mod maintain;
mod receiver;
mod token;
mod transfer;
mod two_phase;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Config, ConfigError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::runtime::Handle;

/// The library's source: idem's functions as `FUNCTION LOAD` takes them.
const LIBRARY: &str = include_str!("library.lua");

/// The library version this build loads and reads (`idem_version()`).
const LIBRARY_VERSION: i64 = 1;

/// A store of idempotency records on a Redis server, shared by every replica that
/// connects to it. Cheap to clone: clones share one connection, on which calls are
/// pipelined.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    conn: ConnectionManager,
    runtime: Handle,
    /// The begins left by their callers and the give-ups, running in tasks of their own.
    background: crate::seam::running::Running,
    /// The unsafe durability setting accepted at connect, if any.
    accepted_risk: Option<String>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How a [`RedisStore`] connects; from [`RedisStore::builder`].
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    config: Config,
    connect_timeout: Duration,
    response_timeout: Duration,
    accept_unsafe_durability: bool,
}

/// Connecting to the server failed; nothing was written, except idem's function library
/// when the server had none.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse, or names what this engine does not take.
    #[error("redis URL: {0}")]
    Url(String),
    /// The protocol settings cannot work.
    #[error("config")]
    Config(#[from] ConfigError),
    /// A timeout is 0.
    #[error("{field}: 0, must be above 0")]
    Timeout {
        /// The setting: `connect_timeout`, `response_timeout`.
        field: &'static str,
    },
    /// The server could not be reached, or refused the connection (credentials, a
    /// database index out of range).
    #[error("connecting to the redis server")]
    Connect(#[source] redis::RedisError),
    /// The server is not one this engine runs on.
    #[error("the server is redis {version}: {problem}")]
    Server {
        /// The server's `redis_version`.
        version: String,
        /// Why it does not do, and what does.
        problem: &'static str,
    },
    /// A setting of the server lets an acknowledged write be lost, and the builder does
    /// not accept that ([`RedisStoreBuilder::accept_unsafe_durability`]).
    #[error(
        "{setting} is {value}: an answered request could be lost; {fix} \
         (or accept the risk: accept_unsafe_durability=true in the URL)"
    )]
    UnsafeDurability {
        /// The server's setting.
        setting: &'static str,
        /// Its value.
        value: String,
        /// How to make it safe.
        fix: &'static str,
    },
    /// Reading the server's settings failed (a managed service that renames or hides
    /// `CONFIG`).
    #[error(
        "reading the server's durability settings (CONFIG GET) failed; where the service hides them, accept the risk knowingly: accept_unsafe_durability=true in the URL"
    )]
    ReadSettings(#[source] redis::RedisError),
    /// Loading idem's function library failed.
    #[error("loading idem's function library (FUNCTION LOAD)")]
    LoadLibrary(#[source] redis::RedisError),
    /// A newer idem loaded its library on the server.
    #[error(
        "the server's idem function library is version {found}, newer than this build reads (at most {supported}); use a newer idem"
    )]
    NewerLibrary {
        /// The version `idem_version()` answered.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// `connect` was called outside a tokio runtime.
    #[error("connecting needs a tokio runtime: call it from inside one")]
    NoRuntime,
}

impl ConnectError {
    /// True when the error is the caller's input (the URL, a setting), not the server
    /// or the network.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ConnectError::Url(_) | ConnectError::Config(_) | ConnectError::Timeout { .. }
        )
    }
}

impl Default for RedisStoreBuilder {
    fn default() -> RedisStoreBuilder {
        RedisStoreBuilder {
            config: Config::default(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            accept_unsafe_durability: false,
        }
    }
}

/// The URL parameter that accepts unsafe durability settings: the builder's
/// [`RedisStoreBuilder::accept_unsafe_durability`].
const ACCEPT_UNSAFE: &str = "accept_unsafe_durability";

impl RedisStoreBuilder {
    /// The protocol settings (lease, retention, tombstones, lease expiry).
    #[must_use]
    pub fn config(mut self, config: Config) -> RedisStoreBuilder {
        self.config = config;
        self
    }

    /// How long a connection attempt may take; 5 s by default.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> RedisStoreBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long a call may wait for the server's answer; 10 s by default. A call that
    /// ran out reads its record back before it answers.
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> RedisStoreBuilder {
        self.response_timeout = timeout;
        self
    }

    /// Whether to connect although the server's settings let an acknowledged write be
    /// lost (AOF off, `appendfsync` not `always`, an eviction policy, settings hidden by
    /// a managed service); off by default. The URL's `accept_unsafe_durability=true` says
    /// the same.
    #[must_use]
    pub fn accept_unsafe_durability(mut self, accept: bool) -> RedisStoreBuilder {
        self.accept_unsafe_durability = accept;
        self
    }

    /// Connects to the server at `url` (`redis://[user:password@]host:port/db`), checks
    /// it keeps what it acknowledges, and loads idem's function library when the server
    /// has none.
    ///
    /// # Errors
    ///
    /// [`ConnectError`]: a bad URL or setting, an unreachable server or wrong
    /// credentials, unsafe durability settings, a newer library.
    pub async fn connect(self, url: &str) -> Result<RedisStore, ConnectError> {
        self.config.validate()?;
        for (field, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if timeout.is_zero() {
                return Err(ConnectError::Timeout { field });
            }
        }
        let runtime = Handle::try_current().map_err(|_| ConnectError::NoRuntime)?;
        let (url, accept_from_url) = without_accept(url)?;
        let accept = self.accept_unsafe_durability || accept_from_url;
        let client =
            redis::Client::open(url.as_str()).map_err(|e| ConnectError::Url(e.to_string()))?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(6)
            .set_max_delay(Duration::from_secs(1));
        let mut conn = ConnectionManager::new_with_config(client, manager)
            .await
            .map_err(ConnectError::Connect)?;
        let accepted_risk = durability::check(&mut conn, accept).await?;
        durability::load_library(&mut conn).await?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                config: self.config,
                conn,
                runtime,
                background: crate::seam::running::Running::default(),
                accepted_risk,
            }),
        })
    }
}

/// `url` without the engine's own parameter, and whether it said to accept unsafe
/// durability.
fn without_accept(url: &str) -> Result<(String, bool), ConnectError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), false));
    };
    let mut accept = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((ACCEPT_UNSAFE, "true")) => accept = true,
            Some((ACCEPT_UNSAFE, "false")) => accept = false,
            Some((ACCEPT_UNSAFE, other)) => {
                return Err(ConnectError::Url(format!(
                    "{ACCEPT_UNSAFE}: {other:?}, must be true or false"
                )));
            }
            _ => kept.push(pair),
        }
    }
    if kept.is_empty() {
        Ok((base.to_owned(), accept))
    } else {
        Ok((format!("{base}?{}", kept.join("&")), accept))
    }
}

impl RedisStore {
    /// Settings to connect with.
    #[must_use]
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }

    /// Connects with the default settings; see [`RedisStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`RedisStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<RedisStore, ConnectError> {
        RedisStore::builder().connect(url).await
    }

    /// idem's function library, as the engine loads it (`FUNCTION LOAD`): for an
    /// operator who loads it by hand, and for a reader.
    #[must_use]
    pub fn library() -> &'static str {
        LIBRARY
    }

    /// The version of [`RedisStore::library`].
    #[must_use]
    pub fn library_version() -> i64 {
        LIBRARY_VERSION
    }

    /// A handle on the one connection (calls on clones are pipelined on it).
    fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// True when the server answers a `PING`.
    async fn ping(&self) -> bool {
        let mut conn = self.conn();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_parameter_is_taken_out_and_the_rest_kept() {
        assert_eq!(
            without_accept("redis://h:1/0").unwrap(),
            ("redis://h:1/0".to_owned(), false)
        );
        assert_eq!(
            without_accept("redis://h:1/0?accept_unsafe_durability=true").unwrap(),
            ("redis://h:1/0".to_owned(), true)
        );
        assert_eq!(
            without_accept("redis://h:1/0?protocol=resp3&accept_unsafe_durability=true").unwrap(),
            ("redis://h:1/0?protocol=resp3".to_owned(), true)
        );
        let refused = without_accept("redis://h/0?accept_unsafe_durability=yes").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "redis URL: accept_unsafe_durability: \"yes\", must be true or false"
        );
        assert!(refused.is_input());
    }
}
