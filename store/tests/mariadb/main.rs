//! The MariaDB engine's own tests (`--features mysql`): what it refuses at connect, each
//! with one clear error and nothing written; the bytes of its keys; many callers on one
//! key. The behaviour every engine shares is the conformance suite's
//! (`conformance::mariadb::NAME`).
//!
//! The tests start throwaway servers (`common/mariadb.rs`): without MariaDB installed
//! they fail, never skip.

#[path = "../common/mariadb.rs"]
mod server;

#[cfg(feature = "mysql-tls")]
#[path = "../common/certificates.rs"]
mod certificates;

mod cache;
mod connect;
mod crash;
mod execute;
mod failover;
mod galera;
mod import;
mod keys;
mod lost;
mod round_trips;
#[cfg(feature = "mysql-tls")]
mod tls;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use server::Server;

/// The server the tests of this binary share while any runs (a test that needs server
/// settings of its own starts its own).
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

/// A fresh, empty database on `server`: its name.
fn fresh_database(server: &Server) -> String {
    static DATABASES: AtomicU32 = AtomicU32::new(0);
    let name = format!("test_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    server.sql(&format!("CREATE DATABASE {name}"));
    name
}

/// The tables of database `db`, sorted, one per line.
fn tables(server: &Server, db: &str) -> String {
    server.sql(&format!(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = '{db}' ORDER BY table_name"
    ))
}
