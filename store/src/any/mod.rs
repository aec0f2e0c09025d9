//! One way in, chosen by what the user gives: a path opens the redb file, a
//! `postgres://` (or `postgresql://`) URL the PostgreSQL engine, a `mysql://` (or
//! `mariadb://`) URL the MariaDB engine, a `redis://` URL the Redis engine. [`AnyStore`]
//! is the one
//! type that the CLI, `idem proxy` and a service with the tower layer hold, whatever the
//! engine: it offers the seam ([`crate::Receiver`], [`crate::entity::Entities`],
//! [`crate::token::Tokens`]) and hands an engine's own operations over by type
//! ([`AnyStore::file`]), or refuses them with [`Error::Unsupported`].
//!
//! ```
//! use idem_store::any::AnyStore;
//! use idem_store::{Decision, Fingerprint, Receiver, RecordId, Timestamp};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("terminal.redb");
//! // Or "postgres://idem@db.internal/shop": the same calls follow.
//! let store = AnyStore::builder().open(path.to_str().unwrap()).await?;
//! let id = RecordId::new("shop-7", "charge", "order-1")?;
//! let decision = store.begin(&id, Fingerprint::of_bytes(b"1"), Timestamp(1_000)).await?;
//! assert!(matches!(decision, Decision::Claimed { .. }));
//! # Ok(())
//! # }
//! ```

mod blocking;
mod receiver;

pub use blocking::BlockingStore;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_core::Config;

use crate::error::{Error, OpenError};
use crate::file::Store;
use crate::file::open::StoreBuilder;
#[cfg(feature = "mysql")]
use crate::mysql::MySqlStore;
#[cfg(feature = "postgres")]
use crate::postgres::{ConnectError, PgStore};
#[cfg(feature = "redis")]
use crate::redis::RedisStore;

/// An open store on any engine: what [`AnyStore::open`] or [`AnyStoreBuilder::open`]
/// chose by the target.
#[derive(Debug)]
pub struct AnyStore {
    engine: Engine,
}

/// The engine behind an [`AnyStore`]. Private: callers use the seam, or
/// [`AnyStore::file`] for what only a file offers.
#[derive(Debug)]
enum Engine {
    File(Store),
    #[cfg(feature = "postgres")]
    Postgres(PgStore),
    #[cfg(feature = "mysql")]
    MySql(MySqlStore),
    #[cfg(feature = "redis")]
    Redis(RedisStore),
}

/// How to open an [`AnyStore`]; each setting applies to the engines it names and is
/// ignored by the others.
#[derive(Debug, Clone)]
pub struct AnyStoreBuilder {
    config: Config,
    create: bool,
    read_only: bool,
    lock_timeout: Option<Duration>,
    pool_size: Option<usize>,
    space_reserve: Option<u64>,
    #[cfg(any(feature = "postgres-tls", feature = "mysql-tls", feature = "redis-tls"))]
    tls_roots: Option<Vec<u8>>,
    accept_unsafe_durability: bool,
    password: Option<Password>,
}

/// A database password given apart from the URL, never shown by `Debug`.
#[derive(Clone)]
struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(hidden)")
    }
}

/// A store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnyOpenError {
    /// The file could not be opened.
    #[error(transparent)]
    File(#[from] OpenError),
    /// No file at the path, and [`AnyStoreBuilder::create`] is off (or the store is
    /// opened read-only): nothing was made.
    #[error("{}: no store file here", path.display())]
    Missing {
        /// The path given.
        path: PathBuf,
    },
    /// The database could not be reached or its schema read.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] ConnectError),
    /// The MariaDB database could not be reached, its server or its durability settings
    /// were refused, or its schema could not be read.
    #[cfg(feature = "mysql")]
    #[error(transparent)]
    MySql(#[from] crate::mysql::ConnectError),
    /// The Redis server could not be reached, its settings were refused, or idem's
    /// function library could not be loaded.
    #[cfg(feature = "redis")]
    #[error(transparent)]
    Redis(#[from] crate::redis::ConnectError),
    /// The runtime that a blocking store's database calls run on did not start.
    #[error("starting the database client's runtime")]
    Runtime(#[source] std::io::Error),
    /// A password given apart from the URL ([`AnyStoreBuilder::password`]) cannot be
    /// used with it.
    #[error("the database password: {problem}")]
    Password {
        /// Why, and what to do.
        problem: &'static str,
    },
    /// The target names an engine this build does not have, or none at all.
    #[error("{scheme}://: {problem}")]
    Scheme {
        /// The URL's scheme.
        scheme: String,
        /// Why it opens nothing, and what does.
        problem: &'static str,
    },
}

impl AnyOpenError {
    /// True when the error is the caller's input (a bad URL, path or setting, a scheme
    /// without an engine), not the file, the database, the network or the system.
    #[must_use]
    pub fn is_input(&self) -> bool {
        match self {
            AnyOpenError::File(e) => matches!(e, OpenError::Config(_) | OpenError::Options(_)),
            #[cfg(feature = "postgres")]
            AnyOpenError::Postgres(e) => e.is_input(),
            #[cfg(feature = "mysql")]
            AnyOpenError::MySql(e) => e.is_input(),
            #[cfg(feature = "redis")]
            AnyOpenError::Redis(e) => e.is_input(),
            AnyOpenError::Scheme { .. } | AnyOpenError::Password { .. } => true,
            AnyOpenError::Missing { .. } | AnyOpenError::Runtime(_) => false,
        }
    }
}

/// What a target names.
enum Target<'t> {
    File(&'t Path),
    #[cfg(feature = "postgres")]
    Postgres(&'t str),
    #[cfg(feature = "mysql")]
    MySql(&'t str),
    #[cfg(feature = "redis")]
    Redis(&'t str),
}

impl<'t> Target<'t> {
    /// A database's URL; `None` for a file.
    fn url(&self) -> Option<&'t str> {
        match *self {
            Target::File(_) => None,
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => Some(url),
            #[cfg(feature = "mysql")]
            Target::MySql(url) => Some(url),
            #[cfg(feature = "redis")]
            Target::Redis(url) => Some(url),
        }
    }

    /// The same engine at `url`.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "redis")),
        allow(unused_variables)
    )]
    fn with_url<'u>(self, url: &'u str) -> Target<'u>
    where
        't: 'u,
    {
        match self {
            Target::File(path) => Target::File(path),
            #[cfg(feature = "postgres")]
            Target::Postgres(_) => Target::Postgres(url),
            #[cfg(feature = "mysql")]
            Target::MySql(_) => Target::MySql(url),
            #[cfg(feature = "redis")]
            Target::Redis(_) => Target::Redis(url),
        }
    }

    /// A URL's scheme chooses the engine; anything else is a file's path.
    fn of(target: &OsStr) -> Result<Target<'_>, AnyOpenError> {
        let Some(text) = target.to_str() else {
            return Ok(Target::File(Path::new(target)));
        };
        let Some((scheme, _)) = text.split_once("://") else {
            return Ok(Target::File(Path::new(target)));
        };
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Ok(Target::File(Path::new(target)));
        }
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => Ok(Target::Postgres(text)),
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => Err(AnyOpenError::Scheme {
                scheme: scheme.into(),
                problem: "this build of idem-store has no PostgreSQL engine (feature `postgres`)",
            }),
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => Ok(Target::MySql(text)),
            #[cfg(not(feature = "mysql"))]
            "mysql" | "mariadb" => Err(AnyOpenError::Scheme {
                scheme: scheme.into(),
                problem: "this build of idem-store has no MariaDB engine (feature `mysql`)",
            }),
            #[cfg(feature = "redis")]
            "redis" | "rediss" => Ok(Target::Redis(text)),
            #[cfg(not(feature = "redis"))]
            "redis" | "rediss" => Err(AnyOpenError::Scheme {
                scheme: scheme.into(),
                problem: "this build of idem-store has no Redis engine (feature `redis`)",
            }),
            _ => Err(AnyOpenError::Scheme {
                scheme: scheme.into(),
                problem: "no engine for this scheme; a path opens a store file, postgres:// a PostgreSQL database, mysql:// a MariaDB one, redis:// a Redis server",
            }),
        }
    }
}

/// `url` with `password` in its user information, percent-encoded (every byte but the
/// unreserved ones of RFC 3986), the user name kept: the form each engine's URL parser
/// decodes.
fn url_with_password(url: &str, password: &str) -> Result<String, &'static str> {
    if password.is_empty() {
        return Err("empty; give none, or the password");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("the target is not a URL");
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host) = authority.rsplit_once('@').unwrap_or(("", authority));
    let in_query = tail
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|p| p.starts_with("password=")));
    if user.contains(':') || in_query {
        return Err("the URL has a password of its own; give it in one place");
    }
    let mut encoded = String::with_capacity(password.len() * 3);
    for byte in password.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(format!("{scheme}://{user}:{encoded}@{host}{tail}"))
}

/// The name of the engine `target` names (`file`, `postgres`, `mysql` or `redis`), without
/// opening it.
///
/// # Errors
///
/// [`AnyOpenError::Scheme`] for a scheme without an engine.
pub fn engine_of(target: impl AsRef<OsStr>) -> Result<&'static str, AnyOpenError> {
    Ok(match Target::of(target.as_ref())? {
        Target::File(_) => "file",
        #[cfg(feature = "postgres")]
        Target::Postgres(_) => "postgres",
        #[cfg(feature = "mysql")]
        Target::MySql(_) => "mysql",
        #[cfg(feature = "redis")]
        Target::Redis(_) => "redis",
    })
}

/// The version and the text of idem's schema on the database engine named `engine`
/// (`postgres` or `mysql`: its SQL; `redis`: its function library), for a DBA who
/// creates it by hand; `None` for an engine without one (the file) or not in this build.
#[must_use]
pub fn database_schema(engine: &str) -> Option<(i64, &'static str)> {
    match engine {
        #[cfg(feature = "postgres")]
        "postgres" => Some((PgStore::schema_version(), PgStore::schema_sql())),
        #[cfg(feature = "mysql")]
        "mysql" => Some((MySqlStore::schema_version(), MySqlStore::schema_sql())),
        #[cfg(feature = "redis")]
        "redis" => Some((RedisStore::library_version(), RedisStore::library())),
        _ => None,
    }
}

/// The database server `target` names (`PostgreSQL`, `MariaDB`, `Redis`), or `None` for a file. A server
/// keeps time on its own clock, the fleet's: a caller's `now` is not used there, and a
/// tool that lets its user set `now` refuses to. A file uses the caller's `now`.
#[must_use]
pub fn database_of(target: impl AsRef<OsStr>) -> Option<&'static str> {
    match Target::of(target.as_ref()) {
        Ok(Target::File(_)) | Err(_) => None,
        #[cfg(feature = "postgres")]
        Ok(Target::Postgres(_)) => Some("PostgreSQL"),
        #[cfg(feature = "mysql")]
        Ok(Target::MySql(_)) => Some("MariaDB"),
        #[cfg(feature = "redis")]
        Ok(Target::Redis(_)) => Some("Redis"),
    }
}

impl Default for AnyStoreBuilder {
    fn default() -> AnyStoreBuilder {
        AnyStoreBuilder {
            config: Config::default(),
            create: true,
            read_only: false,
            lock_timeout: None,
            pool_size: None,
            space_reserve: None,
            #[cfg(any(feature = "postgres-tls", feature = "mysql-tls", feature = "redis-tls"))]
            tls_roots: None,
            accept_unsafe_durability: false,
            password: None,
        }
    }
}

impl AnyStoreBuilder {
    /// The protocol settings (every engine).
    #[must_use]
    pub fn config(mut self, config: Config) -> AnyStoreBuilder {
        self.config = config;
        self
    }

    /// Whether opening may make the store: a missing file, or idem's schema in a
    /// database without it. On by default; off, a missing file is
    /// [`AnyOpenError::Missing`] and a database without the schema is refused.
    #[must_use]
    pub fn create(mut self, create: bool) -> AnyStoreBuilder {
        self.create = create;
        self
    }

    /// A file opened for reading only ([`StoreBuilder::read_only`]); a missing file is
    /// [`AnyOpenError::Missing`]. A database is opened as it is.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> AnyStoreBuilder {
        self.read_only = read_only;
        self
    }

    /// The free space a file keeps for settles ([`StoreBuilder::space_reserve`]); on
    /// Redis, the memory kept under its `maxmemory` (`RedisStoreBuilder::space_reserve`).
    #[must_use]
    pub fn space_reserve(mut self, bytes: u64) -> AnyStoreBuilder {
        self.space_reserve = Some(bytes);
        self
    }

    /// How long a file's writer waits for the write lock ([`StoreBuilder::lock_timeout`]).
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> AnyStoreBuilder {
        self.lock_timeout = Some(timeout);
        self
    }

    /// How many connections a database engine keeps.
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> AnyStoreBuilder {
        self.pool_size = Some(size);
        self
    }

    /// PEM certificates a database engine trusts for TLS, beside the system's roots
    /// (features `postgres-tls`, `mysql-tls`; on Redis, `redis-tls`, in place of them).
    #[cfg(any(feature = "postgres-tls", feature = "mysql-tls", feature = "redis-tls"))]
    #[must_use]
    pub fn tls_root_certificates(mut self, pem: &[u8]) -> AnyStoreBuilder {
        self.tls_roots = Some(pem.to_vec());
        self
    }

    /// Whether a MariaDB or Redis engine connects although the server's durability
    /// settings let an acknowledged write be lost in a crash
    /// (`MySqlStoreBuilder::accept_unsafe_durability`,
    /// `RedisStoreBuilder::accept_unsafe_durability`); off by default. Ignored by the
    /// other engines.
    #[must_use]
    pub fn accept_unsafe_durability(mut self, accept: bool) -> AnyStoreBuilder {
        self.accept_unsafe_durability = accept;
        self
    }

    /// The database password, in place of one in the URL: read from a file or a secret
    /// store, so that the URL (in a process list, a log) carries none. The URL names the
    /// user (`postgres://idem@db/shop`); a URL with a password of its own, or a file, is
    /// refused with it.
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> AnyStoreBuilder {
        self.password = Some(Password(password.into()));
        self
    }

    /// Opens the store `target` names: a path opens (or makes) a redb file, a
    /// `postgres://` URL connects to PostgreSQL, a `mysql://` (or `mariadb://`) URL to
    /// MariaDB. A file is opened on the calling
    /// thread, which the open blocks.
    ///
    /// # Errors
    ///
    /// [`AnyOpenError`]: the engine's own open or connect error, a missing file, or a
    /// scheme without an engine.
    pub async fn open(self, target: impl AsRef<OsStr>) -> Result<AnyStore, AnyOpenError> {
        let target = Target::of(target.as_ref())?;
        let with_password = match (&self.password, target.url()) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(AnyOpenError::Password {
                    problem: "a store file has none; a password goes with a database URL",
                });
            }
            (Some(Password(password)), Some(url)) => Some(
                url_with_password(url, password)
                    .map_err(|problem| AnyOpenError::Password { problem })?,
            ),
        };
        let target = match &with_password {
            Some(url) => target.with_url(url),
            None => target,
        };
        let engine = match target {
            Target::File(path) => Engine::File(self.open_file(path)?),
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => Engine::Postgres(self.connect(url).await?),
            #[cfg(feature = "mysql")]
            Target::MySql(url) => Engine::MySql(self.connect_mysql(url).await?),
            #[cfg(feature = "redis")]
            Target::Redis(url) => Engine::Redis(self.connect_redis(url).await?),
        };
        Ok(AnyStore { engine })
    }

    fn open_file(&self, path: &Path) -> Result<Store, AnyOpenError> {
        if (!self.create || self.read_only) && !path.exists() {
            return Err(AnyOpenError::Missing { path: path.into() });
        }
        let mut builder = StoreBuilder::default()
            .config(self.config.clone())
            .read_only(self.read_only);
        if let Some(timeout) = self.lock_timeout {
            builder = builder.lock_timeout(timeout);
        }
        if let Some(bytes) = self.space_reserve {
            builder = builder.space_reserve(bytes);
        }
        Ok(builder.open(path)?)
    }

    #[cfg(feature = "postgres")]
    async fn connect(&self, url: &str) -> Result<PgStore, ConnectError> {
        let mut builder = PgStore::builder()
            .config(self.config.clone())
            .create_schema(self.create);
        if let Some(size) = self.pool_size {
            builder = builder.pool_size(size);
        }
        #[cfg(feature = "postgres-tls")]
        if let Some(pem) = &self.tls_roots {
            builder = builder.tls_root_certificates(pem);
        }
        builder.connect(url).await
    }
}

impl AnyStoreBuilder {
    #[cfg(feature = "mysql")]
    async fn connect_mysql(&self, url: &str) -> Result<MySqlStore, crate::mysql::ConnectError> {
        let mut builder = MySqlStore::builder()
            .config(self.config.clone())
            .create_schema(self.create)
            .accept_unsafe_durability(self.accept_unsafe_durability);
        if let Some(size) = self.pool_size {
            builder = builder.pool_size(size);
        }
        #[cfg(feature = "mysql-tls")]
        if let Some(pem) = &self.tls_roots {
            builder = builder.tls_root_certificates(pem);
        }
        builder.connect(url).await
    }
}

impl AnyStoreBuilder {
    #[cfg(feature = "redis")]
    async fn connect_redis(&self, url: &str) -> Result<RedisStore, crate::redis::ConnectError> {
        let mut builder = RedisStore::builder()
            .config(self.config.clone())
            .accept_unsafe_durability(self.accept_unsafe_durability);
        if let Some(bytes) = self.space_reserve {
            builder = builder.space_reserve(bytes);
        }
        #[cfg(feature = "redis-tls")]
        let builder = match &self.tls_roots {
            Some(pem) => builder.tls_root_certificates(pem),
            None => builder,
        };
        builder.connect(url).await
    }
}

impl AnyStore {
    /// Settings to open a store with.
    #[must_use]
    pub fn builder() -> AnyStoreBuilder {
        AnyStoreBuilder::default()
    }

    /// Opens the store `target` names with the default settings; see
    /// [`AnyStoreBuilder::open`].
    ///
    /// # Errors
    ///
    /// As [`AnyStoreBuilder::open`].
    pub async fn open(target: impl AsRef<OsStr>) -> Result<AnyStore, AnyOpenError> {
        AnyStore::builder().open(target).await
    }

    /// The engine's name: `file`, `postgres`, `mysql` or `redis`.
    #[must_use]
    pub fn engine(&self) -> &'static str {
        match &self.engine {
            Engine::File(_) => "file",
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            Engine::MySql(_) => "mysql",
            #[cfg(feature = "redis")]
            Engine::Redis(_) => "redis",
        }
    }

    /// The redb store, for what only a file offers (atomic execute with redb writes, the
    /// outbox, check, compact).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] naming `what` on any other engine.
    pub fn file(&self, what: &'static str) -> Result<&Store, Error> {
        // Built with the file engine alone, the pattern always matches.
        #[allow(irrefutable_let_patterns)]
        if let Engine::File(store) = &self.engine {
            return Ok(store);
        }
        Err(unsupported(what, self.engine()))
    }

    /// [`AnyStore::file`], to change the store (compact).
    ///
    /// # Errors
    ///
    /// As [`AnyStore::file`].
    pub fn file_mut(&mut self, what: &'static str) -> Result<&mut Store, Error> {
        let engine = self.engine();
        // Built with the file engine alone, the pattern always matches.
        #[allow(irrefutable_let_patterns)]
        if let Engine::File(store) = &mut self.engine {
            return Ok(store);
        }
        Err(unsupported(what, engine))
    }
}

fn unsupported(what: &'static str, engine: &'static str) -> Error {
    Error::Unsupported {
        what,
        engine,
        hint: "it is a store file's (--db PATH)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_opens_a_file_and_a_scheme_names_its_engine() {
        for path in [
            "terminal.redb",
            "/var/lib/idem.redb",
            "dir/a://b",
            "://x",
            "",
        ] {
            assert_eq!(engine_of(path).unwrap(), "file", "{path}");
            assert_eq!(database_of(path), None, "{path}");
        }
        #[cfg(feature = "postgres")]
        for url in ["postgres://idem@db/shop", "postgresql://db/shop"] {
            assert_eq!(engine_of(url).unwrap(), "postgres", "{url}");
            assert_eq!(database_of(url), Some("PostgreSQL"), "{url}");
        }
        #[cfg(feature = "mysql")]
        for url in ["mysql://idem@db/shop", "mariadb://db/shop"] {
            assert_eq!(engine_of(url).unwrap(), "mysql", "{url}");
            assert_eq!(database_of(url), Some("MariaDB"), "{url}");
        }
        let refused = engine_of("mysql+tls://db/shop").unwrap_err();
        assert!(refused.is_input());
        assert_eq!(
            refused.to_string(),
            "mysql+tls://: no engine for this scheme; a path opens a store file, postgres:// a PostgreSQL database, mysql:// a MariaDB one, redis:// a Redis server"
        );
    }

    /// A password given apart from the URL goes in percent-encoded, and each engine's own
    /// URL parser reads back the same password and user.
    #[test]
    fn a_password_joins_the_url_as_each_engine_reads_it() {
        let password = "p@ss:w/rd?#%é ";
        let encoded = "p%40ss%3Aw%2Frd%3F%23%25%C3%A9%20";
        for (url, expected) in [
            (
                "postgres://idem@db/shop",
                format!("postgres://idem:{encoded}@db/shop"),
            ),
            (
                "postgres://idem@[::1]:5432/shop?sslmode=require",
                format!("postgres://idem:{encoded}@[::1]:5432/shop?sslmode=require"),
            ),
            (
                "mysql://idem@db:3306/shop",
                format!("mysql://idem:{encoded}@db:3306/shop"),
            ),
            (
                "redis://cache:6379/0",
                format!("redis://:{encoded}@cache:6379/0"),
            ),
            ("redis://app@cache", format!("redis://app:{encoded}@cache")),
        ] {
            assert_eq!(url_with_password(url, password).unwrap(), expected, "{url}");
        }
        assert!(url_with_password("postgres://idem:old@db/shop", "new").is_err());
        assert!(
            url_with_password(
                "postgres://idem@db/shop?sslmode=require&password=old",
                "new"
            )
            .is_err()
        );
        assert!(url_with_password("redis://cache/0", "").is_err());

        #[cfg(feature = "postgres")]
        {
            let url = url_with_password("postgres://idem@db/shop", password).unwrap();
            let config: tokio_postgres::Config = url.parse().unwrap();
            assert_eq!(config.get_password(), Some(password.as_bytes()));
            assert_eq!(config.get_user(), Some("idem"));
        }
        #[cfg(feature = "mysql")]
        {
            let url = url_with_password("mysql://idem@db/shop", password).unwrap();
            let opts = mysql_async::Opts::from_url(&url).unwrap();
            assert_eq!(opts.pass(), Some(password));
            assert_eq!(opts.user(), Some("idem"));
        }
        #[cfg(feature = "redis")]
        {
            use redis::IntoConnectionInfo;
            let url = url_with_password("redis://app@cache/0", password).unwrap();
            let info = url.as_str().into_connection_info().unwrap();
            assert_eq!(info.redis_settings().password(), Some(password));
            assert_eq!(info.redis_settings().username(), Some("app"));
        }
    }

    #[test]
    fn a_password_is_refused_with_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("made.redb");
        let refused = AnyStore::builder()
            .password("secret")
            .open_blocking(&path)
            .unwrap_err();
        assert!(refused.is_input());
        assert!(
            refused.to_string().contains("a store file has none"),
            "{refused}"
        );
        assert!(!path.exists(), "nothing was made");
        assert!(!format!("{:?}", AnyStore::builder().password("secret")).contains("secret"));
    }

    #[test]
    fn a_missing_file_is_made_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("made.redb");
        for refused in [
            AnyStore::builder().create(false),
            AnyStore::builder().read_only(true),
        ] {
            match refused.open_blocking(&path) {
                Err(AnyOpenError::Missing { path: missing }) => assert_eq!(missing, path),
                other => panic!("{other:?}"),
            }
            assert!(!path.exists());
        }
        let store = AnyStore::builder().open_blocking(&path).unwrap();
        assert_eq!(store.engine(), "file");
        assert!(store.file("check").is_ok());
        assert!(path.exists());
    }
}
