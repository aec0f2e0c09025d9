//! The PostgreSQL engine: a fleet of receivers sharing one database (docs/design.md §12).
//!
//! A [`PgStore`] keeps the records of many replicas (processes of `idem proxy`, services
//! with the tower layer, the operator's `idem`) in one PostgreSQL database, so that a
//! retry may reach any replica. It implements the [`crate::Receiver`] seam; the protocol
//! is idem-core's, as on the redb file: the engine reads a row, hands it to the core, and
//! writes what the core returns, as a statement conditioned on what it read.
//!
//! - A fresh key's claim is one autocommit `INSERT … ON CONFLICT DO NOTHING`, which
//!   returns the record in the way when there is one (one round trip either way).
//! - A record the core changes on a begin (a takeover, an expired lease turned Unknown,
//!   a key claimed again past its retention) is written by an `UPDATE` conditioned on
//!   the version read; a lost race reads again, a bounded number of times.
//! - Heartbeat, complete, mark unknown, release and resolve are one statement each,
//!   fenced by generation and state. After a connection lost mid-statement the engine
//!   reads the record back before it answers.
//! - Generations come from one sequence, `idem_generation`: unique and rising for the
//!   life of the database, also after sweep deleted a row.
//! - **The database's clock is the fleet's clock**: leases, retention and tombstones are
//!   counted in `idem_now()`, and a write never dates a record before its last update.
//!   The `now` a caller passes to the [`crate::Receiver`] methods is not used, so a
//!   replica whose clock is off changes nothing.
//! - Every session runs with `synchronous_commit = on` and READ COMMITTED, whatever the
//!   server's defaults: an answer follows a durable commit.
//! - A replica answers a replay of a settled record it has seen from memory (its replay
//!   cache, [`PgStoreBuilder::replay_cache`]): a settled record does not change until it
//!   expires. It does so only well before the expiry, counted from the database's clock
//!   as last read plus this process's monotonic clock. Pending, unknown and forgotten
//!   records always come from the database.
//! - Sweep works in bounded batches with `FOR UPDATE SKIP LOCKED`: any replica may sweep
//!   while others claim.
//!
//! The schema is versioned ([`PgStore::schema_sql`]); a database whose schema a newer
//! idem wrote is refused, as a newer file is.
//!
//! A `PgStore` needs a tokio runtime: connect it from inside one. Its calls are futures;
//! a synchronous caller runs them with the runtime's `block_on`.

mod entity;
mod error;
mod execute;
mod inbox;
mod intent;
mod lost;
mod maintain;
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
use pool::{Connector, Pool};
use tokio::runtime::Handle;

/// The tokio-postgres this engine is built on: the transaction [`PgStore::execute`]
/// hands to its work is this crate's.
pub use tokio_postgres;

pub use execute::Work;
pub use inbox::{Handler, PgInbox};
#[doc(hidden)]
pub use statements::fresh_key_statements;

/// A store of idempotency records in a PostgreSQL database, shared by every replica
/// that connects to it. Cheap to clone: clones share one pool.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    pool: Pool,
    cache: crate::seam::cache::ReplayCache,
    entities: crate::seam::cache::EntityCache,
    runtime: Handle,
    lock_timeout: Duration,
    /// The begins left by their callers, the give-ups and the lost claims given back,
    /// running in tasks of their own.
    background: crate::seam::running::Running,
    /// The marks of this store's claims.
    claimants: crate::seam::lost::Claimants,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How a [`PgStore`] connects; from [`PgStore::builder`].
#[derive(Debug, Clone)]
pub struct PgStoreBuilder {
    config: Config,
    pool_size: usize,
    create_schema: bool,
    connect_timeout: Duration,
    statement_timeout: Duration,
    lock_timeout: Duration,
    replay_cache: usize,
    #[cfg(feature = "postgres-tls")]
    tls_roots: Vec<u8>,
}

/// Connecting to the database failed; nothing was written, except the schema when the
/// database had none (it is created whole or not at all).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse.
    #[error("database URL")]
    Url(#[source] tokio_postgres::Error),
    /// The protocol settings cannot work.
    #[error("config")]
    Config(#[from] ConfigError),
    /// The pool size is 0.
    #[error("pool size: 0, must be at least 1")]
    PoolSize,
    /// The server could not be reached, or refused the connection (credentials, a
    /// database that does not exist, no TLS where the server requires it).
    #[error("connecting to the database")]
    Connect(#[source] tokio_postgres::Error),
    /// The database holds no idem schema, and creating it was turned off
    /// ([`PgStoreBuilder::create_schema`]).
    #[error(
        "the database holds no idem schema; apply the SQL of `idem schema` (or connect once with a role allowed to create tables)"
    )]
    NoSchema,
    /// Creating the schema failed (often: the role may not create tables).
    #[error("creating idem's schema failed; apply the SQL of `idem schema` as a role allowed to")]
    CreateSchema(#[source] tokio_postgres::Error),
    /// Reading the schema's version or columns failed.
    #[error("reading idem's schema")]
    ReadSchema(#[source] tokio_postgres::Error),
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
    /// ([`PgStoreBuilder::create_schema`]).
    #[error(
        "the database's idem schema is version {found}, older than this build's ({supported}); apply the SQL of `idem schema` to upgrade it (or connect once with a role allowed to)"
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
    /// The TLS root certificates given do not parse (feature `postgres-tls`).
    #[error("TLS root certificates: {0}")]
    TlsRoots(String),
    /// `connect` was called outside a tokio runtime.
    #[error("connecting needs a tokio runtime: call it from inside one")]
    NoRuntime,
}

impl Default for PgStoreBuilder {
    fn default() -> PgStoreBuilder {
        PgStoreBuilder {
            config: Config::default(),
            pool_size: 16,
            create_schema: true,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_millis(500),
            replay_cache: 10_000,
            #[cfg(feature = "postgres-tls")]
            tls_roots: Vec::new(),
        }
    }
}

impl ConnectError {
    /// True when the error is the caller's input (the URL, a setting, the certificates
    /// given), not the database or the network.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ConnectError::Url(_)
                | ConnectError::Config(_)
                | ConnectError::PoolSize
                | ConnectError::TlsRoots(_)
        )
    }
}

impl PgStoreBuilder {
    /// The protocol settings (lease, retention, tombstones, lease expiry).
    #[must_use]
    pub fn config(mut self, config: Config) -> PgStoreBuilder {
        self.config = config;
        self
    }

    /// At most this many connections at once; 16 by default.
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> PgStoreBuilder {
        self.pool_size = size;
        self
    }

    /// Whether a database without idem's schema gets it on connect (the default), or is
    /// refused with [`ConnectError::NoSchema`], for a role that may not create tables.
    #[must_use]
    pub fn create_schema(mut self, create: bool) -> PgStoreBuilder {
        self.create_schema = create;
        self
    }

    /// How long a connection attempt may take; 5 s by default.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> PgStoreBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long one statement may run before the server cancels it (and it writes
    /// nothing); 10 s by default.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> PgStoreBuilder {
        self.statement_timeout = timeout;
        self
    }

    /// How long an atomic execute ([`PgStore::execute`]) waits for a key that another
    /// execute holds in its open transaction before it answers in progress; 500 ms by
    /// default.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> PgStoreBuilder {
        self.lock_timeout = timeout;
        self
    }

    /// How many settled records this replica keeps to answer replays without asking the
    /// database, and how many entities it keeps to move in one statement; 10,000 by
    /// default, 0 keeps none. See [`PgStore`]'s section on caches.
    #[must_use]
    pub fn replay_cache(mut self, records: usize) -> PgStoreBuilder {
        self.replay_cache = records;
        self
    }

    /// Certificates (PEM) to trust for the database's TLS, beside the system's roots: a
    /// private CA's, or a self-signed server's. Whether TLS is used is the URL's
    /// `sslmode` (`require`, `prefer` by default, or `disable`).
    #[cfg(feature = "postgres-tls")]
    #[must_use]
    pub fn tls_root_certificates(mut self, pem: &[u8]) -> PgStoreBuilder {
        self.tls_roots.extend_from_slice(pem);
        self.tls_roots.push(b'\n');
        self
    }

    /// How this builder's connections are made.
    #[cfg(not(feature = "postgres-tls"))]
    fn connector(&self) -> Result<Connector, ConnectError> {
        Ok(Connector::Plain)
    }

    /// How this builder's connections are made: with rustls, trusting the system's roots
    /// and those given.
    #[cfg(feature = "postgres-tls")]
    fn connector(&self) -> Result<Connector, ConnectError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        // A system root that does not parse is left out; the others still count.
        for certificate in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(certificate);
        }
        if !self.tls_roots.iter().all(u8::is_ascii_whitespace) {
            let mut given = 0;
            for certificate in CertificateDer::pem_slice_iter(&self.tls_roots) {
                let certificate =
                    certificate.map_err(|e| ConnectError::TlsRoots(format!("{e:?}")))?;
                roots
                    .add(certificate)
                    .map_err(|e| ConnectError::TlsRoots(e.to_string()))?;
                given += 1;
            }
            if given == 0 {
                return Err(ConnectError::TlsRoots(
                    "no PEM certificate (-----BEGIN CERTIFICATE-----) in what was given".into(),
                ));
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ConnectError::TlsRoots(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Connector::Tls(
            tokio_postgres_rustls::MakeRustlsConnect::new(config),
        ))
    }

    /// Connects to the database at `url` (`postgres://user:password@host:port/db`, or
    /// several hosts with `target_session_attrs=read-write`), checks or creates the
    /// schema, and opens the pool.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] names the cause: the URL, the server, the credentials, the schema.
    pub async fn connect(self, url: &str) -> Result<PgStore, ConnectError> {
        self.config.validate()?;
        if self.pool_size == 0 {
            return Err(ConnectError::PoolSize);
        }
        let runtime = Handle::try_current().map_err(|_| ConnectError::NoRuntime)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(ConnectError::Url)?;
        config.connect_timeout(self.connect_timeout);
        let connector = self.connector()?;
        let client = connector
            .connect(&config)
            .await
            .map_err(ConnectError::Connect)?;
        let ensured = schema::ensure(&client, self.create_schema).await;
        drop(client);
        ensured?;
        let pool = Pool::new(config, connector, self.pool_size, self.statement_timeout);
        // The first connection of the pool proves the statements prepare.
        drop(pool.get().await.map_err(ConnectError::Connect)?);
        Ok(PgStore {
            inner: Arc::new(Inner {
                config: self.config,
                pool,
                cache: crate::seam::cache::ReplayCache::new(self.replay_cache),
                entities: crate::seam::cache::EntityCache::new(self.replay_cache),
                runtime,
                lock_timeout: self.lock_timeout,
                background: crate::seam::running::Running::default(),
                claimants: crate::seam::lost::Claimants::new(),
            }),
        })
    }
}

impl PgStore {
    /// A builder with the default settings.
    #[must_use]
    pub fn builder() -> PgStoreBuilder {
        PgStoreBuilder::default()
    }

    /// Connects to `url` with the default settings; see [`PgStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`PgStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<PgStore, ConnectError> {
        PgStore::builder().connect(url).await
    }

    /// The SQL of the schema this build creates, for a DBA who applies it by hand. Every
    /// statement may run again.
    #[must_use]
    pub fn schema_sql() -> &'static str {
        schema::SCHEMA
    }

    /// The schema version this build writes (and the newest it reads).
    #[must_use]
    pub fn schema_version() -> i64 {
        schema::SCHEMA_VERSION
    }

    /// True when the database answers a query now: for a load balancer's health check.
    pub async fn ping(&self) -> bool {
        match self.inner.pool.get().await {
            Ok(connection) => connection.client.simple_query("SELECT 1").await.is_ok(),
            Err(_) => false,
        }
    }
}
