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
mod room;
mod token;
mod transfer;
mod two_phase;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Config, ConfigError};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
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
    conn: Link,
    runtime: Handle,
    /// The begins left by their callers and the give-ups, running in tasks of their own.
    background: crate::seam::running::Running,
    /// The unsafe durability setting accepted at connect, if any.
    accepted_risk: Option<String>,
    /// The room kept under the server's `maxmemory` for settles.
    room: room::Room,
    /// Settled records this replica read or wrote, to answer replays from memory.
    cache: crate::seam::cache::ReplayCache,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The store's connection: to one server, or to a Redis Cluster, which sends each call
/// to the master that holds the slot of `{idem}` (and follows it when it moves).
#[derive(Clone)]
enum Link {
    One(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::One(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::One(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::One(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// How a [`RedisStore`] connects; from [`RedisStore::builder`].
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    config: Config,
    connect_timeout: Duration,
    response_timeout: Duration,
    accept_unsafe_durability: bool,
    space_reserve: u64,
    replay_cache: usize,
    #[cfg(feature = "redis-tls")]
    tls_roots: Vec<u8>,
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
            space_reserve: 4 << 20,
            replay_cache: 10_000,
            #[cfg(feature = "redis-tls")]
            tls_roots: Vec::new(),
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

    /// The memory kept under the server's `maxmemory` for settling the claims already
    /// made: while less is left, a claim is refused with [`crate::Error::NoRoom`] (an
    /// HTTP server answers 503, nothing run) and [`crate::Receiver::unready`] says why;
    /// replays and settles go on. 4 MiB by default; 0 keeps none. A server without
    /// `maxmemory` has no limit to keep (its `INFO` says so); a cluster is not read.
    #[must_use]
    pub fn space_reserve(mut self, bytes: u64) -> RedisStoreBuilder {
        self.space_reserve = bytes;
        self
    }

    /// How many settled records this replica keeps to answer replays without asking the
    /// server; 10,000 by default, 0 keeps none. A settled record does not change until
    /// it expires, and the cache answers only well before that, counted from the
    /// server's clock as a call last read it plus this process's monotonic clock.
    /// Pending, unknown and forgotten records always come from the server.
    #[must_use]
    pub fn replay_cache(mut self, records: usize) -> RedisStoreBuilder {
        self.replay_cache = records;
        self
    }

    /// PEM certificates to trust for TLS (a `rediss://` URL) in place of the system's
    /// roots: the private CA of the server's certificate (feature `redis-tls`).
    #[cfg(feature = "redis-tls")]
    #[must_use]
    pub fn tls_root_certificates(mut self, pem: &[u8]) -> RedisStoreBuilder {
        self.tls_roots.extend_from_slice(pem);
        self.tls_roots.push(b'\n');
        self
    }

    /// A client of the node `info` names, with the roots given for TLS.
    fn client(&self, info: redis::ConnectionInfo) -> Result<redis::Client, ConnectError> {
        #[cfg(feature = "redis-tls")]
        if !self.tls_roots.iter().all(u8::is_ascii_whitespace) {
            return redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(self.tls_roots.clone()),
                },
            )
            .map_err(|e| ConnectError::Url(e.to_string()));
        }
        redis::Client::open(info).map_err(|e| ConnectError::Url(e.to_string()))
    }

    /// Connects to the server at `url` (`redis://[user:password@]host:port/db`), checks
    /// it keeps what it acknowledges, and loads idem's function library when the server
    /// has none. With `?cluster=true`, `url` names one node of a Redis Cluster: every
    /// master is checked and given the library, and the store follows the cluster. A
    /// `rediss://` URL connects with TLS (feature `redis-tls`).
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
        let (url, params) = engine_params(url)?;
        let accept = self.accept_unsafe_durability || params.accept;
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| ConnectError::Url(e.to_string()))?;
        let client = self.client(info.clone())?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(6)
            .set_max_delay(Duration::from_secs(1));
        let mut seed = ConnectionManager::new_with_config(client, manager.clone())
            .await
            .map_err(ConnectError::Connect)?;
        let (conn, accepted_risk) = if params.cluster {
            // Each master checked and given the library, on a connection of its own.
            let mut risk = None;
            for (host, port) in durability::masters(&mut seed).await? {
                let addr = match info.addr() {
                    redis::ConnectionAddr::TcpTls {
                        insecure,
                        tls_params,
                        ..
                    } => redis::ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure: *insecure,
                        tls_params: tls_params.clone(),
                    },
                    _ => redis::ConnectionAddr::Tcp(host, port),
                };
                let client = self.client(info.clone().set_addr(addr))?;
                let mut master = ConnectionManager::new_with_config(client, manager.clone())
                    .await
                    .map_err(ConnectError::Connect)?;
                let found = durability::check(&mut master, accept).await?;
                durability::load_library(&mut master).await?;
                risk = risk.or(found);
            }
            let cluster = redis::cluster::ClusterClientBuilder::new(vec![url.as_str()])
                .connection_timeout(self.connect_timeout)
                .response_timeout(self.response_timeout);
            #[cfg(feature = "redis-tls")]
            let cluster = if self.tls_roots.iter().all(u8::is_ascii_whitespace) {
                cluster
            } else {
                cluster.certs(redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(self.tls_roots.clone()),
                })
            };
            let cluster = cluster
                .build()
                .map_err(|e| ConnectError::Url(e.to_string()))?
                .get_async_connection()
                .await
                .map_err(ConnectError::Connect)?;
            (Link::Cluster(cluster), risk)
        } else {
            let risk = durability::check(&mut seed, accept).await?;
            durability::load_library(&mut seed).await?;
            (Link::One(seed), risk)
        };
        Ok(RedisStore {
            inner: Arc::new(Inner {
                config: self.config,
                conn,
                runtime,
                background: crate::seam::running::Running::default(),
                accepted_risk,
                room: room::Room::new(self.space_reserve),
                cache: crate::seam::cache::ReplayCache::new(self.replay_cache),
            }),
        })
    }
}

/// The URL parameter that names a node of a Redis Cluster.
const CLUSTER: &str = "cluster";

/// What the engine's own URL parameters say.
#[derive(Debug, Default, PartialEq, Eq)]
struct Params {
    /// `accept_unsafe_durability=true`.
    accept: bool,
    /// `cluster=true`.
    cluster: bool,
}

/// `url` without the engine's own parameters (which the driver does not know), and what
/// they say.
fn engine_params(url: &str) -> Result<(String, Params), ConnectError> {
    let mut params = Params::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), params));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let flag = match name {
            ACCEPT_UNSAFE => &mut params.accept,
            CLUSTER => &mut params.cluster,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        *flag = match value {
            "true" => true,
            "false" => false,
            other => {
                return Err(ConnectError::Url(format!(
                    "{name}: {other:?}, must be true or false"
                )));
            }
        };
    }
    if kept.is_empty() {
        Ok((base.to_owned(), params))
    } else {
        Ok((format!("{base}?{}", kept.join("&")), params))
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
    fn conn(&self) -> Link {
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
    fn the_url_parameters_are_taken_out_and_the_rest_kept() {
        let only = |accept, cluster| Params { accept, cluster };
        assert_eq!(
            engine_params("redis://h:1/0").unwrap(),
            ("redis://h:1/0".to_owned(), only(false, false))
        );
        assert_eq!(
            engine_params("redis://h:1/0?accept_unsafe_durability=true").unwrap(),
            ("redis://h:1/0".to_owned(), only(true, false))
        );
        assert_eq!(
            engine_params("redis://h:1/0?protocol=resp3&accept_unsafe_durability=true").unwrap(),
            ("redis://h:1/0?protocol=resp3".to_owned(), only(true, false))
        );
        assert_eq!(
            engine_params("redis://h:1/0?cluster=true").unwrap(),
            ("redis://h:1/0".to_owned(), only(false, true))
        );
        let refused = engine_params("redis://h/0?accept_unsafe_durability=yes").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "redis URL: accept_unsafe_durability: \"yes\", must be true or false"
        );
        assert!(refused.is_input());
    }
}
