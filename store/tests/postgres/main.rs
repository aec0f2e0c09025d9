//! What only the PostgreSQL engine does, on real servers: crashes, schema, TLS, round trips,
//! the layers after the key inside a caller's transaction, moving a file's records in and out.
//! Each test starts its own throwaway server (`common/postgres.rs`), so without PostgreSQL
//! installed these tests fail, never skip. (The protocol, entities, claimed values and tokens
//! through the seam are the conformance suite's.)

#[path = "../common/postgres.rs"]
mod server;

#[path = "../common/machines.rs"]
mod machines;

#[path = "../common/child.rs"]
mod child;

#[cfg(feature = "http")]
#[allow(dead_code, unreachable_pub)] // its `main` is the example's own entry point
#[path = "../../examples/axum.rs"]
mod axum_example;
mod crash;
mod entities;
mod execute;
mod inbox;
#[cfg(feature = "http")]
mod layer;
mod lost;
mod protocol;
mod round_trips;
mod schema;
#[cfg(feature = "postgres-tls")]
mod tls;
mod tokens;
mod transfer;

use idem_core::{Config, Fingerprint, RecordId};
use idem_store::postgres::PgStore;

pub use server::Server;

/// The id of `key` under one tenant and operation.
pub fn id(key: &str) -> RecordId {
    RecordId::new("shop", "charge", key).unwrap()
}

/// The fingerprint of `text`.
pub fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

/// A store on `server` with `config` and room for `pool` connections.
pub async fn store(server: &Server, config: Config, pool: usize) -> PgStore {
    PgStore::builder()
        .config(config)
        .pool_size(pool)
        .connect(&server.url())
        .await
        .unwrap()
}

/// `n` stores on `server`'s database, as replicas of a fleet, each with `pool`
/// connections.
pub async fn replicas(server: &Server, n: usize, pool: usize) -> Vec<PgStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        stores.push(
            PgStore::builder()
                .pool_size(pool)
                .connect(&server.url())
                .await
                .unwrap(),
        );
    }
    stores
}

/// A plain client of `server`, for what a test reads or crafts behind the engine.
pub async fn client(server: &Server) -> tokio_postgres::Client {
    client_of(&server.url()).await
}

/// The axum example (the tower layer) on a database: runs once, replays, refuses a
/// reused key, as on a file.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_example_runs_on_a_database() {
    let server = Server::start();
    let statuses = axum_example::run_on_postgres(&server.url()).await.unwrap();
    assert_eq!(statuses, [201, 201, 422]);
}

/// A database opened by its URL (`AnyStore`) is the PostgreSQL engine behind the seam,
/// and refuses by name what only a file offers, reading and writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_opens_the_database_and_a_files_own_calls_are_refused_by_name() {
    use idem_store::Receiver;
    use idem_store::any::AnyStore;

    let server = Server::start();
    let mut store = AnyStore::open(server.url()).await.unwrap();
    assert_eq!(store.engine(), "postgres");
    let decision = store
        .begin(&id("k-1"), fp("1"), idem_core::Timestamp(0))
        .await;
    assert!(
        matches!(decision, Ok(idem_core::protocol::Decision::Claimed { .. })),
        "{decision:?}"
    );
    for what in ["check", "outbox"] {
        match store.file(what) {
            Err(idem_store::Error::Unsupported {
                what: refused,
                engine,
                ..
            }) => {
                assert_eq!((refused, engine), (what, "postgres"));
            }
            other => panic!("{other:?}"),
        }
    }
    let refused = store.file_mut("compact").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "compact: the postgres engine does not offer it; it is a store file's (--db PATH)"
    );
}

/// A plain client of the database at `url`.
pub async fn client_of(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ended = connection.await;
    });
    client
}

/// The URL of database `name` on `server`.
pub fn url_of(server: &Server, name: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{}/{name}", server.port())
}
