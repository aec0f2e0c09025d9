//! The harness: a fresh store of one engine, and what the engines differ in for a test
//! (how time passes, how a store restarts).
//!
//! Time: the file takes the caller's `now` (a test's clock, here starting at [`T0`]);
//! PostgreSQL ignores it and counts on the database's clock (`idem_now()`). So that a test
//! can let time pass on both, the PostgreSQL harness moves the database's clock: it
//! replaces `idem_now()` in the test's database with the server's clock plus an offset,
//! which [`Engine::pass`] raises. Every row the engine wrote stays as written, so a
//! record read before and after compares as it would on the file. A replica's replay
//! cache counts on from the clock it last read with the process's monotonic clock, and
//! rightly cannot see such a jump: after one, the harness connects the store again, as
//! a replica that restarts (with an empty cache).
//!
//! MariaDB is moved the same way (`MariaDb`, `--features mysql`).
//!
//! Replicas: PostgreSQL serves a fleet, several stores on one database; a file is held
//! by one process, whose callers share its store. [`Engine::replica`] gives a test the
//! engine's second caller: another `PgStore` on the test's database, the same file store.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use idem_core::{Config, Timestamp};
use idem_store::entity::Entities;
use idem_store::postgres::PgStore;
use idem_store::token::Tokens;
use idem_store::{Receiver, Store};

use crate::server::Server;

/// The file's clock at the start of a test: a fixed time, so nothing expires by accident.
pub(crate) const T0: u64 = 1_700_000_000_000;

/// How many connections a PostgreSQL store of the suite may hold: one per caller of the
/// races.
const POOL: usize = 64;

/// How many connections a replica ([`Engine::replica`]) may hold: a few replicas of a
/// test and the races of the tests beside it stay within the server's connections.
const REPLICA_POOL: usize = 8;

/// One engine, as a test drives it: a fresh, empty store of its own, its clock, a
/// restart.
pub(crate) trait Engine: Sized + Send + Sync + 'static {
    /// The engine's store: the receiver, and the layers after the key.
    type Store: Receiver + Entities + Tokens;

    /// What the engine calls itself in its messages ("the store already holds ...").
    const HOLDS: &'static str;

    /// Whether every value the generation counter passes is handed out to a claim (the
    /// file's counter), or a begin may spend one it hands out to nobody (PostgreSQL's
    /// sequence: a begin's `INSERT … ON CONFLICT` draws `nextval` before it meets the
    /// row that is there, so a replay or a claim of a key with a row spends one). Both
    /// rise strictly and never reuse a value, which is what the protocol promises
    /// (docs/design.md §2, "Generation"); a gapless counter is also held to its exact
    /// numbers ([`crate::assert_next_generation`]).
    const GAPLESS_GENERATIONS: bool;

    /// How far before a deadline a test waits to be sure it is still before it: 0 where
    /// time is the caller's (the file: one ms before a token's ttl is before it); on
    /// PostgreSQL the database's clock runs on between two calls of a test, so a test
    /// stays a few seconds short.
    const MARGIN_MS: u64;

    /// A fresh, empty store with `config`. Each call makes another one (a file in a
    /// directory of its own; a database of its own).
    fn open(config: Config) -> impl Future<Output = Self>;

    /// The store. After [`Engine::pass`] or [`Engine::restart`], take it again.
    fn store(&self) -> &Self::Store;

    /// The store, for tasks of the test's own.
    fn shared(&self) -> Arc<Self::Store>;

    /// Another store on the same data, as another replica of a fleet holds it: a
    /// `PgStore` of its own on the test's database; on the file, the one store (a file
    /// is held by one process at a time). After [`Engine::pass`], take it again.
    fn replica(&self) -> impl Future<Output = Arc<Self::Store>>;

    /// The `now` a caller passes to the store's inputs.
    fn now(&self) -> Timestamp;

    /// The time the engine writes with at this moment: the caller's `now` on the file,
    /// the database's clock on PostgreSQL. A write made between two readings carries a
    /// time between them.
    fn clock(&self) -> impl Future<Output = Timestamp>;

    /// `ms` pass: the caller's `now` moves on, and so does the database's clock.
    fn pass(&mut self, ms: u64) -> impl Future<Output = ()>;

    /// The store is closed and opened again on the same data (the process restarts).
    fn restart(&mut self) -> impl Future<Output = ()>;

    /// The engine's own check of what it stores, where it has one (the file's
    /// [`Store::check`]: indexes agree with records); panics on a finding.
    fn check_integrity(&self);
}

/// The redb file, in a temporary directory.
pub(crate) struct File {
    /// `None` only while it restarts.
    store: Option<Arc<Store>>,
    config: Config,
    now: Timestamp,
    /// Removed after the store is dropped (fields drop in order).
    dir: tempfile::TempDir,
}

impl File {
    fn open_at(dir: &tempfile::TempDir, config: &Config) -> Arc<Store> {
        let store = Store::builder()
            .config(config.clone())
            .open(dir.path().join("idem.redb"))
            .unwrap();
        Arc::new(store)
    }
}

impl Engine for File {
    type Store = Store;
    const HOLDS: &'static str = "the store";
    const GAPLESS_GENERATIONS: bool = true;
    const MARGIN_MS: u64 = 0;

    async fn open(config: Config) -> File {
        let dir = tempfile::tempdir().unwrap();
        File {
            store: Some(File::open_at(&dir, &config)),
            config,
            now: Timestamp(T0),
            dir,
        }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open")
    }

    fn shared(&self) -> Arc<Store> {
        Arc::clone(self.store.as_ref().expect("the store is open"))
    }

    async fn replica(&self) -> Arc<Store> {
        self.shared()
    }

    fn now(&self) -> Timestamp {
        self.now
    }

    async fn clock(&self) -> Timestamp {
        self.now
    }

    async fn pass(&mut self, ms: u64) {
        self.now = self.now.plus_millis(ms);
    }

    async fn restart(&mut self) {
        let store = self.store.take().expect("the store is open");
        let store = Arc::into_inner(store).expect("no task of the test holds the store");
        drop(store);
        self.store = Some(File::open_at(&self.dir, &self.config));
    }

    fn check_integrity(&self) {
        let found = self.store().check().unwrap();
        assert!(found.is_ok(), "{found:?}");
    }
}

/// A database of its own on a throwaway PostgreSQL server, whose clock the test moves.
pub(crate) struct Postgres {
    /// `None` only while it reconnects.
    store: Option<Arc<PgStore>>,
    config: Config,
    /// The test's database.
    url: String,
    /// A plain connection to the test's database, for its clock.
    db: tokio_postgres::Client,
    /// How far the database's clock was moved on.
    offset: u64,
    /// Stopped once the last test that uses it is done (fields drop in order).
    _server: Arc<Server>,
}

impl Postgres {
    async fn connect(&self) -> Arc<PgStore> {
        self.connect_with(POOL).await
    }

    /// A store on the test's database with room for `pool` connections.
    async fn connect_with(&self, pool: usize) -> Arc<PgStore> {
        let store = PgStore::builder()
            .config(self.config.clone())
            .pool_size(pool)
            .connect(&self.url)
            .await
            .unwrap();
        Arc::new(store)
    }

    /// The store is connected again: a replica that restarts.
    async fn reconnect(&mut self) {
        let store = self.store.take().expect("the store is connected");
        let store = Arc::into_inner(store).expect("no task of the test holds the store");
        drop(store);
        self.store = Some(self.connect().await);
    }
}

impl Engine for Postgres {
    type Store = PgStore;
    const HOLDS: &'static str = "the database";
    const GAPLESS_GENERATIONS: bool = false;
    const MARGIN_MS: u64 = 5_000;

    async fn open(config: Config) -> Postgres {
        static DATABASES: AtomicU32 = AtomicU32::new(0);
        let server = shared_server();
        let name = format!("conformance_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
        let admin = client_of(&server.url()).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = format!("postgres://postgres@127.0.0.1:{}/{name}", server.port());
        let db = client_of(&url).await;
        let mut h = Postgres {
            store: None,
            config,
            url,
            db,
            offset: 0,
            _server: server,
        };
        h.store = Some(h.connect().await);
        h
    }

    fn store(&self) -> &PgStore {
        self.store.as_ref().expect("the store is connected")
    }

    fn shared(&self) -> Arc<PgStore> {
        Arc::clone(self.store.as_ref().expect("the store is connected"))
    }

    async fn replica(&self) -> Arc<PgStore> {
        self.connect_with(REPLICA_POOL).await
    }

    /// Not used by the engine; a test's clock all the same, moved as the database's is.
    fn now(&self) -> Timestamp {
        Timestamp(T0 + self.offset)
    }

    async fn clock(&self) -> Timestamp {
        let row = self.db.query_one("SELECT idem_now()", &[]).await.unwrap();
        Timestamp(u64::try_from(row.get::<_, i64>(0)).unwrap())
    }

    async fn pass(&mut self, ms: u64) {
        self.offset += ms;
        // The schema's own definition, plus the offset (connecting again keeps it: the
        // schema is applied only to a database without it).
        self.db
            .batch_execute(&format!(
                "CREATE OR REPLACE FUNCTION idem_now() RETURNS bigint LANGUAGE sql STABLE \
                   AS $$ SELECT (extract(epoch FROM now()) * 1000)::bigint + {} $$",
                self.offset
            ))
            .await
            .unwrap();
        self.reconnect().await;
    }

    async fn restart(&mut self) {
        self.reconnect().await;
    }

    /// The database keeps its own tables consistent: nothing to check beside it.
    fn check_integrity(&self) {}
}

/// The server the PostgreSQL tests of this process share while any runs: started by the
/// first, stopped when the last one holding it is done (a later test starts another).
/// Each test has a database of its own on it, which costs a fraction of a server's start.
fn shared_server() -> Arc<Server> {
    static SERVER: Mutex<Weak<Server>> = Mutex::new(Weak::new());
    let mut held = SERVER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = held.upgrade() {
        return server;
    }
    let server = Arc::new(Server::start());
    *held = Arc::downgrade(&server);
    server
}

/// A plain client of the database at `url`.
async fn client_of(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ended = connection.await;
    });
    client
}

/// A database of its own on a throwaway MariaDB server, whose clock the test moves as
/// the PostgreSQL harness does: `idem_now()` is replaced by the server's clock plus an
/// offset, and the store connects again.
#[cfg(feature = "mysql")]
pub(crate) struct MariaDb {
    /// `None` only while it reconnects.
    store: Option<Arc<idem_store::mysql::MySqlStore>>,
    config: Config,
    /// The test's database.
    url: String,
    /// A plain connection to the test's database, for its clock.
    db: tokio::sync::Mutex<mysql_async::Conn>,
    /// How far the database's clock was moved on.
    offset: u64,
    /// Stopped once the last test that uses it is done (fields drop in order).
    _server: Arc<crate::maria_server::Server>,
}

#[cfg(feature = "mysql")]
impl MariaDb {
    /// A store on the test's database with room for `pool` connections.
    async fn connect_with(&self, pool: usize) -> Arc<idem_store::mysql::MySqlStore> {
        let store = idem_store::mysql::MySqlStore::builder()
            .config(self.config.clone())
            .pool_size(pool)
            .connect(&self.url)
            .await
            .unwrap();
        Arc::new(store)
    }

    async fn reconnect(&mut self) {
        let store = self.store.take().expect("the store is connected");
        let store = Arc::into_inner(store).expect("no task of the test holds the store");
        drop(store);
        self.store = Some(self.connect_with(POOL).await);
    }
}

#[cfg(feature = "mysql")]
impl Engine for MariaDb {
    type Store = idem_store::mysql::MySqlStore;
    const HOLDS: &'static str = "the database";
    const GAPLESS_GENERATIONS: bool = false;
    const MARGIN_MS: u64 = 5_000;

    async fn open(config: Config) -> MariaDb {
        use mysql_async::prelude::Queryable;
        static DATABASES: AtomicU32 = AtomicU32::new(0);
        let server = shared_maria_server();
        let name = format!("conformance_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
        server.sql(&format!("CREATE DATABASE {name}"));
        let url = server.url_of(&name);
        let mut db = mysql_async::Conn::from_url(&url).await.unwrap();
        db.query_drop("SET time_zone = '+00:00'").await.unwrap();
        let mut h = MariaDb {
            store: None,
            config,
            url,
            db: tokio::sync::Mutex::new(db),
            offset: 0,
            _server: server,
        };
        h.store = Some(h.connect_with(POOL).await);
        h
    }

    fn store(&self) -> &idem_store::mysql::MySqlStore {
        self.store.as_ref().expect("the store is connected")
    }

    fn shared(&self) -> Arc<idem_store::mysql::MySqlStore> {
        Arc::clone(self.store.as_ref().expect("the store is connected"))
    }

    async fn replica(&self) -> Arc<idem_store::mysql::MySqlStore> {
        self.connect_with(REPLICA_POOL).await
    }

    /// Not used by the engine; a test's clock all the same, moved as the database's is.
    fn now(&self) -> Timestamp {
        Timestamp(T0 + self.offset)
    }

    async fn clock(&self) -> Timestamp {
        use mysql_async::prelude::Queryable;
        let now: Option<i64> = self
            .db
            .lock()
            .await
            .query_first("SELECT idem_now()")
            .await
            .unwrap();
        Timestamp(u64::try_from(now.unwrap()).unwrap())
    }

    async fn pass(&mut self, ms: u64) {
        use mysql_async::prelude::Queryable;
        self.offset += ms;
        // The schema's own definition, plus the offset (connecting again keeps it: the
        // schema is applied only to a database without it).
        self.db
            .lock()
            .await
            .query_drop(format!(
                "CREATE OR REPLACE FUNCTION idem_now() RETURNS BIGINT NOT DETERMINISTIC NO SQL \
                   SQL SECURITY INVOKER \
                   RETURN CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED) + {}",
                self.offset
            ))
            .await
            .unwrap();
        self.reconnect().await;
    }

    async fn restart(&mut self) {
        self.reconnect().await;
    }

    /// The database keeps its own tables consistent: nothing to check beside it.
    fn check_integrity(&self) {}
}

/// The MariaDB server the tests of this process share while any runs, as
/// [`shared_server`] for PostgreSQL.
#[cfg(feature = "mysql")]
fn shared_maria_server() -> Arc<crate::maria_server::Server> {
    static SERVER: Mutex<Weak<crate::maria_server::Server>> = Mutex::new(Weak::new());
    let mut held = SERVER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = held.upgrade() {
        return server;
    }
    let server = Arc::new(crate::maria_server::Server::start());
    *held = Arc::downgrade(&server);
    server
}

/// A Redis server of its own, whose clock the test moves as the database harnesses do:
/// idem's function library is loaded again with the server's clock plus an offset, and
/// the store connects again (it loads no library where this version's is there).
#[cfg(feature = "redis")]
pub(crate) struct Redis {
    /// `None` only while it reconnects.
    store: Option<Arc<idem_store::redis::RedisStore>>,
    config: Config,
    /// A plain connection to the server, for its clock and the library.
    db: redis::aio::MultiplexedConnection,
    /// How far the server's clock was moved on.
    offset: u64,
    /// Stopped and removed once the test is done (fields drop in order).
    server: crate::redis_server::Server,
}

#[cfg(feature = "redis")]
impl Redis {
    async fn connect(&self) -> Arc<idem_store::redis::RedisStore> {
        let store = idem_store::redis::RedisStore::builder()
            .config(self.config.clone())
            .connect(&self.server.url())
            .await
            .unwrap();
        Arc::new(store)
    }

    async fn reconnect(&mut self) {
        let store = self.store.take().expect("the store is connected");
        let store = Arc::into_inner(store).expect("no task of the test holds the store");
        drop(store);
        self.store = Some(self.connect().await);
    }
}

#[cfg(feature = "redis")]
impl Engine for Redis {
    type Store = idem_store::redis::RedisStore;
    const HOLDS: &'static str = "the server";
    const GAPLESS_GENERATIONS: bool = false;
    const MARGIN_MS: u64 = 5_000;

    async fn open(config: Config) -> Redis {
        let server = crate::redis_server::Server::start();
        let client = redis::Client::open(server.url()).unwrap();
        let db = client.get_multiplexed_async_connection().await.unwrap();
        let mut h = Redis {
            store: None,
            config,
            db,
            offset: 0,
            server,
        };
        h.store = Some(h.connect().await);
        h
    }

    fn store(&self) -> &idem_store::redis::RedisStore {
        self.store.as_ref().expect("the store is connected")
    }

    fn shared(&self) -> Arc<idem_store::redis::RedisStore> {
        Arc::clone(self.store.as_ref().expect("the store is connected"))
    }

    async fn replica(&self) -> Arc<idem_store::redis::RedisStore> {
        self.connect().await
    }

    /// Not used by the engine; a test's clock all the same, moved as the server's is.
    fn now(&self) -> Timestamp {
        Timestamp(T0 + self.offset)
    }

    async fn clock(&self) -> Timestamp {
        let mut db = self.db.clone();
        let now: u64 = redis::cmd("FCALL")
            .arg("idem_now")
            .arg(1)
            .arg("{idem}:floor")
            .query_async(&mut db)
            .await
            .unwrap();
        Timestamp(now)
    }

    async fn pass(&mut self, ms: u64) {
        self.offset += ms;
        // The library's own text, with the offset on its clock.
        let library = idem_store::redis::RedisStore::library().replacen(
            "local CLOCK_OFFSET_MS = 0",
            &format!("local CLOCK_OFFSET_MS = {}", self.offset),
            1,
        );
        assert_ne!(library, idem_store::redis::RedisStore::library());
        let _loaded: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(library)
            .query_async(&mut self.db)
            .await
            .unwrap();
        self.reconnect().await;
    }

    async fn restart(&mut self) {
        self.reconnect().await;
    }

    /// The server keeps the records and their indexes together (one function call
    /// writes both): nothing to check beside it.
    fn check_integrity(&self) {}
}
