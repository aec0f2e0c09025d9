//! The durable idempotency store of idem, on redb, and on PostgreSQL for a fleet.
//!
//! A [`Store`] keeps one record per `(tenant, operation, key)` in a redb file and drives
//! the pure receiver protocol of [`idem_core::protocol`] inside redb write transactions:
//! read the record, run the core, apply its write, commit, and only then answer. With
//! the default [`redb::Durability::Immediate`], an answer is given only after its fsync.
//!
//! There are two ways to run a request once.
//!
//! # Atomic execute
//!
//! When the effect is a write to the same file (a balance, a sale, an outbox intent),
//! [`Store::execute`] claims the key, runs the caller's writes and settles the record in
//! one transaction: all of it commits, or none of it. A retry gets the stored outcome
//! and the work does not run again.
//!
//! ```
//! use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
//! use idem_store::{Executed, Store};
//! use redb::{ReadableTable, TableDefinition, WriteTransaction};
//!
//! const BALANCE: TableDefinition<&str, u64> = TableDefinition::new("shop.balance");
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("terminal.redb"))?;
//! let id = RecordId::new("shop-7", "credit", "0190b7c2-sale-1")?;
//! let fingerprint = Fingerprint::of_bytes(br#"{"account":"alice","amount":5}"#);
//!
//! let credit = |txn: &WriteTransaction| -> Result<_, redb::Error> {
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
//! let balance = store.read(|txn| -> Result<u64, redb::Error> {
//!     Ok(txn.open_table(BALANCE)?.get("alice")?.map_or(0, |v| v.value()))
//! })??;
//! assert_eq!(balance, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Two-phase, for an external call
//!
//! When the effect is outside the file (a payment provider, a printer), [`Store::begin`]
//! commits a Pending claim, the caller does the call, then settles with
//! [`Store::complete`], gives the key back with [`Store::release`], or, when it cannot
//! tell whether the effect happened, [`Store::mark_unknown`]s it for a reconciler, who
//! later calls [`Store::resolve`].
//!
//! ```
//! use idem_core::protocol::{Decision, Resolution};
//! use idem_core::{Fingerprint, Outcome, RecordId, State, Timestamp, Verdict};
//! use idem_store::Store;
//!
//! # struct Timeout;
//! # fn charge_card(_amount: u32) -> Result<String, Timeout> { Err(Timeout) }
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("terminal.redb"))?;
//! let id = RecordId::new("shop-7", "charge", "0190b7c2-sale-2")?;
//! let fingerprint = Fingerprint::of_bytes(b"amount=1250");
//! let now = Timestamp(1_700_000_000_000);
//!
//! match store.begin(&id, fingerprint, now)? {
//!     Decision::Claimed { generation, .. } => match charge_card(1250) {
//!         Ok(receipt) => {
//!             store.complete(&id, generation, Verdict::Succeeded, Outcome::new(200, receipt), now)?;
//!         }
//!         // The provider timed out: the card may or may not have been charged.
//!         Err(Timeout) => {
//!             store.mark_unknown(&id, generation, now)?;
//!         }
//!     },
//!     Decision::Replay { outcome, .. } => println!("already done: {outcome:?}"),
//!     Decision::InProgress { lease_until, .. } => println!("busy, retry after {lease_until}"),
//!     Decision::Conflict { .. } => println!("this key was used for another request"),
//!     Decision::NeedsReconciliation { .. } => println!("waiting for a reconciler"),
//!     Decision::Forgotten { .. } => println!("done long ago; the outcome is no longer kept"),
//! }
//!
//! // Every retry now answers NeedsReconciliation, until someone checks with the provider.
//! assert!(matches!(store.begin(&id, fingerprint, now)?, Decision::NeedsReconciliation { .. }));
//! let settled = store.resolve(&id, Resolution::Succeeded(Outcome::new(200, "receipt 77")), now)?;
//! assert_eq!(settled.map(|r| r.state()), Some(State::Succeeded));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Sweep and stats
//!
//! Settled records are replayed until their retention ends; [`Store::sweep`] then
//! replaces each by its tombstone (what identifies the request, not its outcome), oldest
//! first, in bounded batches, and deletes the tombstone once
//! [`Config::tombstone_retention_ms`](idem_core::Config::tombstone_retention_ms) (30 days
//! by default) has passed too. Until then a late retry is answered
//! [`Decision::Forgotten`] and does not execute
//! again; with tombstones off (0) it executes again. Pending and Unknown records are
//! never swept: [`Store::stats`] shows them for alerting.
//!
//! ```
//! use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};
//! use idem_store::Store;
//!
//! let dir = tempfile::tempdir()?;
//! let config = Config { success_retention_ms: 60_000, ..Config::default() };
//! let store = Store::builder().config(config).open(dir.path().join("terminal.redb"))?;
//! for n in 0..3 {
//!     let id = RecordId::new("shop-7", "credit", &format!("sale-{n}"))?;
//!     let fp = Fingerprint::of_bytes(&[n]);
//!     store.execute(&id, fp, Timestamp(1_000), |_| {
//!         Ok::<_, std::convert::Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
//!     })?;
//! }
//! let stuck = RecordId::new("shop-7", "charge", "sale-9")?;
//! store.begin(&stuck, Fingerprint::of_bytes(b"9"), Timestamp(1_000))?;
//!
//! let later = Timestamp(120_000);
//! let stats = store.stats(later)?;
//! assert_eq!((stats.succeeded, stats.pending, stats.expired), (3, 1, 3));
//! assert_eq!(stats.pending_lease_expired, 1); // the executor of sale-9 went silent
//! assert_eq!(stats.oldest_pending_age_ms, Some(119_000));
//!
//! let report = store.sweep(later, 2, false)?;
//! assert_eq!((report.tombstoned, report.remaining_expired), (2, true));
//! let report = store.sweep(later, 100, false)?;
//! assert_eq!((report.tombstoned, report.remaining_expired), (1, false));
//! let stats = store.stats(later)?;
//! assert_eq!((stats.forgotten, stats.pending, stats.succeeded), (3, 1, 0));
//!
//! // 30 days on, the tombstones go too; the Pending record stays.
//! let much_later = Timestamp(31 * 24 * 3_600_000);
//! assert_eq!(store.sweep(much_later, 100, false)?.removed, 3);
//! assert_eq!(store.stats(much_later)?.records(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Several threads, several processes
//!
//! A `Store` is `Send + Sync`: share it by reference or `Arc`. Reads never wait. Writes
//! take turns, one write transaction at a time: this process's threads queue on an
//! in-process gate, then the thread at the front waits for other processes.
//!
//! # Group commit
//!
//! A durable commit costs an fsync (two in the multi-process mode, which commits in two
//! phases), so one input per transaction caps a store at a few hundred inputs per
//! second on a disk whose fsync takes milliseconds. The two-phase inputs
//! ([`Store::begin`], [`Store::complete`], [`Store::heartbeat`], [`Store::release`],
//! [`Store::mark_unknown`], [`Store::resolve`]) and [`Store::execute_grouped`] therefore
//! share commits: the inputs of concurrent callers run one after the other in one write
//! transaction, which commits once, and each caller is answered after that commit, so an
//! answer still means durable. One caller's refusal, error or panic never fails another
//! caller of its batch, nor leaves writes behind. With one caller this is one input per
//! transaction, as before. [`Store::execute`] keeps a transaction of its own (its work
//! may borrow from the caller's stack); [`Store::commit_counts`] shows how inputs were
//! grouped. A begin on a key that is settled, in progress, in conflict or unknown is
//! answered from the replay cache or a read snapshot, without waiting for any writer;
//! while batches follow one another in the multi-process modes, a key the cache does
//! not hold joins the next batch instead and is answered by it, waiting as a write
//! does, and a settled record is kept in the cache for the next retry.
//!
//! Several processes may open the same file: the terminal application keeps its `Store`
//! open while the `idem` CLI opens the file, runs one command and exits. The store opens
//! redb in [`redb::ConcurrencyMode::MultiWriter`] (redb 4.5+), redb's real multi-process
//! mode: every process reads at any time, and writes take turns across all processes.
//! A write waits at most the lock timeout ([`StoreBuilder::lock_timeout`], 5 s by
//! default), counted from the call, then fails with [`Error::Busy`]; opening waits as
//! long for a process that holds the file exclusively (an older redb, a tool in
//! [`redb::ConcurrencyMode::ExclusiveWriter`]), then fails with [`OpenError::Locked`].
//! Opening also waits for a write transaction that is running in another process, since
//! redb opens under the write lock; the store keeps its own transactions short (one
//! input each, an `execute` closure being the caller's to keep short).
//!
//! Writes are not served in the order they started waiting: a process writing back to
//! back can keep another process's write waiting through several of its transactions
//! (a waiting process tries for the lock every millisecond); the lock timeout bounds
//! that wait.
//!
//! Every process sharing a file must use the same mode. A process that needs
//! [`redb::Durability::None`] must use [`redb::ConcurrencyMode::ExclusiveWriter`], and
//! then has the file to itself.
//!
//! A process that has the file to itself ([`redb::ConcurrencyMode::ExclusiveWriter`],
//! with the default durability) commits through a journal, `<file>-journal`
//! ([`StoreBuilder::journal`]): each commit appends its pages there and syncs the journal
//! alone, one contiguous write instead of redb's scattered pages, and the file is
//! synced at checkpoints. Every writable open, in any mode, first writes what a crash
//! left in the journal into the file (a read-only open asks for that open first).
//!
//! # Reading without writing
//!
//! A store opened with [`StoreBuilder::read_only`] reads through a read-only redb handle:
//! it answers every read ([`Store::get`], [`Store::list`], [`Store::stats`],
//! [`Store::export`], a dry-run [`Store::sweep`]) with the latest commit of every process,
//! changes no byte of the file, works on a read-only file or mount, and opens next to the
//! processes writing the file without waiting for them. Every write, and
//! [`Store::check`], is refused with [`Error::ReadOnly`]. A writable open, by contrast,
//! writes redb's header even when nothing is committed, and verifies the whole file
//! under the write lock ([`StoreBuilder::verify_on_open`]).
//!
//! # The file
//!
//! The store's tables are named `idem.*` (see the layout in the source of
//! `engine/tables/mod.rs`);
//! the application may keep its own tables in the same file under other names. Every
//! key and value is our own byte string (records are a format-version byte plus
//! postcard); one index table holds the records' expiry and state indexes, their counts
//! by state, the store-wide generation counter, which only ever increases, across
//! restarts and imports, and the clock floor; a meta table holds the schema version.
//! Files of older schemas are upgraded by the first writable open and read as they are
//! by a read-only one. While a process has the file open exclusively, and after it
//! crashed until the next writable open, the journal beside the file holds commits the
//! file may not: the two belong together. A closed store's journal holds nothing.
//!
//! The same store can live on any redb [`redb::StorageBackend`] instead of a file (memory,
//! a raw flash partition, a simulated disk in a test): see
//! [`StoreBuilder::open_on_backend`] for what differs.
//!
//! # Time
//!
//! Every time is the caller's `now`, but a store never lets it go backwards for its
//! records: it keeps a clock floor, the latest time a write of a record used, and a
//! write whose `now` is behind it uses the floor instead ([`Store::clock_floor`]). A
//! terminal whose clock jumped back therefore settles outcomes at the time of its last
//! write at the latest: they can expire early only by the time between that write and
//! the jump, plus the time the clock stays behind (so a retention must cover the
//! longest gap between writes and the clock's error, docs/design.md §2). A sweep reads the
//! floor but does not raise it. Answers that write nothing
//! (a replay, an in-progress answer) use the caller's `now` as given: a clock behind the
//! floor only keeps an outcome or a lease a little longer. The outbox's intents take
//! the caller's time as given: a sender's deadline counted from a raised time could be
//! later than the true one; only the time of an expired intent's resolution is never
//! behind the floor ([`outbox::Outbox::resolve`]). A file with a newer
//! schema, a damaged file, a read-only file, a directory and a file locked past the
//! timeout are refused with an [`OpenError`] naming the cause, and left untouched.
//!
//! # When a commit or the disk fails
//!
//! redb requires a database whose commit failed to be reopened before it writes again,
//! and it stops using a storage that failed a read, a write or an fsync anywhere (in a
//! commit, while a transaction grows the file, during a compaction). The store does not
//! hide that: the call that met the failure returns an error ([`Error::CommitFailed`],
//! [`Error::Storage`], or for [`Store::execute`] the work's own error when the failure
//! met its writes), never an answer; [`Store::needs_reopen`] is then true, and every
//! later write, and every begin, returns [`Error::NeedsReopen`] until the `Store` is
//! dropped and opened again. A read answers from what redb still holds in memory, or
//! returns [`Error::NeedsReopen`] too. Whether the failed call's changes are durable is
//! known only after the reopen; every answer given before it is.
//!
//! # The receiver seam, PostgreSQL (feature `postgres`), and HTTP (feature `http`)
//!
//! [`Receiver`] is what the HTTP layer, `idem proxy`, the reconciler and the operator
//! need of a store, as one trait; [`Store`] implements it, and so does
//! `postgres::PgStore`, the engine for a fleet of receivers sharing one PostgreSQL
//! database (docs/postgres.md). Its inputs are futures: a
//! caller on an async runtime waits for its commit without holding a thread, and a
//! begin whose future is dropped gives back the claim nobody received.
//!
//! `http` is a tower layer over any [`Receiver`] that gives an HTTP service (hyper,
//! axum) idempotency keys per draft-ietf-httpapi-idempotency-key-header, with the pure
//! mapping of `idem_core::http`; `idem proxy` runs it in front of any backend. Off by
//! default: the store alone pulls in no HTTP crate.
//!
//! # Features of the API
//!
//! Beside [`Store`], each family has a module: [`entity`] (state machines with a version
//! check, business uniqueness), [`token`] (one-time tokens), [`inbox`] (a queue
//! consumer's inbox), [`outbox`] (the sender's intents in the same file), [`maintain`]
//! (sweep, stats, check, reconcile, export and import, with their reports) and `http`.
//!
//! # Layers of the source
//!
//! Each layer uses only the ones below it; no module imports one that imports it
//! (`scripts/module-cycles.py` checks this in the test command).
//!
//! ```text
//! lib.rs            the crate's documentation and public surface
//! http/             the tower layer over any Receiver: mod.rs (Settings, the layer),
//!                   service.rs (the service and the claim it settles)
//! api/              the public face; each feature's `impl Store` in a file of its own:
//!                   store.rs (Store, opening it, the answers without a write),
//!                   two_phase.rs, execute.rs, entity.rs, token.rs, inbox.rs, outbox.rs,
//!                   reconcile.rs, read.rs, maintain.rs, transfer.rs, receiver.rs
//!                   (impl Receiver for Store), tests.rs
//! receiver.rs       the seam: the Receiver trait, over the reports it returns
//! running.rs        background work counted, for a server to wait for before it exits
//!                   (features `http`, `postgres`)
//! operator/         the reads and maintenance over every table: read.rs (get, list),
//!                   maintain.rs (sweep, stats, check, compact), transfer.rs (export,
//!                   import), view/ (a record as JSON)
//! protocol/         the paths an input runs: two_phase.rs (the steps), execute.rs
//!                   (atomic execute, one implementation for every path), group/ (group
//!                   commit: mod.rs the queue and its leaders, jobs.rs the inputs,
//!                   failed.rs the answers of a failed batch),
//!                   snapshot.rs (answers from a read snapshot), entity.rs, token.rs,
//!                   inbox.rs, reconcile.rs (the reconciler's steps), outbox/ (mod.rs,
//!                   tables.rs, view.rs)
//! engine/           redb: open/ (mod.rs the builder, checks.rs), backend.rs (where the
//!                   bytes live), journal/ (mod.rs, record.rs, recover.rs), writer.rs
//!                   (the one write transaction), tables/ (mod.rs the layout, index.rs,
//!                   write.rs, upgrade.rs), cache.rs (the replay cache), handle.rs,
//!                   lock.rs, wait.rs, clock.rs
//! postgres/         the PostgreSQL engine (feature `postgres`), beside api/ and on the
//!                   same seam: mod.rs (PgStore, its builder, connecting), receiver.rs
//!                   (impl Receiver for PgStore), steps.rs (the protocol's steps as
//!                   statements), execute.rs (atomic execute), entity.rs (entities and
//!                   claimed values), token.rs (one-time tokens), inbox.rs, intent.rs
//!                   (outbox intents an import carries), maintain.rs
//!                   (list, stats, sweep, reconcile), transfer.rs (export, import),
//!                   cache.rs (a replica's replay and entity caches), statements.rs,
//!                   row.rs (a record as a row), pool.rs, schema.rs and schema.sql
//! error.rs          the error of each operation, and of a JSON view; used by every layer
//! ```

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
#[cfg(feature = "postgres")]
pub mod postgres;
mod seam;

pub use error::{Error, ExecuteError, ImportError, MaintainError, OpenError};
pub use file::Store;
pub use file::clock::now;
pub use file::open::StoreBuilder;
pub use seam::filter::ListFilter;
pub use seam::receiver::{GiveUp, Receiver};
pub use seam::report::{CommitCounts, Executed};

pub mod entity {
    //! The layers after the key (docs/design.md §8): entities moved by a state machine
    //! with a version check ([`crate::Store::transition_in`]), and business uniqueness
    //! that outlives retention ([`crate::Store::claim_unique_in`]).

    pub use crate::seam::entity::{Entities, EntityId, Uniqueness};
    pub use idem_core::{Entity, EntityDecision, Machine, MachineError, MachineSpec};
}

pub mod token {
    //! One-time tokens (docs/design.md §9): the right to do something once,
    //! handed out by the server. [`crate::Store::issue_token`] issues one (idempotently per
    //! intent id), [`crate::Store::consume`] and [`crate::Store::consume_execute`] use it
    //! once, [`crate::Store::sweep_tokens`] deletes expired ones.

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
    //! their key until a definitive answer. [`crate::Store::outbox`] gives the [`Outbox`].

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

// The core types that the store's own signatures take and return, so that an
// application may depend on idem-store alone; each feature module re-exports those of
// its own signatures.
pub use idem_core::{
    Config, Decision, Fingerprint, Generation, IdError, LeaseExpiry, Outcome, Record, RecordId,
    Refusal, Resolution, State, Status, Timestamp, Verdict,
};

/// The redb version this store is built on, for the application's own tables in the
/// same file and the transaction [`Store::execute`] hands to its work.
pub use redb;
