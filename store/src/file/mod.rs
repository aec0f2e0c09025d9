//! The redb engine: one durable file, for a terminal, an edge box or one server.
//!
//! [`Store`] drives idem-core's protocol inside redb write transactions. Each feature is
//! a folder or a file named for its job, as in every engine (`postgres/` too): its
//! public `impl Store` in `mod.rs`, and its `steps.rs`, what it does inside a write
//! transaction.
//!
//! ```text
//! store.rs        Store, and the answers given without a write
//! open/           opening: the builder (mod.rs), the checks of a file (checks.rs)
//! receiver.rs     impl Receiver for Store
//! two_phase/      begin, heartbeat, complete, release, mark_unknown, resolve
//! execute/        atomic execute: the key and the caller's writes in one transaction
//! entity/         entities and their version check, values claimed once
//! token/          one-time tokens
//! inbox/          a queue consumer's inbox
//! outbox/         the sender's intents in the same file
//! read/           get and list
//! write/          a plain write transaction for the application's own tables
//! reconcile/      abandoned claims, Unknown records settled by a checker
//! maintain/       sweep, stats, check, compact
//! transfer/       export and import
//! group/          group commit: concurrent inputs share one write transaction
//! snapshot.rs     answers from a read snapshot, without a writer
//! cache.rs        the replay cache of settled records
//! schema/         the tables and their byte layout, indexes, upgrades of older files
//! writer.rs       the one write transaction, handle.rs, lock.rs, wait.rs: who may write
//! journal/        the journal of an exclusive writer; backend.rs: where the bytes live
//! ```

pub(crate) mod backend;
pub(crate) mod cache;

pub(crate) mod entity;
pub(crate) mod execute;
pub(crate) mod group;
pub(crate) mod handle;
pub(crate) mod inbox;
pub(crate) mod journal;
pub(crate) mod lock;
pub(crate) mod maintain;
pub(crate) mod open;
pub(crate) mod outbox;
pub(crate) mod read;
mod receiver;
pub(crate) mod reconcile;
pub(crate) mod room;
pub(crate) mod schema;
pub(crate) mod snapshot;
pub(crate) mod store;
pub(crate) mod token;
pub(crate) mod transfer;
pub(crate) mod two_phase;
pub(crate) mod wait;
pub(crate) mod write;
pub(crate) mod writer;

pub use store::Store;

#[cfg(test)]
mod tests;
