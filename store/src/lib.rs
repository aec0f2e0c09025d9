//! The durable idempotency store of idem: the receiver protocol of [`idem_core`] on an
//! engine that keeps its records, behind one seam, with the tower layer on top.
//!
//! A record lives under `(tenant, operation, key)`. The first `begin` with a key claims
//! it and gets a generation (a fencing token); every other request with that key is
//! answered without executing: replay, in progress, conflict, unknown or forgotten
//! (docs/design.md §2). An engine reads a record, hands it to the core, and applies the
//! write the core returns, in one transaction or as a write conditioned on what it read;
//! no engine decides a rule of its own.
//!
//! # Engines, and one way in
//!
//! - [`Store`]: one redb file, for a terminal, an edge box or one server
//!   (docs/store.md). It also runs a caller's own writes to the same file in the
//!   key's transaction ([`Store::execute`]), and keeps the sender's [`outbox`].
//! - `postgres::PgStore` (feature `postgres`): one PostgreSQL database shared by a fleet
//!   of receivers (docs/postgres.md).
//! - `mysql::MySqlStore` (feature `mysql`): the same on one MariaDB database
//!   (docs/mariadb.md).
//! - `redis::RedisStore` (feature `redis`): the same on one Redis server, each write a
//!   function library's compare-and-set (docs/redis.md); no atomic execute there.
//!
//! [`any::AnyStore`] opens the engine that what the user gives names (`terminal.redb`,
//! `postgres://…`, `mysql://…`, `redis://…`) behind one type; [`any::BlockingStore`] is the same for a caller
//! without an async runtime. The `idem` CLI and `idem proxy` open every store that way.
//!
//! # The seam
//!
//! Every engine offers the same traits, so the HTTP layer, `idem proxy`, the reconciler
//! and the operator are written once:
//!
//! - [`Receiver`]: the protocol's inputs (begin, heartbeat, complete, release,
//!   mark unknown, resolve), the reads, and the operator's work (stats, sweep,
//!   abandoned claims, reconcile, export, import), with the reports of [`maintain`];
//! - [`entity::Entities`]: entities moved by a state machine with a version check, and
//!   business values claimed once (docs/design.md §8);
//! - [`token::Tokens`]: one-time tokens (docs/design.md §9).
//!
//! Running a caller's own writes in the key's transaction (`execute`, the [`inbox`],
//! `transition_in`, `consume_execute`) is each engine's own, since the transaction is:
//! an engine without one does not offer them, by type. Every engine passes one
//! conformance suite (`store/tests/conformance/`).
//!
//! # On a file
//!
//! When the effect is a write to the same file (a balance, a sale, an outbox intent),
//! [`Store::execute`] claims the key, runs the caller's writes and settles the record in
//! one transaction: all of it commits, or none of it. A retry gets the stored outcome
//! and the work does not run again.
//!
//! ```
//! use idem_store::redb::{ReadableTable, TableDefinition, WriteTransaction};
//! use idem_store::{Executed, Fingerprint, Outcome, RecordId, Store, Timestamp, Verdict};
//!
//! const BALANCE: TableDefinition<&str, u64> = TableDefinition::new("shop.balance");
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("terminal.redb"))?;
//! let id = RecordId::new("shop-7", "credit", "0190b7c2-sale-1")?;
//! let fingerprint = Fingerprint::of_bytes(br#"{"account":"alice","amount":5}"#);
//!
//! let credit = |txn: &WriteTransaction| -> Result<_, idem_store::redb::Error> {
//!     let mut balance = txn.open_table(BALANCE)?;
//!     let new = balance.get("alice")?.map_or(0, |v| v.value()) + 5;
//!     balance.insert("alice", new)?;
//!     Ok((Verdict::Succeeded, Outcome::new(200, format!("balance {new}")), new))
//! };
//!
//! let first = store.execute(&id, fingerprint, Timestamp(1_000), credit)?;
//! assert!(matches!(first, Executed::Ran { value: 5, .. }));
//!
//! // The client timed out and retries the same intent: the outcome is replayed.
//! let retry = store.execute(&id, fingerprint, Timestamp(2_000), credit)?;
//! assert!(matches!(retry, Executed::NotRun(_)));
//! assert_eq!(retry.outcome(), first.outcome());
//!
//! let balance = store.read(|txn| -> Result<u64, idem_store::redb::Error> {
//!     Ok(txn.open_table(BALANCE)?.get("alice")?.map_or(0, |v| v.value()))
//! })??;
//! assert_eq!(balance, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `http` (feature `http`) is a tower layer over any [`Receiver`] that gives an HTTP
//! service idempotency keys per draft-ietf-httpapi-idempotency-key-header.
//!
//! # Layers of the source
//!
//! Each layer uses only the ones below it; no module imports one that imports it, no
//! engine imports another, and the seam imports no engine (`scripts/module-cycles.py`
//! checks all three in the test command).
//!
//! ```text
//! lib.rs      the crate's documentation and public surface (the feature modules)
//! http/       the tower layer over any Receiver: mod.rs (Settings, the layer),
//!             service.rs (the service and the claim it settles)
//! any/        one way in: mod.rs (AnyStore, opened by what the target names),
//!             receiver.rs (the seam's traits, on the engine opened), blocking.rs
//! file/       the redb engine; its own layer map is in file/mod.rs
//! postgres/   the PostgreSQL engine (feature `postgres`); its map is in postgres/mod.rs
//! seam/       the floor under every engine: receiver.rs (Receiver), entity.rs
//!             (Entities, EntityId), token.rs (Tokens), report.rs (what the calls
//!             return), filter.rs (ListFilter), transfer/ (the export format, the JSON
//!             views of a record and an intent), reconcile.rs (the reconciler's rules,
//!             once), clock.rs (now), poll.rs, running.rs (background work counted)
//! error.rs    the error of each operation; used by every layer
//! ```
//!
//! Both engines lay out their features under the same names: `receiver`, `two_phase`,
//! `execute`, `entity`, `token`, `inbox`, `maintain`, `transfer`, `cache`, and the
//! schema (`file/schema/`, `postgres/schema.rs`).

// A test-only switch never ships: whatever unified it into a release build, the build
// fails instead of linking it.
#[cfg(all(feature = "test-unfloored-clock", not(debug_assertions)))]
compile_error!(
    "idem-store: the feature test-unfloored-clock is test-only and is refused in a release build"
);

pub mod any;
mod error;
mod file;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
mod seam;

pub use error::{Error, ExecuteError, ImportError, MaintainError, OpenError, WriteError};
pub use file::Store;
pub use file::open::StoreBuilder;
pub use seam::clock::now;
pub use seam::filter::ListFilter;
pub use seam::receiver::{GiveUp, Receiver};
pub use seam::report::{CommitCounts, Executed};

pub mod entity {
    //! The layers after the key (docs/design.md §8): entities moved by a state machine
    //! with a version check, and business uniqueness that outlives retention. Every
    //! engine offers them as [`Entities`], each call committing on its own; inside the
    //! key's transaction, with the caller's writes, each engine has its own
    //! (`transition_in` and `claim_unique_in`: [`crate::Store::transition_in`] on a file).

    pub use crate::seam::entity::{Entities, EntityId, Uniqueness};
    pub use idem_core::{Entity, EntityDecision, Machine, MachineError, MachineSpec};
}

pub mod token {
    //! One-time tokens (docs/design.md §9): the right to do something once, handed out
    //! by the server. Every engine offers them as [`Tokens`]: `issue_token` issues one
    //! (idempotently per intent id), `consume` uses it once, `sweep_tokens` deletes
    //! expired ones; `consume_execute` ([`crate::Store::consume_execute`] on a file) uses
    //! it in the transaction of the caller's own writes.

    pub use crate::seam::report::Consumed;
    pub use crate::seam::token::Tokens;
    pub use idem_core::token::{Issue, TOKEN_LEN};
    pub use idem_core::{IssuedToken, Token, TokenError, TokenRefusal};
}

pub mod inbox {
    //! The consumer inbox of an at-least-once queue (docs/design.md §9):
    //! [`crate::Store::inbox`] gives a consumer's [`Inbox`], whose [`Inbox::handle`] runs a
    //! message's handler once, however often it is delivered.

    pub use crate::file::inbox::steps::Inbox;
    pub use crate::seam::report::Handled;
}

pub mod outbox {
    //! The sender's outbox (docs/design.md §3): intents kept in the store's own
    //! file, created in the same transaction as the business write, sent and retried with
    //! their key until a definitive answer. [`crate::Store::outbox`] gives the [`Outbox`];
    //! a [`Sender`] drains it through the application's [`Transport`] (or, with the
    //! feature `sender-http`, `HttpTransport`).

    #[cfg(feature = "sender-http")]
    pub use crate::file::outbox::http::HttpTransport;
    pub use crate::file::outbox::sender::{
        Drained, NoReply, Sender, Transport, key_header, retry_after,
    };
    pub use crate::file::outbox::{EnqueueError, IntentFilter, Outbox, OutboxError};
    pub use crate::seam::transfer::intent::IntentView;
    pub use idem_core::{
        Attempt, Effect, Intent, IntentState, LedgerConfig, LedgerConfigError, LedgerError, Reply,
        ResolvedAs,
    };
}

pub mod maintain {
    //! The operator's work (docs/design.md §4, §11): sweep, stats, check and
    //! compact, the reconciler, export and import, and the JSON view of a record, with
    //! the reports each returns.

    pub use crate::error::ViewError;
    pub use crate::file::maintain::steps::CheckReport;
    pub use crate::seam::report::{
        Abandoned, Check, IntentCounts, ReconcileError, ReconcileReport, Stats, SweepReport,
        Transferred,
    };
    pub use crate::seam::transfer::view::{RecordView, record_json};
}

/// The README's Rust blocks, compiled as written: the terminal's quick start against
/// the API it shows (the service's is a part of `examples/axum.rs`, which runs whole).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeQuickStart;

// The core types that the store's own signatures take and return, so that an
// application may depend on idem-store alone; each feature module re-exports those of
// its own signatures.
pub use idem_core::{
    Config, Decision, Fingerprint, Generation, IdError, LeaseExpiry, Outcome, Record, RecordId,
    Refusal, Resolution, State, Status, Terms, Timestamp, Verdict,
};

/// The redb version this store is built on, for the application's own tables in the
/// same file and the transaction [`Store::execute`] hands to its work.
pub use redb;
