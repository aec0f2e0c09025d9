//! [`Store`]: what a store is (its writer, group-commit queue, replay cache and config,
//! shared with the group-commit driver), how one is opened, and what every feature's
//! `impl Store` builds on: the answers a begin gets without writing.
//!
//! Every input runs in a write transaction: read the record, run the core, apply its
//! write, commit, and only then answer. A transaction whose inputs change nothing (an
//! InProgress or Replay answer, a refusal) is aborted instead, so it costs no fsync; a
//! begin that writes nothing is answered from the replay cache or a read snapshot
//! without a write transaction at all, except in the multi-process modes while batches
//! follow one another: a key the cache does not hold then joins a batch (see
//! `snapshot.rs`).

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use idem_core::protocol::Decision;
use idem_core::{Config, Fingerprint, Generation, Record, RecordId, Timestamp};
use redb::StorageBackend;

use crate::error::{Error, OpenError};
use crate::file::backend::Location;
use crate::file::cache::{Epoch, ReplayCache};
use crate::file::group::{Batches, Committer};
use crate::file::open::{Opened, StoreBuilder};
use crate::file::snapshot;
use crate::file::writer::Writer;
use crate::seam::report::CommitCounts;

/// The durable idempotency store: one redb file, shared by every thread of the process
/// (`&Store` or `Arc<Store>`) and, with the default [`redb::ConcurrencyMode::MultiWriter`],
/// by other processes that open the same file.
///
/// There are two ways to run a request once: [`Store::execute`], when the effect is a
/// write to the same file (the [crate documentation](crate) shows it), and the
/// two-phase path below, for an effect outside it. A store opened with
/// [`StoreBuilder::read_only`] reads like any other and refuses every write with
/// [`Error::ReadOnly`]. How it commits, who may share the file, time and failures are
/// in docs/store.md.
///
/// # Two-phase, for an external call
///
/// When the effect is outside the file (a payment provider, a printer), [`Store::begin`]
/// commits a Pending claim, the caller does the call, then settles with
/// [`Store::complete`], gives the key back with [`Store::release`], or, when it cannot
/// tell whether the effect happened, [`Store::mark_unknown`]s it for a reconciler, who
/// later calls [`Store::resolve`].
///
/// ```
/// use idem_store::{
///     Decision, Fingerprint, Outcome, RecordId, Resolution, State, Store, Timestamp, Verdict,
/// };
///
/// # struct Timeout;
/// # fn charge_card(_amount: u32) -> Result<String, Timeout> { Err(Timeout) }
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("terminal.redb"))?;
/// let id = RecordId::new("shop-7", "charge", "0190b7c2-sale-2")?;
/// let fingerprint = Fingerprint::of_bytes(b"amount=1250");
/// let now = Timestamp(1_700_000_000_000);
///
/// match store.begin(&id, fingerprint, now)? {
///     Decision::Claimed { generation, .. } => match charge_card(1250) {
///         Ok(receipt) => {
///             store.complete(&id, generation, Verdict::Succeeded, Outcome::new(200, receipt), now)?;
///         }
///         // The provider timed out: the card may or may not have been charged.
///         Err(Timeout) => {
///             store.mark_unknown(&id, generation, now)?;
///         }
///     },
///     Decision::Replay { outcome, .. } => println!("already done: {outcome:?}"),
///     Decision::InProgress { lease_until, .. } => println!("busy, retry after {lease_until}"),
///     Decision::Conflict { .. } => println!("this key was used for another request"),
///     Decision::NeedsReconciliation { .. } => println!("waiting for a reconciler"),
///     Decision::Forgotten { .. } => println!("done long ago; the outcome is no longer kept"),
/// }
///
/// // Every retry now answers NeedsReconciliation, until someone checks with the provider.
/// assert!(matches!(store.begin(&id, fingerprint, now)?, Decision::NeedsReconciliation { .. }));
/// let settled = store.resolve(&id, Resolution::Succeeded(Outcome::new(200, "receipt 77")), now)?;
/// assert_eq!(settled.map(|r| r.state()), Some(State::Succeeded));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Sweep and stats
///
/// Settled records are replayed until their retention ends; [`Store::sweep`] then
/// replaces each by its tombstone (what identifies the request, not its outcome), oldest
/// first, in bounded batches, and deletes the tombstone once
/// [`Config::tombstone_retention_ms`](idem_core::Config::tombstone_retention_ms) (30 days
/// by default) has passed too. Until then a late retry is answered
/// [`Decision::Forgotten`] and does not execute
/// again; with tombstones off (0) it executes again. Pending and Unknown records are
/// never swept: [`Store::stats`] shows them for alerting.
///
/// ```
/// use idem_store::{Config, Fingerprint, Outcome, RecordId, Store, Timestamp, Verdict};
///
/// let dir = tempfile::tempdir()?;
/// let config = Config { success_retention_ms: 60_000, ..Config::default() };
/// let store = Store::builder().config(config).open(dir.path().join("terminal.redb"))?;
/// for n in 0..3 {
///     let id = RecordId::new("shop-7", "credit", &format!("sale-{n}"))?;
///     let fp = Fingerprint::of_bytes(&[n]);
///     store.execute(&id, fp, Timestamp(1_000), |_| {
///         Ok::<_, std::convert::Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
///     })?;
/// }
/// let stuck = RecordId::new("shop-7", "charge", "sale-9")?;
/// store.begin(&stuck, Fingerprint::of_bytes(b"9"), Timestamp(1_000))?;
///
/// let later = Timestamp(120_000);
/// let stats = store.stats(later)?;
/// assert_eq!((stats.succeeded, stats.pending, stats.expired), (3, 1, 3));
/// assert_eq!(stats.pending_lease_expired, 1); // the executor of sale-9 went silent
/// assert_eq!(stats.oldest_pending_age_ms, Some(119_000));
///
/// let report = store.sweep(later, 2, false)?;
/// assert_eq!((report.tombstoned, report.remaining_expired), (2, true));
/// let report = store.sweep(later, 100, false)?;
/// assert_eq!((report.tombstoned, report.remaining_expired), (1, false));
/// let stats = store.stats(later)?;
/// assert_eq!((stats.forgotten, stats.pending, stats.succeeded), (3, 1, 0));
///
/// // 30 days on, the tombstones go too; the Pending record stays.
/// let much_later = Timestamp(31 * 24 * 3_600_000);
/// assert_eq!(store.sweep(much_later, 100, false)?.removed, 3);
/// assert_eq!(store.stats(much_later)?.records(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Store {
    // Shared with the group-commit driver thread, which leads the batches of tasks.
    pub(super) shared: Arc<Shared>,
}

/// Everything a store is, behind one `Arc` so that its group-commit driver can lead
/// batches for tasks (see `group/`).
pub(crate) struct Shared {
    pub(crate) writer: Writer,
    // The group-commit queue and its counters.
    pub(crate) committer: Committer,
    // Settled records in memory, for answers without a redb transaction (`cache.rs`).
    pub(crate) cache: ReplayCache,
    pub(crate) config: Config,
    // Claims whose commit failed, which the reopen may show landed: given back once
    // the store is open again (`Store::give_back_in_doubt`).
    pub(crate) in_doubt: InDoubt,
    // The free space kept for settles; `None` on a backend, read-only, or a reserve of 0.
    pub(crate) room: Option<Arc<crate::file::room::Room>>,
}

impl Batches for Shared {
    fn parts(&self) -> (&Committer, &Writer, &Config) {
        (&self.committer, &self.writer, &self.config)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // What tasks queued runs before the file closes.
        self.shared.committer.stop_driver();
    }
}

impl StoreBuilder {
    /// Opens the store file at `path`, creating it when it does not exist (unless
    /// [`StoreBuilder::read_only`]).
    ///
    /// # Errors
    ///
    /// [`OpenError`]: a directory, a read-only file, a lock held past the lock timeout, a
    /// newer schema, a corrupt file, an invalid config or contradictory options; for a
    /// read-only open, no store in the file or a file that needs recovery. In every one
    /// of these cases the file is left byte for byte as it was.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Store, OpenError> {
        self.open_file(path.as_ref()).map(Store::from_opened)
    }

    /// Opens the store kept in `backend`, a redb [`StorageBackend`] (memory, a raw flash
    /// partition, a simulated disk in a test) instead of a file, creating it when the
    /// backend is empty. Everything else works as on a file, with these differences:
    ///
    /// - The concurrency mode defaults to [`redb::ConcurrencyMode::ExclusiveWriter`]: no other
    ///   process shares a backend handed to this store. A multi-process mode
    ///   ([`StoreBuilder::concurrency`]) is accepted only for a backend that implements
    ///   redb's byte-range locks (it then commits as a store file does, in two phases);
    ///   for one that does not, the open is refused with [`OpenError::Options`].
    /// - A new store is made in place: there is no second name to build it under, so a
    ///   power cut while the first commit is written can leave an empty or a partial
    ///   redb header, which later opens refuse. Create the store before relying on it.
    /// - [`Store::path`] is `None`; [`crate::maintain::Stats::file_bytes`] is the backend's length;
    ///   [`OpenError`]s name the storage `(storage backend)` where they would name a path.
    /// - The backend is opened twice: first read-only, which writes nothing, to refuse
    ///   a newer schema or a damaged store untouched, then for writing. redb calls
    ///   [`StorageBackend::close`] after the first, so a backend's `close` must release
    ///   its locks and keep its bytes usable.
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::open`], and [`OpenError::Options`] for a multi-process mode on
    /// a backend without locks.
    pub fn open_on_backend(self, backend: impl StorageBackend) -> Result<Store, OpenError> {
        self.open_backend(Location::backend(backend, None))
            .map(Store::from_opened)
    }

    /// [`StoreBuilder::open_on_backend`], with the store's journal
    /// ([`StoreBuilder::journal`]) on a second backend: each commit appends its writes to
    /// `journal` and syncs it alone, and `backend` is synced at checkpoints. Only in
    /// [`redb::ConcurrencyMode::ExclusiveWriter`] with [`redb::Durability::Immediate`]
    /// (else [`OpenError::Options`]). The two backends belong together: an open with
    /// `backend` alone may miss the latest commits until an open with both has written
    /// them in. A read-only open with a journal that holds commits fails with
    /// [`OpenError::NeedsRecovery`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::open_on_backend`].
    pub fn open_on_backend_with_journal(
        self,
        backend: impl StorageBackend,
        journal: impl StorageBackend,
    ) -> Result<Store, OpenError> {
        self.open_backend(Location::backend(backend, Some(Arc::new(journal))))
            .map(Store::from_opened)
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("writer", &self.shared.writer)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store file at `path` with the default options: see
    /// [`StoreBuilder`].
    ///
    /// # Errors
    ///
    /// [`OpenError`]; the file is left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
        StoreBuilder::default().open(path)
    }

    /// Options for opening a store.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    fn from_opened(opened: Opened) -> Store {
        Store {
            shared: Arc::new(Shared {
                writer: Writer::new(
                    opened.handle,
                    opened.location,
                    opened.durability,
                    opened.lock_timeout,
                    opened.floored,
                    opened.alone,
                    opened.reopen,
                ),
                committer: Committer::default(),
                cache: ReplayCache::new(opened.replay_cache),
                config: opened.config,
                in_doubt: InDoubt::default(),
                room: opened.room.map(Arc::new),
            }),
        }
    }

    /// The protocol settings this store applies.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The path the store was opened from; `None` for a store on a backend
    /// ([`StoreBuilder::open_on_backend`]).
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.shared.writer.path()
    }

    /// True after a failed commit, or once the file (or backend) failed a read, a write
    /// or an fsync, until the store reopened itself: its next call reopens it
    /// ([`Store::recover`]).
    #[must_use]
    pub fn needs_reopen(&self) -> bool {
        self.shared.writer.needs_reopen()
    }

    /// Reopens the store if a commit or an I/O call failed it, as every call does first:
    /// the redb database is opened again on the same file with the options of the
    /// first open, which decides whether the failed commit's changes are there (never an
    /// answer that contradicts it: the failed call was answered with its error). Ok at
    /// once when nothing failed.
    ///
    /// # Errors
    ///
    /// [`Error::Reopening`] with the cause when the reopen fails (the disk is still
    /// full); the next try comes a pause later, 10 ms doubling to 1 s.
    /// [`Error::NeedsReopen`] for a read-only store, which does not reopen itself.
    pub fn recover(&self) -> Result<(), Error> {
        self.shared.writer.recover()
    }

    /// How many times the store reopened itself after a failure since it was opened.
    #[must_use]
    pub fn reopens(&self) -> u64 {
        self.shared.writer.reopens()
    }

    /// Why the store's last reopen failed, while it waits to try again (`None` when it
    /// is open): what a health check shows.
    #[must_use]
    pub fn reopen_failure(&self) -> Option<String> {
        self.shared.writer.reopen_failure()
    }

    /// True when the store was opened with [`StoreBuilder::read_only`]: it reads, and
    /// refuses every write with [`Error::ReadOnly`].
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.shared.writer.is_read_only()
    }

    /// A begin's answer on `id_key` when it writes nothing (replay, in progress,
    /// conflict, unknown), from the replay cache or a read snapshot
    /// ([`snapshot::begin`]); `None` when the write path must decide.
    pub(crate) fn answer_from_snapshot(
        &self,
        id_key: &[u8],
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Option<Decision>, Error> {
        snapshot::begin(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            id_key,
            fingerprint,
            now,
        )
    }

    /// A begin's answer on `id_key` when it writes nothing (replay, in progress,
    /// conflict, unknown), before the input joins a group commit: from the replay
    /// cache or a read snapshot, or, while batches follow one another in the
    /// multi-process modes, the cache alone ([`snapshot::before_batch`]); `None` when a
    /// batch must decide.
    pub(crate) fn answer_before_batch(
        &self,
        id_key: &[u8],
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Option<Decision>, Error> {
        snapshot::before_batch(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            id_key,
            fingerprint,
            now,
            // Inside a batch's work (on its leader's thread) no batch can be joined:
            // the snapshot answers, as it always did there.
            self.shared.committer.is_batching() && !self.shared.writer.writing_here(),
        )
    }

    /// The parts of this store, shared with its group-commit driver.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A begin's decision from its batch; a settled record the batch answered from
    /// without a write is kept in the replay cache, so that a retry is answered from
    /// memory (the cache keeps settled records only). `epoch` was read before the batch
    /// read the record.
    pub(crate) fn begun(
        &self,
        id_key: &[u8],
        (decision, read): (Decision, Option<Record>),
        epoch: Epoch,
    ) -> Decision {
        if let Some(record) = read {
            self.shared.cache.insert(id_key, &record, epoch);
        }
        decision
    }

    /// Keeps a record just committed by a settling input in the replay cache, so that a
    /// retry is answered from memory. `epoch` was read before the input ran.
    pub(crate) fn keep_settled(&self, id: &RecordId, record: Option<&Record>, epoch: Epoch) {
        if let Some(record) = record {
            self.shared.cache.insert(&id.to_key_bytes(), record, epoch);
        }
    }

    /// How many commits this store made since it was opened, and how group commit
    /// batched its inputs. `batched_inputs / batches` above 1 means callers shared
    /// fsyncs.
    #[must_use]
    pub fn commit_counts(&self) -> CommitCounts {
        self.shared.committer.counts(self.shared.writer.commits())
    }
}

/// Claims whose commit failed: the reopen decides whether each landed, and one that
/// did is given back (`Store::give_back_in_doubt`).
#[derive(Debug, Default)]
pub(crate) struct InDoubt {
    any: AtomicBool,
    claims: Mutex<Vec<(RecordId, Generation)>>,
}

impl InDoubt {
    pub(crate) fn add(&self, id: &RecordId, generation: Generation) {
        self.claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id.clone(), generation));
        self.any.store(true, Ordering::Release);
    }

    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    pub(crate) fn take(&self) -> Vec<(RecordId, Generation)> {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        self.any.store(false, Ordering::Release);
        std::mem::take(&mut *claims)
    }
}
