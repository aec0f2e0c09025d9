//! Measurements of idem-store on this machine, and the SQLite baseline beside them.
//!
//! - [`floor`]: bare redb commits, timed: the least a store's commit on redb can take.
//! - [`io`]: bytes written, write calls and syncs per commit, counted under redb.
//! - [`measure`]: timing calls on several threads, rows of rates and latencies, the table.
//! - [`receiver`]: a fresh key and replays through the receiver seam, for the server
//!   engines' benchmarks.
//! - [`store`]: the store's own measurements, printed by `idem bench` and by the
//!   comparison harness.
//! - `sqlite` (with the `sqlite` feature): the receiver protocol on SQLite through
//!   rusqlite, for `cargo bench -p idem-bench --bench compare --features sqlite`.
//!
//! Never a dependency of idem-store: the measurements use its public API only.

pub mod floor;
pub mod io;
pub mod measure;
pub mod receiver;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod store;
