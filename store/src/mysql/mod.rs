//! The MariaDB engine: a fleet of receivers sharing one MariaDB database
//! (docs/design.md §14, docs/mariadb.md).
//!
//! A [`MySqlStore`] keeps the records of many replicas in one MariaDB database, as the
//! PostgreSQL engine (`idem_store::postgres`) does on PostgreSQL. It implements the
//! [`crate::Receiver`] seam; the protocol is idem-core's: the engine reads a row, hands
//! it to the core, and writes what the core returns as a statement conditioned on what
//! it read.
//!
//! - Tenant, operation and key are `VARBINARY`, compared byte for byte (`Key-A`, `key-a`
//!   and `key-a ` are three keys), and `(tenant, operation, key)` is the primary key.
//! - A begin is one statement: an `INSERT … ON DUPLICATE KEY UPDATE tenant = tenant
//!   RETURNING …` claims a fresh key, or changes nothing and returns the record in the
//!   way, which is given to the core. Which one came back is told by the row's claimant
//!   (this begin's mark only on its own claim), never by the affected rows that the
//!   client's `CLIENT_FOUND_ROWS` flag changes. No `INSERT IGNORE`.
//! - Every write of an existing row is conditioned on the row's `revision`, which every
//!   write raises: one affected row is a win, whatever the client's `CLIENT_FOUND_ROWS`
//!   flag says (the `SET` always changes the row). A lost race reads again, a bounded
//!   number of times.
//! - Generations come from one sequence, `idem_generation`: unique and rising for the
//!   life of the database, also after sweep deleted a row, also across a restart. It
//!   steps by `auto_increment_increment`, so the nodes of a Galera cluster never hand out
//!   the same one.
//! - **The database's clock is the fleet's clock** (`idem_now()`), never below a row's
//!   last update; the `now` a caller passes is not used.
//! - Sessions run at READ COMMITTED with a short `innodb_lock_wait_timeout`; deadlocks
//!   (1213) start the input over, a bounded number of times; a lock wait that ran out
//!   (1205: another transaction holds the key open, an execute's claim) is answered in
//!   progress. After a connection lost mid-statement, the engine reads the row back
//!   before it answers.
//! - Atomic execute ([`MySqlStore::execute`]): the claim, the caller's writes and the
//!   settled record in one transaction; the consumer inbox ([`MySqlStore::inbox`]) runs on
//!   it.
//! - Durability cannot be set per session on MariaDB: at connect the engine reads
//!   `innodb_flush_log_at_trx_commit`, `log_bin`, `sync_binlog` and the semi-synchronous
//!   settings and refuses unsafe values ([`ConnectError::UnsafeDurability`]) unless told
//!   to accept them ([`MySqlStoreBuilder::accept_unsafe_durability`]).
//! - Sweeps work in bounded batches under `FOR UPDATE SKIP LOCKED`.
//! - A replica answers a replay of a settled record it has seen from memory (its replay
//!   cache, [`MySqlStoreBuilder::replay_cache`]), only well before the record expires on
//!   the database's clock, as the PostgreSQL engine does.
//!
//! The schema is versioned ([`MySqlStore::schema_sql`]); a newer idem's schema is
//! refused. The engine needs MariaDB 10.6 or newer (sequences, `INSERT … RETURNING`,
//! `SKIP LOCKED`); MySQL, which has neither sequences nor `RETURNING`, is refused at
//! connect by name.
//!
//! A `MySqlStore` needs a tokio runtime: connect it from inside one.

mod durability;
mod entity;
mod error;
mod execute;
mod held;
mod hosts;
mod inbox;
mod intent;
mod lost;
mod maintain;
mod pending;
mod pool;
mod receiver;
mod row;
mod schema;
mod statements;
mod token;
mod transfer;
mod two_phase;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Config, ConfigError};
use tokio::runtime::Handle;

/// The mysql_async this engine is built on: the transaction [`MySqlStore::execute`]
/// hands to its work is this crate's.
pub use mysql_async;

pub use execute::Work;
pub use inbox::{Handler, MySqlInbox};

/// A store of idempotency records in a MariaDB database, shared by every replica that
/// connects to it. Cheap to clone: clones share one pool.
#[derive(Clone)]
pub struct MySqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    /// The database's hosts, and the pool of the one that takes writes.
    hosts: hosts::Hosts,
    runtime: Handle,
    /// The begins left by their callers and the give-ups, running in tasks of their own.
    background: crate::seam::running::Running,
    /// The unsafe durability setting accepted at connect, if any.
    accepted_risk: Option<String>,
    /// Settled records this replica read or wrote, to answer replays from memory.
    cache: crate::seam::cache::ReplayCache,
    /// The marks of this replica's claims, to give back one whose answer was lost.
    claimants: crate::seam::lost::Claimants,
    /// The claims this replica holds, for the one-statement fenced inputs.
    held: held::Held,
    /// How long after its connection broke a claim may still land: the statement
    /// timeout and [`lost::LANDING_MARGIN`].
    may_land_for: Duration,
}

impl std::fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How a [`MySqlStore`] connects; from [`MySqlStore::builder`].
#[derive(Debug, Clone)]
pub struct MySqlStoreBuilder {
    config: Config,
    pool_size: usize,
    create_schema: bool,
    connect_timeout: Duration,
    statement_timeout: Duration,
    lock_timeout: Duration,
    accept_unsafe_durability: bool,
    replay_cache: usize,
    #[cfg(feature = "mysql-tls")]
    tls_roots: Vec<u8>,
}

/// Connecting to the database failed; nothing was written, except the schema when the
/// database had none.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse.
    #[error("database URL: {0}")]
    Url(String),
    /// The protocol settings cannot work.
    #[error("config")]
    Config(#[from] ConfigError),
    /// The pool size is 0.
    #[error("pool size: 0, must be at least 1")]
    PoolSize,
    /// A timeout is not a whole number of seconds of at least 1 where the server counts
    /// in seconds, or is 0.
    #[error("{field}: {problem}")]
    Timeout {
        /// The setting: `lock_timeout`, `statement_timeout`, `connect_timeout`.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The server could not be reached, or refused the connection (credentials, a
    /// database that does not exist).
    #[error("connecting to the database")]
    Connect(#[source] mysql_async::Error),
    /// The server did not answer within the connect timeout.
    #[error("connecting to the database: no answer within {0:?}")]
    ConnectTimeout(Duration),
    /// The URL lists several hosts and none of them takes writes (each is named with
    /// why: unreachable, `read_only` on, a durability setting).
    #[error("no writable host among the URL's: {0}")]
    NoWritableHost(String),
    /// The server is not one this engine runs on.
    #[error("the server is {version}: {problem}")]
    Server {
        /// The server's `VERSION()`.
        version: String,
        /// Why it does not do, and what does.
        problem: &'static str,
    },
    /// A durability setting of the server lets an acknowledged commit be lost, and the
    /// builder does not accept that ([`MySqlStoreBuilder::accept_unsafe_durability`]).
    #[error(
        "{variable} is {value}: an answered request could be lost in a crash; {fix} \
         (or accept the risk: accept_unsafe_durability=true in the URL)"
    )]
    UnsafeDurability {
        /// The server variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// How to make it safe.
        fix: &'static str,
    },
    /// Reading the server's durability settings failed.
    #[error("reading the server's durability settings")]
    ReadSettings(#[source] mysql_async::Error),
    /// The database holds no idem schema, and creating it was turned off
    /// ([`MySqlStoreBuilder::create_schema`]).
    #[error(
        "the database holds no idem schema; apply the SQL of `idem schema --db mysql://…` (or connect once with a user allowed to create tables)"
    )]
    NoSchema,
    /// Creating the schema failed (often: the user may not create tables, sequences or
    /// functions).
    #[error(
        "creating idem's schema failed; apply the SQL of `idem schema --db mysql://…` as a user allowed to"
    )]
    CreateSchema(#[source] mysql_async::Error),
    /// Reading the schema's version or columns failed.
    #[error("reading idem's schema")]
    ReadSchema(#[source] mysql_async::Error),
    /// A newer idem wrote the schema.
    #[error(
        "the database's idem schema is version {found}, newer than this build reads (at most {supported}); use a newer idem"
    )]
    NewerSchema {
        /// The version in `idem_meta`.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// The database holds an older idem schema, and upgrading it was turned off
    /// ([`MySqlStoreBuilder::create_schema`]).
    #[error(
        "the database's idem schema is version {found}, older than this build's ({supported}); apply the SQL of `idem schema --db mysql://…` to upgrade it (or connect once with a user allowed to)"
    )]
    OlderSchema {
        /// The version in `idem_meta`.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// A table of the schema differs from what this build reads (changed by hand).
    #[error("idem's schema was changed: {detail}")]
    SchemaChanged {
        /// What differs.
        detail: String,
    },
    /// `connect` was called outside a tokio runtime.
    #[error("connecting needs a tokio runtime: call it from inside one")]
    NoRuntime,
}

impl ConnectError {
    /// True when the error is the caller's input (the URL, a setting), not the database
    /// or the network.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ConnectError::Url(_)
                | ConnectError::Config(_)
                | ConnectError::PoolSize
                | ConnectError::Timeout { .. }
        )
    }
}

impl Default for MySqlStoreBuilder {
    fn default() -> MySqlStoreBuilder {
        MySqlStoreBuilder {
            config: Config::default(),
            pool_size: 16,
            create_schema: true,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(1),
            accept_unsafe_durability: false,
            replay_cache: 10_000,
            #[cfg(feature = "mysql-tls")]
            tls_roots: Vec::new(),
        }
    }
}

/// The URL parameter that accepts unsafe durability settings: the builder's
/// [`MySqlStoreBuilder::accept_unsafe_durability`].
const ACCEPT_UNSAFE: &str = "accept_unsafe_durability";

impl MySqlStoreBuilder {
    /// The protocol settings (lease, retention, tombstones, lease expiry).
    #[must_use]
    pub fn config(mut self, config: Config) -> MySqlStoreBuilder {
        self.config = config;
        self
    }

    /// At most this many connections at once; 16 by default.
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> MySqlStoreBuilder {
        self.pool_size = size;
        self
    }

    /// Whether a database without idem's schema, or with an older version of it, gets
    /// this build's on connect (the default), or is refused with
    /// [`ConnectError::NoSchema`] or [`ConnectError::OlderSchema`], for a user that may
    /// not create or alter tables.
    #[must_use]
    pub fn create_schema(mut self, create: bool) -> MySqlStoreBuilder {
        self.create_schema = create;
        self
    }

    /// How long a connection attempt may take, and how long a call waits for a
    /// connection of the pool (a free one, or a new one) before it fails with the
    /// database's error, naming this timeout; 5 s by default. With a list of hosts, a
    /// host that gives none in time is left for the next.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> MySqlStoreBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long one statement may run before the server stops it
    /// (`max_statement_time`); 10 s by default.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> MySqlStoreBuilder {
        self.statement_timeout = timeout;
        self
    }

    /// How long a statement waits for a row another transaction holds
    /// (`innodb_lock_wait_timeout`, whole seconds, at least 1) before the input starts
    /// over; 1 s by default.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> MySqlStoreBuilder {
        self.lock_timeout = timeout;
        self
    }

    /// Connects although the server's durability settings let an acknowledged commit be
    /// lost in a crash (`innodb_flush_log_at_trx_commit` other than 1, the binary log on
    /// with `sync_binlog` other than 1, semi-synchronous replication waiting
    /// `AFTER_COMMIT`): for a managed service that hides or fixes them otherwise. Off by
    /// default; the URL's `accept_unsafe_durability=true` turns it on too.
    #[must_use]
    pub fn accept_unsafe_durability(mut self, accept: bool) -> MySqlStoreBuilder {
        self.accept_unsafe_durability = accept;
        self
    }

    /// How many settled records this replica keeps to answer replays without asking the
    /// database; 10,000 by default, 0 keeps none. A settled record does not change until
    /// it expires, and the cache answers only well before that, counted from the
    /// database's clock as a statement last read it plus this process's monotonic clock.
    /// Pending, unknown and forgotten records always come from the database.
    #[must_use]
    pub fn replay_cache(mut self, records: usize) -> MySqlStoreBuilder {
        self.replay_cache = records;
        self
    }

    /// Certificates (PEM) to trust for the database's TLS, beside the webpki roots: a
    /// private CA's, or a self-signed server's (feature `mysql-tls`). Whether TLS is
    /// used is the URL's `require_ssl=true`.
    #[cfg(feature = "mysql-tls")]
    #[must_use]
    pub fn tls_root_certificates(mut self, pem: &[u8]) -> MySqlStoreBuilder {
        self.tls_roots.extend_from_slice(pem);
        self.tls_roots.push(b'\n');
        self
    }

    /// The driver's options of `url`, with the roots given when the URL asks for TLS.
    fn opts(&self, url: &str) -> Result<mysql_async::Opts, ConnectError> {
        let opts =
            mysql_async::Opts::from_url(url).map_err(|e| ConnectError::Url(e.to_string()))?;
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(ConnectError::Url(
                "names no database; give one after the host (mysql://user@host/DB)".into(),
            ));
        }
        #[cfg(feature = "mysql-tls")]
        if let Some(ssl) = opts.ssl_opts()
            && !self.tls_roots.iter().all(u8::is_ascii_whitespace)
        {
            let ssl = ssl
                .clone()
                .with_root_certs(vec![self.tls_roots.clone().into()]);
            return Ok(mysql_async::OptsBuilder::from_opts(opts)
                .ssl_opts(ssl)
                .into());
        }
        Ok(opts)
    }

    /// Connects to the database at `url` (`mysql://user:password@host:port/db`, or
    /// `mariadb://…`), checks the server and its durability settings, checks or creates
    /// the schema, and opens the pool.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] names the cause: the URL, the server, the credentials, a
    /// durability setting, the schema.
    pub async fn connect(self, url: &str) -> Result<MySqlStore, ConnectError> {
        self.config.validate()?;
        if self.pool_size == 0 {
            return Err(ConnectError::PoolSize);
        }
        let runtime = Handle::try_current().map_err(|_| ConnectError::NoRuntime)?;
        let (url, accept_from_url) = strip_accept_unsafe(url)?;
        let accept_unsafe = self.accept_unsafe_durability || accept_from_url;
        let session = pool::Session::new(self.statement_timeout, self.lock_timeout)?;
        if self.connect_timeout.is_zero() {
            return Err(ConnectError::Timeout {
                field: "connect_timeout",
                problem: "0, must be above 0".into(),
            });
        }
        let mut listed = Vec::new();
        for (name, url) in hosts::split(&url)? {
            let opts = self.opts(&url)?;
            let own = pool::options(&opts, &session, 1);
            listed.push((name, opts, own));
        }
        let chosen = if listed.len() == 1 {
            0
        } else {
            hosts::first_writable(
                listed.iter().map(|(name, _, own)| (name.as_str(), own)),
                self.connect_timeout,
                accept_unsafe,
            )
            .await
            .map_err(|e| ConnectError::NoWritableHost(e.hosts().to_owned()))?
        };
        let first = listed[chosen].2.clone();
        let mut conn = tokio::time::timeout(self.connect_timeout, mysql_async::Conn::new(first))
            .await
            .map_err(|_| ConnectError::ConnectTimeout(self.connect_timeout))?
            .map_err(ConnectError::Connect)?;
        let checked = async {
            durability::check_server(&mut conn).await?;
            let risk = durability::check(&mut conn, accept_unsafe).await?;
            schema::ensure(&mut conn, self.create_schema).await?;
            let galera = durability::galera(&mut conn).await?;
            Ok::<_, ConnectError>((risk, galera))
        }
        .await;
        let _ = conn.disconnect().await;
        let (accepted_risk, galera) = checked?;
        let session = if galera { session.galera() } else { session };
        let listed = listed
            .into_iter()
            .map(|(name, opts, _)| {
                let own = pool::options(&opts, &session, 1);
                let pooled = pool::options(&opts, &session, self.pool_size);
                (name, own, pooled)
            })
            .collect();
        Ok(MySqlStore {
            inner: Arc::new(Inner {
                config: self.config,
                hosts: hosts::Hosts::new(listed, chosen, self.connect_timeout, accept_unsafe),
                runtime,
                background: crate::seam::running::Running::default(),
                accepted_risk,
                cache: crate::seam::cache::ReplayCache::new(self.replay_cache),
                claimants: crate::seam::lost::Claimants::new(),
                held: held::Held::default(),
                may_land_for: self.statement_timeout + lost::LANDING_MARGIN,
            }),
        })
    }
}

/// The URL without its `accept_unsafe_durability` parameter (which the driver does not
/// know), and whether that parameter said `true`.
fn strip_accept_unsafe(url: &str) -> Result<(String, bool), ConnectError> {
    let url = match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_owned(),
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url, false));
    };
    let mut accept = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((ACCEPT_UNSAFE, value)) => {
                accept = match value {
                    "true" => true,
                    "false" => false,
                    other => {
                        return Err(ConnectError::Url(format!(
                            "{ACCEPT_UNSAFE}: {other:?}, must be true or false"
                        )));
                    }
                }
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

impl MySqlStore {
    /// A builder with the default settings.
    #[must_use]
    pub fn builder() -> MySqlStoreBuilder {
        MySqlStoreBuilder::default()
    }

    /// Connects to `url` with the default settings; see [`MySqlStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`MySqlStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<MySqlStore, ConnectError> {
        MySqlStore::builder().connect(url).await
    }

    /// The SQL of the schema this build creates, for a DBA who applies it by hand. Every
    /// statement may run again.
    #[must_use]
    pub fn schema_sql() -> &'static str {
        schema::SCHEMA
    }

    /// The SQL of a fresh key's two statements, the begin (whose row is the caller's
    /// claim when its first column, the claimant, is the mark the caller gave; the
    /// generation is its fifth) and the fenced update that completes it, as the engine
    /// prepares them: for benchmarks that send the same statements without idem's code.
    /// The begin's parameters are tenant, operation, key, fingerprint, lease (ms) and
    /// mark; the update's the state, the
    /// verdict, the offsets of `lease_until`, `completed_at` and `expires_at` from the
    /// time of the write, the outcome's code and body, then tenant, operation, key,
    /// generation and the state required (0, pending).
    #[doc(hidden)]
    #[must_use]
    pub fn fresh_key_statements() -> [&'static str; 2] {
        [statements::BEGIN, statements::UPDATE_FENCED]
    }

    /// The schema version this build writes (and the newest it reads).
    #[must_use]
    pub fn schema_version() -> i64 {
        schema::SCHEMA_VERSION
    }

    /// True when the database answers a query now: for a load balancer's health check.
    pub async fn ping(&self) -> bool {
        self.answer().await.is_ok()
    }

    /// A connection of the host in use, pinged: the driver's error when there is none
    /// or it does not answer.
    async fn answer(&self) -> Result<(), mysql_async::Error> {
        use mysql_async::prelude::Queryable;
        self.inner.hosts.get_conn().await?.ping().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_durability_opt_in_leaves_the_url_and_a_bad_value_is_named() {
        let (url, accept) =
            strip_accept_unsafe("mariadb://u:p@db:3306/shop?accept_unsafe_durability=true")
                .unwrap();
        assert_eq!((url.as_str(), accept), ("mysql://u:p@db:3306/shop", true));
        let (url, accept) =
            strip_accept_unsafe("mysql://db/shop?pool_min=1&accept_unsafe_durability=false")
                .unwrap();
        assert_eq!(
            (url.as_str(), accept),
            ("mysql://db/shop?pool_min=1", false)
        );
        let error =
            strip_accept_unsafe("mysql://db/shop?accept_unsafe_durability=yes").unwrap_err();
        assert!(error.is_input());
        assert_eq!(
            error.to_string(),
            "database URL: accept_unsafe_durability: \"yes\", must be true or false"
        );
    }
}
