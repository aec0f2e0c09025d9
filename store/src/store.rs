//! [`Store`]: the whole public API of idem-store, each method a short delegation to the
//! module that does the work.
//!
//! The layers below, each depending only on the ones after it:
//!
//! - features: `two_phase.rs` (the protocol inputs as steps), `group/` (group commit,
//!   which runs them), `execute.rs` (atomic execute, one implementation for both
//!   paths), `snapshot.rs` (answers from a read snapshot), `read.rs`, `maintain.rs`,
//!   `transfer.rs`, `outbox.rs`;
//! - `writer.rs`: the redb handle, the write lock, durability and the failed-commit
//!   state;
//! - `tables.rs`, `handle.rs`, `lock.rs`, `wait.rs`, `cache.rs`: the file layout, the
//!   redb database, the bounded waits and the replay cache.
//!
//! Every input runs in a write transaction: read the record, run the core, apply its
//! write, commit, and only then answer. A transaction whose inputs change nothing (an
//! InProgress or Replay answer, a refusal) is aborted instead, so it costs no fsync; a
//! begin that writes nothing is answered from the replay cache or a read snapshot
//! without a write transaction at all, except in the multi-process modes while batches
//! follow one another: a key the cache does not hold then joins a batch (see
//! `snapshot.rs`).

use std::fmt;
use std::io::{BufRead, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use idem_core::machine::{Entity, EntityDecision, Machine};
use idem_core::protocol::{Decision, Resolution};
use idem_core::token::Issue;
use idem_core::{
    Config, Fingerprint, Generation, IssuedToken, LeaseExpiry, LedgerConfig, LedgerConfigError,
    Outcome, Record, RecordId, State, Timestamp, Verdict,
};
use redb::{ReadTransaction, StorageBackend, WriteTransaction};

use crate::backend::Location;
use crate::cache::ReplayCache;
use crate::entities::{self, EntityId, Uniqueness};
use crate::error::{Error, ExecuteError, ImportError, MaintainError, OpenError};
use crate::execute::{self, Executed};
use crate::group::{Batches, CommitCounts, Committer};
use crate::handle::guard_read;
use crate::inbox::Inbox;
use crate::maintain::{self, CheckReport, Stats, SweepReport};
use crate::open::{Opened, StoreBuilder};
use crate::outbox::Outbox;
use crate::read::{self, ListFilter};
use crate::reconcile::{self, Abandoned, Check, ReconcileError, ReconcileReport};

use crate::token::{self, Consumed};
use crate::transfer::{self, Transferred};
use crate::writer::Writer;
use crate::{snapshot, two_phase};

/// The durable idempotency store: one redb file, shared by every thread of the process
/// (`&Store` or `Arc<Store>`) and, with the default [`redb::ConcurrencyMode::MultiWriter`],
/// by other processes that open the same file.
///
/// See the [crate documentation](crate) for the two ways to use it. A store opened with
/// [`StoreBuilder::read_only`] reads like any other and refuses every write with
/// [`Error::ReadOnly`].
pub struct Store {
    // Shared with the group-commit driver thread, which leads the batches of tasks.
    shared: Arc<Shared>,
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
    /// - [`Store::path`] is `None`; [`crate::Stats::file_bytes`] is the backend's length;
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
                ),
                committer: Committer::default(),
                cache: ReplayCache::new(opened.replay_cache),
                config: opened.config,
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
    /// or an fsync: writes are refused with [`Error::NeedsReopen`] until the store is
    /// dropped and opened again.
    #[must_use]
    pub fn needs_reopen(&self) -> bool {
        self.shared.writer.needs_reopen()
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
    fn answer_from_snapshot(
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
        epoch: u64,
    ) -> Decision {
        if let Some(record) = read {
            self.shared.cache.insert(id_key, &record, epoch);
        }
        decision
    }

    /// Keeps a record just committed by a settling input in the replay cache, so that a
    /// retry is answered from memory. `epoch` was read before the input ran.
    pub(crate) fn keep_settled(&self, id: &RecordId, record: Option<&Record>, epoch: u64) {
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

    /// A request with `fingerprint` arrives for `id`: the first step of the two-phase
    /// path. On [`Decision::Claimed`] the Pending record is committed before this returns;
    /// execute, then [`Store::complete`], [`Store::release`] or [`Store::mark_unknown`]
    /// with the generation. A key that is settled, in progress, in conflict or unknown is
    /// answered from the replay cache or a read snapshot, without waiting for any
    /// writer; except while batches follow one another in the multi-process modes,
    /// where a key the cache does not hold joins the next batch and is answered by it,
    /// waiting as a write does (up to the lock timeout for each batch it waits behind),
    /// and a settled record is then kept in the cache (a read snapshot per call there
    /// costs more than it saves: see `snapshot.rs`).
    ///
    /// # Errors
    ///
    /// [`Error`] from storage; the protocol itself never refuses a begin.
    pub fn begin(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Decision, Error> {
        self.shared.writer.ensure_writable("begin")?;
        let id_key = id.to_key_bytes();
        let answered = self.answer_before_batch(&id_key, fingerprint, now)?;
        if let Some(decision) = answered {
            return Ok(decision);
        }
        // Read before the batch reads the record.
        let epoch = self.shared.cache.epoch();
        let step = two_phase::begin_reading(fingerprint);
        let answered =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        Ok(self.begun(&id_key, answered, epoch))
    }

    /// The executor holding `generation` extends its lease to `now + lease`.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] with [`idem_core::Refusal::NotFound`] or
    /// [`idem_core::Refusal::Stale`]; storage errors.
    pub fn heartbeat(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("heartbeat")?;
        let step = two_phase::heartbeat(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// The executor holding `generation` settles the key; the outcome is replayed to
    /// every retry until its retention ends.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale, outcome too large); storage errors.
    pub fn complete(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("complete")?;
        let epoch = self.shared.cache.epoch();
        let step = two_phase::complete(generation, verdict, outcome);
        let record =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        self.keep_settled(id, Some(&record), epoch);
        Ok(record)
    }

    /// The executor holding `generation` did nothing: the record is deleted and a retry
    /// may claim the key. `now` raises the clock floor, as every write of a record
    /// does.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale); storage errors.
    pub fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.shared.writer.ensure_writable("release")?;
        let step = two_phase::release(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// The executor holding `generation` cannot tell whether its effect happened: the
    /// record becomes Unknown until [`Store::resolve`].
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale); storage errors.
    pub fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("mark_unknown")?;
        let step = two_phase::mark_unknown(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// A reconciler settles an Unknown record. Returns the settled record, or `None` for
    /// [`Resolution::NotExecuted`], which deletes it so a retry claims a fresh generation.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, not Unknown, outcome too large); storage errors.
    pub fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        self.shared.writer.ensure_writable("resolve")?;
        let epoch = self.shared.cache.epoch();
        let step = two_phase::resolve(resolution);
        let record =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        self.keep_settled(id, record.as_ref(), epoch);
        Ok(record)
    }

    /// Finds the claims whose executor went silent (Pending, lease run out at `now`) and,
    /// under the default [`LeaseExpiry::Unknown`] policy, turns each Unknown, as a begin
    /// on its key would: the executor may have acted, so a reconciler must settle it.
    /// Under [`LeaseExpiry::Takeover`] they are only reported. Call it once at start-up,
    /// after a crash of the process that held the claims, and before
    /// [`Store::reconcile`].
    ///
    /// A claim renewed or settled meanwhile is left alone. Each change commits on its
    /// own.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; claims turned Unknown before the error stay so.
    pub fn recover_abandoned(&self, now: Timestamp) -> Result<Abandoned, Error> {
        self.shared.writer.ensure_writable("recover_abandoned")?;
        let at = now.max(self.clock_floor()?);
        let mut silent = Vec::new();
        let pending = ListFilter {
            state: Some(State::Pending),
            ..ListFilter::default()
        };
        read::list(&self.shared.writer, &pending, |id, record| {
            if record
                .lease_until()
                .is_some_and(|lease_until| at >= lease_until)
            {
                silent.push((id, record.generation));
            }
            ControlFlow::Continue(())
        })?;
        let mut found = Abandoned::default();
        for (id, generation) in silent {
            if self.shared.config.on_lease_expiry == LeaseExpiry::Takeover {
                found.left_for_takeover.push(id);
                continue;
            }
            let step = reconcile::abandon(generation);
            if self.shared.committer.input(
                &self.shared.writer,
                &self.shared.config,
                &id,
                now,
                step,
            )? {
                found.turned_unknown.push(id);
            }
        }
        Ok(found)
    }

    /// Shows the Unknown records to `checker`, oldest first, at most `limit`, and
    /// settles each one it can answer: [`Check::Succeeded`] and [`Check::Failed`] settle
    /// the record with that outcome, [`Check::NotExecuted`] deletes it (a retry runs the
    /// request again), [`Check::CannotTell`] leaves it Unknown.
    ///
    /// `checker` runs outside any transaction, so it may take its time (ask the payment
    /// provider, read a log); its answer is applied only if the record is still the
    /// Unknown one it saw. Each answer commits on its own.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Checker`] when the checker fails (the records before it stay
    /// reconciled); [`ReconcileError::Store`] for storage errors.
    // Its error carries the record and the report so far; it ends a run, once.
    #[allow(clippy::result_large_err)]
    pub fn reconcile<E>(
        &self,
        now: Timestamp,
        limit: usize,
        mut checker: impl FnMut(&RecordId, &Record) -> Result<Check, E>,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        self.shared.writer.ensure_writable("reconcile")?;
        let unknown = ListFilter {
            state: Some(State::Unknown),
            limit: Some(limit.saturating_add(1)),
            ..ListFilter::default()
        };
        let mut records = Vec::new();
        read::list(&self.shared.writer, &unknown, |id, record| {
            records.push((id, record));
            ControlFlow::Continue(())
        })?;
        let mut report = ReconcileReport {
            remaining: records.len() > limit,
            ..ReconcileReport::default()
        };
        records.truncate(limit);
        for (id, record) in records {
            report.examined += 1;
            let check = match checker(&id, &record) {
                Ok(check) => check,
                Err(source) => {
                    report.examined -= 1;
                    return Err(ReconcileError::Checker { id, report, source });
                }
            };
            let (resolution, count) = match check {
                Check::CannotTell => {
                    report.undecided += 1;
                    continue;
                }
                Check::Succeeded(outcome) => {
                    (Resolution::Succeeded(outcome), &mut report.succeeded)
                }
                Check::Failed(outcome) => (Resolution::Failed(outcome), &mut report.failed),
                Check::NotExecuted => (Resolution::NotExecuted, &mut report.not_executed),
            };
            let epoch = self.shared.cache.epoch();
            let step = reconcile::settle(record.generation, resolution);
            match self.shared.committer.input(
                &self.shared.writer,
                &self.shared.config,
                &id,
                now,
                step,
            )? {
                Some(settled) => {
                    *count += 1;
                    if let Some(settled) = settled {
                        self.shared
                            .cache
                            .insert(&id.to_key_bytes(), &settled, epoch);
                    }
                }
                None => report.changed_meanwhile += 1,
            }
        }
        Ok(report)
    }

    /// Atomic execute: claims `id`, runs `work` inside the same write transaction, and
    /// commits the work's writes together with the settled record, or nothing.
    ///
    /// `work` gets the transaction to write its own tables (any name that does not start
    /// with `idem.`) and to call the store's functions that take a transaction
    /// ([`Outbox::enqueue_in`], [`Store::transition_in`], [`Store::claim_unique_in`]),
    /// and returns the verdict, the outcome to replay to every retry, and a value for
    /// this caller. No Pending record is ever visible on this path. If `work` returns an
    /// error (or panics), everything rolls back and the key stays claimable.
    ///
    /// `work` runs while this process holds the store's write lock: keep it short, do no
    /// network I/O in it, and write only through its transaction: the store's other
    /// writes called from it are refused at once with [`Error::Reentrant`] (they would
    /// wait for the lock this call holds). For effects
    /// outside the file, use the two-phase path ([`Store::begin`]).
    ///
    /// Each call commits on its own (one fsync); when many threads execute at once,
    /// [`Store::execute_grouped`] shares the commit between them. Both run the same
    /// code in the transaction.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the work's error; [`ExecuteError::Store`] for storage
    /// errors, or [`idem_core::Refusal::OutcomeTooLarge`] (rolled back as well).
    pub fn execute<T, E>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
    ) -> Result<Executed<T>, ExecuteError<E>> {
        execute::alone(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            id,
            fingerprint,
            now,
            work,
        )
    }

    /// Atomic execute, like [`Store::execute`], with the commit shared with concurrent
    /// callers: their claims, their work's writes and their settled records commit in
    /// one transaction, with one fsync, and each caller is answered after it.
    ///
    /// Use it when many threads execute at once; with one caller it costs what
    /// [`Store::execute`] costs. The work is the same as there (it writes its own
    /// tables in the transaction it gets and returns the verdict, the outcome and a
    /// value), with three differences that follow from sharing:
    ///
    /// - `work` may run on another caller's thread, so it is `Send + 'static`: move or
    ///   `Arc` what it needs.
    /// - `work` may run more than once. When another input of the same batch fails after
    ///   writing, the transaction is rolled back and the batch runs again without it;
    ///   only the run whose transaction commits counts. So `work` must take everything
    ///   from the transaction and its captures, and do nothing outside the transaction
    ///   (the rule of [`Store::execute`] already: no network I/O).
    /// - If `work` fails or panics, only its own writes and claim are rolled back; the
    ///   other callers of the batch commit. A panic is resumed on the caller's thread.
    ///
    /// A key that is settled, in progress, in conflict or unknown is answered as
    /// [`Store::begin`] answers it: without entering a batch, from the replay cache or a
    /// read snapshot, except that while batches follow one another in the
    /// multi-process modes a key the cache does not hold joins the next batch, which
    /// answers it. `work` runs while the batch holds the write lock on the leader's
    /// thread: a store write called from it (another execute, a begin, ...) is refused
    /// with [`Error::Reentrant`] instead of waiting for itself.
    ///
    /// # Errors
    ///
    /// As [`Store::execute`]: [`ExecuteError::Work`] with the work's error (rolled
    /// back); [`ExecuteError::Store`] for storage errors, a refused outcome, or the
    /// batch's failed commit ([`Error::CommitFailed`], for every caller of the batch).
    pub fn execute_grouped<T, E, W>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: W,
    ) -> Result<Executed<T>, ExecuteError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        W: FnMut(&WriteTransaction) -> Result<(Verdict, Outcome, T), E> + Send + 'static,
    {
        self.shared.writer.ensure_writable("execute_grouped")?;
        let id_key = id.to_key_bytes();
        let epoch = self.shared.cache.epoch();
        let answered = self.answer_before_batch(&id_key, fingerprint, now)?;
        if let Some(decision) = answered {
            return Ok(Executed::NotRun(decision));
        }
        let (executed, read) = self.shared.committer.execute(
            &self.shared.writer,
            &self.shared.config,
            id_key.clone(),
            fingerprint,
            now,
            work,
        )?;
        // Answered only after its batch committed: a retry is answered from memory (the
        // cache keeps settled records only).
        match (&executed, read) {
            (Executed::Ran { record, .. }, _) => self.shared.cache.insert(&id_key, record, epoch),
            (Executed::NotRun(_), Some(record)) => {
                self.shared.cache.insert(&id_key, &record, epoch)
            }
            (Executed::NotRun(_), None) => {}
        }
        Ok(executed)
    }

    /// Moves the entity `id` to `to` inside a write transaction the caller has, such as
    /// the one [`Store::execute`] hands its work: the key's record, the business write
    /// and the state change then commit together, or none does. Decides with
    /// [`idem_core::machine::transition`]: only [`EntityDecision::Applied`] writes.
    ///
    /// `expected_version` is the optimistic check: the version the caller read; `None`
    /// skips it.
    ///
    /// ```
    /// use idem_store::redb::{ReadableTable, TableDefinition};
    /// use idem_store::{
    ///     EntityDecision, EntityId, Executed, Fingerprint, Machine, MachineSpec, Outcome, RecordId,
    ///     Store, Timestamp, Uniqueness, Verdict,
    /// };
    ///
    /// const REFUNDS: TableDefinition<&str, u64> = TableDefinition::new("shop.refunds");
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("terminal.redb"))?;
    /// let payment = Machine::new(MachineSpec {
    ///     states: vec!["created".into(), "paid".into(), "refunded".into()],
    ///     initial: "created".into(),
    ///     moves: vec![("created".into(), "paid".into()), ("paid".into(), "refunded".into())],
    /// })?;
    /// let pay = EntityId::new("shop-7", "payment", "p-991")?;
    /// let now = Timestamp(1_700_000_000_000);
    /// store.transition(&payment, &pay, "paid", None, now)?;
    ///
    /// // Two refund requests under two different keys (a double click on two devices): the
    /// // key cannot see that they are one refund; the receipt claim and the machine can.
    /// let refund = |key: &str| -> Result<Executed<()>, Box<dyn std::error::Error>> {
    ///     let id = RecordId::new("shop-7", "refund", key)?;
    ///     let work = |txn: &idem_store::redb::WriteTransaction| -> Result<_, idem_store::Error> {
    ///         // The receipt number is claimed once, whichever key comes first.
    ///         if let Uniqueness::Taken { by } = store.claim_unique_in(txn, "shop-7", "receipt", "R-77", key)? {
    ///             return Ok((Verdict::Failed, Outcome::new(409, format!("receipt R-77 is {by}'s")), ()));
    ///         }
    ///         match store.transition_in(txn, &payment, &pay, "refunded", Some(1), now)? {
    ///             EntityDecision::Applied { .. } => {
    ///                 txn.open_table(REFUNDS)?.insert("p-991", 1250)?;
    ///                 Ok((Verdict::Succeeded, Outcome::new(200, "refunded"), ()))
    ///             }
    ///             other => Ok((Verdict::Failed, Outcome::new(409, format!("{other:?}")), ())),
    ///         }
    ///     };
    ///     Ok(store.execute(&id, Fingerprint::of_bytes(b"refund p-991"), now, work)?)
    /// };
    /// assert!(matches!(refund("device-a")?, Executed::Ran { .. }));
    /// let second = refund("device-b")?;
    /// assert_eq!(second.outcome().map(|(v, o)| (v, o.code)), Some((Verdict::Failed, 409)));
    /// let refunds = store.read(|txn| -> Result<u64, idem_store::redb::Error> {
    ///     Ok(txn.open_table(REFUNDS)?.iter()?.count() as u64)
    /// })??;
    /// assert_eq!(refunds, 1, "one refund, not two");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Storage or decode errors; after one the transaction may hold part of the write:
    /// do not commit it (return an error from the work).
    pub fn transition_in(
        &self,
        txn: &WriteTransaction,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        entities::transition_in(txn, machine, id, to, expected_version, now)
    }

    /// [`Store::transition_in`] in a write transaction of its own, committed when the
    /// move is applied.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; nothing was written.
    pub fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        let writing = self.shared.writer.writing("transition")?;
        let decided = entities::transition_in(&writing.txn, machine, id, to, expected_version, now);
        match decided {
            Ok(decision) => {
                let applied = matches!(decision, EntityDecision::Applied { .. });
                self.shared.writer.finish(writing, applied)?;
                Ok(decision)
            }
            Err(e) => {
                // The error is the answer; a failed abort drops the transaction anyway.
                let _ = self.shared.writer.finish(writing, false);
                Err(e)
            }
        }
    }

    /// The entity `id`, if it was ever moved.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            entities::get(&db.begin_read()?, id)
        })
    }

    /// The entity `id` as `txn` sees it: read a business row and the entity's version
    /// from one snapshot, then move it with that version as `expected_version`.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn entity_in(&self, txn: &ReadTransaction, id: &EntityId) -> Result<Option<Entity>, Error> {
        entities::get(txn, id)
    }

    /// The entities of `kind`, in `state` when given, ordered by state then by tenant and
    /// id, at most `limit`.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            entities::list(&db.begin_read()?, kind, state, limit)
        })
    }

    /// Claims the business value `value` (a receipt number, an order number) in `scope`
    /// for the holder `by`, inside the caller's write transaction. A second claim by
    /// another holder answers [`Uniqueness::Taken`] with who holds it; the same holder
    /// claiming again gets [`Uniqueness::Claimed`]. Sweep never removes a claim; only
    /// [`Store::release_unique`] does.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a tenant, scope, value or holder that breaks its rule (the
    /// tenant rule, the operation rule, the key rule, 1 to 255 bytes); storage errors.
    pub fn claim_unique_in(
        &self,
        txn: &WriteTransaction,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        entities::claim_unique_in(txn, tenant, scope, value, by)
    }

    /// Gives `value` in `scope` back, in a transaction of its own; true when it was
    /// claimed.
    ///
    /// # Errors
    ///
    /// [`Error::Name`]; storage errors.
    pub fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        let writing = self.shared.writer.writing("release_unique")?;
        match entities::release_unique_in(&writing.txn, tenant, scope, value) {
            Ok(released) => {
                self.shared.writer.finish(writing, released)?;
                Ok(released)
            }
            Err(e) => {
                // The error is the answer; a failed abort drops the transaction anyway.
                let _ = self.shared.writer.finish(writing, false);
                Err(e)
            }
        }
    }

    /// Who holds `value` in `scope`, if anyone.
    ///
    /// # Errors
    ///
    /// [`Error::Name`]; storage errors.
    pub fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            entities::unique_holder(&db.begin_read()?, tenant, scope, value)
        })
    }

    /// The record under `id`, if any. A settled record the replay cache holds is
    /// answered from memory, without a redb transaction (the source of `read.rs` says
    /// why that is the file's answer); any other from a read snapshot.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        read::get(&self.shared.writer, &self.shared.cache, id)
    }

    /// Reads the file in one read transaction, for the application's own tables (a
    /// balance, an outbox). Reads never wait for writers.
    ///
    /// # Errors
    ///
    /// Storage errors beginning the transaction; `read` reports its own in `R`.
    pub fn read<R>(&self, read: impl FnOnce(&ReadTransaction) -> R) -> Result<R, Error> {
        let db = self.shared.writer.read();
        let txn = db.begin_read()?;
        Ok(read(&txn))
    }

    /// Visits the records that match `filter`, from one consistent snapshot, streamed:
    /// records are decoded one at a time, never all held in memory.
    ///
    /// With a state, records come in the order of that state's index: Pending and
    /// Unknown records oldest `created_at` first, settled records and tombstones
    /// soonest `expires_at` first (a file of schema 1 or 2 read before its upgrade:
    /// oldest `created_at` first); without a state, in key order (grouped by tenant,
    /// then operation). `visit` returns [`ControlFlow::Break`] to
    /// stop early. Do not call [`Store::check`] from `visit`.
    ///
    /// # Errors
    ///
    /// [`Error::Id`] for a filter tenant or operation that breaks the id rules; storage
    /// or decode errors.
    pub fn list(
        &self,
        filter: &ListFilter,
        visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        read::list(&self.shared.writer, filter, visit)
    }

    /// Sweeps settled records whose retention ended at `now`, and tombstones whose time
    /// ended, oldest `expires_at` first, at most `limit`, in write transactions of at
    /// most [`crate::SWEEP_BATCH`] records. A settled record leaves its tombstone
    /// (fingerprint, generation, verdict, completion time; no outcome) for
    /// [`Config::tombstone_retention_ms`], so that a late retry is answered
    /// [`Decision::Forgotten`] and does not execute again; with that setting at 0 it is
    /// deleted, and a late retry executes again. Pending and Unknown records are never
    /// swept. With `dry_run`, counts what would be swept and writes nothing (a read: it
    /// works on a read-only store).
    ///
    /// # Errors
    ///
    /// Storage errors (batches committed before one stay committed), or
    /// [`Error::Corrupt`] when the expiry index disagrees with a record.
    pub fn sweep(&self, now: Timestamp, limit: usize, dry_run: bool) -> Result<SweepReport, Error> {
        maintain::sweep(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            now,
            limit,
            dry_run,
        )
    }

    /// Counts by state, Pending records past their lease, the age of the oldest Pending
    /// and Unknown record, expired records awaiting sweep, the file size and the
    /// generation counter, from one snapshot.
    ///
    /// Counts come from the counts the index keeps by state (a schema 1 or 2 file read
    /// before its upgrade: from its state tables' lengths) and ages from the first
    /// entries of the state ranges; only the Pending and Unknown records and the
    /// expired index entries are read one by one.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; [`MaintainError::FileSize`] reading the file size.
    pub fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        maintain::stats(&self.shared.writer, now)
    }

    /// The store-wide generation counter: the last generation handed out.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn generation(&self) -> Result<Generation, Error> {
        maintain::generation(&self.shared.writer)
    }

    /// The clock floor: the latest time a write of a record used (0 before any did).
    ///
    /// Time never goes backwards for the records: a write whose `now` is behind the floor
    /// uses the floor instead (its lease, completion and retention count from there), so
    /// a clock that jumped back cannot cut a retention short. A clock that jumped ahead
    /// cannot be told from time that passed; [`Store::stats`] shows the floor so an
    /// operator can compare it with the system clock.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn clock_floor(&self) -> Result<Timestamp, Error> {
        maintain::clock_floor(&self.shared.writer)
    }

    /// Verifies the file: redb's integrity check (every page checksum, repairing what it
    /// can), then idem's own rules: every record and id decodes, every record has exactly
    /// its state index entry and, when settled, its expiry entry, no index entry lacks a
    /// record, the index's count of each state is the number of records in it, every
    /// generation is at most the counter, and the schema version is this
    /// build's; and the outbox's: every intent decodes and has exactly its state entry
    /// and, when queued, its due entry; and the tokens': every issued token decodes and
    /// has exactly its expiry entry, and every intent's token decodes.
    ///
    /// It waits (at most the lock timeout) for this process's other operations to
    /// finish, and holds the redb write lock while redb verifies, so other processes'
    /// writes wait for it too: about a millisecond per megabyte of file.
    ///
    /// It needs a writable store: redb's integrity check takes the database to itself
    /// and may repair (write) it, which a read-only handle cannot.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when redb cannot repair the file; [`Error::Busy`] when this
    /// process kept the store busy past the lock timeout; [`Error::ReadOnly`] on a
    /// read-only store; storage errors.
    pub fn check(&self) -> Result<CheckReport, Error> {
        maintain::check(&self.shared.writer)
    }

    /// Compacts the file, returning freed space to the file system. Returns true when
    /// anything moved.
    ///
    /// # Errors
    ///
    /// [`MaintainError::CompactionBusy`] while any transaction is open in this or
    /// another process; [`Error::NeedsReopen`] after a failed commit or I/O error;
    /// storage errors (a compaction that meets an I/O error leaves the store needing a
    /// reopen, as a failed commit does).
    pub fn compact(&mut self) -> Result<bool, MaintainError> {
        maintain::compact(&self.shared.writer)
    }

    /// Writes every record and every intent of the outbox as JSON lines, after a header
    /// line with the generation counter and the counts, from one snapshot (see the
    /// format in the source of `transfer.rs`). Returns what it wrote.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; [`MaintainError::Export`] writing `out`.
    pub fn export(&self, out: impl Write) -> Result<Transferred, MaintainError> {
        transfer::export(&self.shared.writer, out)
    }

    /// Reads what [`Store::export`] wrote, records and intents, in one transaction: every
    /// line is validated, and on the first bad one nothing is imported. A record or
    /// intent already in the store byte for byte is accepted as is; a different one under
    /// the same id or key is refused.
    /// Raises the generation counter to at least the header's and every record's
    /// generation. The header line is optional (JSON lines of records alone import too).
    /// Returns what it read.
    ///
    /// # Errors
    ///
    /// [`ImportError::Line`] naming the line and the field; storage errors.
    pub fn import(&self, input: impl BufRead) -> Result<Transferred, ImportError> {
        transfer::import(&self.shared.writer, &self.shared.cache, input)
    }

    /// Issues a one-time token for `(tenant, operation)`, valid for `ttl_ms` from `now`
    /// (never behind the clock floor), made of `random` (128 bits from a secure source).
    ///
    /// With an `intent_id`, issuing is idempotent: while the token issued for that
    /// intent is unused and unexpired, this answers it again ([`Issue::Existing`]) and
    /// writes nothing, so an issuer whose reply was lost asks again safely.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] for a ttl of 0 or above the store's retention (the record of a
    /// use must outlive the token) or a bad intent id; [`Error::Id`] for a bad tenant or
    /// operation; [`Error::TokenTaken`] when `random` repeats an issued token; storage
    /// errors. Nothing is written on any error.
    pub fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        self.shared.writer.ensure_writable("issue_token")?;
        token::issue(
            &self.shared.writer,
            &self.shared.config,
            tenant,
            operation,
            ttl_ms,
            intent_id,
            random,
            now,
        )
    }

    /// Consumes the token in `id`'s key (`id` is `(tenant, operation, token)`): the
    /// two-phase [`Store::begin`] on it, after the token is admitted in the same
    /// transaction. A token never issued under this tenant and operation is refused
    /// with [`crate::TokenRefusal::NotIssued`], one whose ttl passed before its first use with
    /// [`crate::TokenRefusal::Expired`]; otherwise the protocol decides: the first consume
    /// claims, a retry with the same fingerprint is replayed (not "already used"),
    /// another fingerprint is a conflict. Settle a claim with [`Store::complete`],
    /// [`Store::release`] (the token is consumable again) or [`Store::mark_unknown`].
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; storage errors.
    pub fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        self.shared.writer.ensure_writable("consume")?;
        token::token_of(id)?;
        let id_key = id.to_key_bytes();
        // A live record of a use admits the token whatever its entry says: answers
        // that write nothing come from the replay cache or a read snapshot, as for
        // begin. Always the snapshot, even while a batch runs: the batch's step admits
        // by the token's entry, and past its ttl would refuse a record the snapshot
        // answers (Forgotten, within the tombstone retention).
        if let Some(decision) = self.answer_from_snapshot(&id_key, fingerprint, now)? {
            return Ok(Consumed::Admitted(decision));
        }
        let step = token::consume(id_key, fingerprint);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// Atomic consume: admits the token in `id`'s key as [`Store::consume`] does, then
    /// runs `work` as [`Store::execute`] does, in one write transaction: the use of the
    /// token, the work's writes and the settled record commit together, or nothing
    /// does. A `work` that fails leaves the token consumable.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the work's error (rolled back);
    /// [`ExecuteError::Store`] with [`Error::Token`] when the key is not a token's text,
    /// or storage errors.
    pub fn consume_execute<T, E>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
    ) -> Result<Consumed<Executed<T>>, ExecuteError<E>> {
        self.shared.writer.ensure_writable("consume_execute")?;
        token::token_of(id)?;
        let id_key = id.to_key_bytes();
        let epoch = self.shared.cache.epoch();
        if let Some(decision) = self.answer_from_snapshot(&id_key, fingerprint, now)? {
            return Ok(Consumed::Admitted(Executed::NotRun(decision)));
        }
        let writing = self.shared.writer.writing("consume_execute")?;
        let ran = {
            let mut tables = self.shared.writer.tables(&writing)?;
            token::consume_execute_in(
                &writing.txn,
                &mut tables,
                &id_key,
                fingerprint,
                now,
                &self.shared.config,
                work,
            )
        };
        let (changed, consumed) = match ran {
            Ok(ran) => ran,
            Err(e) => {
                // The work may have written before it failed: roll it all back; the
                // work's error is the answer, a failed abort drops the transaction anyway.
                let _ = self.shared.writer.finish(writing, false);
                return Err(e);
            }
        };
        self.shared.writer.finish(writing, changed)?;
        if let Consumed::Admitted(Executed::Ran { record, .. }) = &consumed {
            self.shared.cache.insert(&id_key, record, epoch);
        }
        Ok(consumed)
    }

    /// The issued token under `id` (`(tenant, operation, token)`), if it is stored; its
    /// use, if any, is the record [`Store::get`] returns for the same id.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; storage or decode errors.
    pub fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        token::token_of(id)?;
        token::get(&self.shared.writer, id)
    }

    /// Deletes the issued tokens whose ttl passed at `now`, oldest first, at most
    /// `limit`, in write transactions of at most [`crate::SWEEP_BATCH`]. The record of a
    /// used token is left to [`Store::sweep`]; a consume of a swept token is refused
    /// with [`crate::TokenRefusal::NotIssued`] once that record is gone too.
    ///
    /// # Errors
    ///
    /// Storage errors (batches committed before one stay committed), or
    /// [`Error::Corrupt`] when the token expiry index names a missing token.
    pub fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        self.shared.writer.ensure_writable("sweep_tokens")?;
        token::sweep(&self.shared.writer, now, limit)
    }

    /// The inbox of `consumer`: messages of an at-least-once queue handled once each,
    /// their records under `(consumer, topic, message_id)`. See [`Inbox::handle`].
    ///
    /// # Errors
    ///
    /// [`Error::Id`] for a consumer name that breaks the tenant rules.
    pub fn inbox<'s>(&'s self, consumer: &'s str) -> Result<Inbox<'s>, Error> {
        Inbox::new(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            consumer,
        )
    }

    /// The outbox of this store's sender, with the settings its retries follow.
    ///
    /// # Errors
    ///
    /// [`LedgerConfigError`] for settings that cannot work.
    pub fn outbox(&self, config: LedgerConfig) -> Result<Outbox<'_>, LedgerConfigError> {
        Outbox::new(&self.shared.writer, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::protocol;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    fn settle(store: &Store, id: &RecordId, fp: Fingerprint) {
        let ran = store
            .execute(id, fp, Timestamp(1), |_| {
                Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, id.key()), ()))
            })
            .unwrap();
        assert!(matches!(ran, Executed::Ran { .. }));
    }

    /// In the multi-process mode, a retry the cache does not hold, made while a batch
    /// runs, joins a batch, which answers it and keeps the record for the next retry;
    /// when the batch has run too long (waiting for another process), or in a single
    /// process, the snapshot answers instead. Through begin and execute_grouped alike.
    #[test]
    fn while_a_batch_runs_a_shared_store_answers_an_uncached_retry_by_a_batch_and_keeps_it() {
        use crate::group::BATCHING_FOR;
        use redb::ConcurrencyMode;
        let replay = |store: &Store, id: &RecordId, fp: Fingerprint, grouped: bool| {
            let decision = if grouped {
                match store
                    .execute_grouped(id, fp, Timestamp(2), |_| {
                        Ok::<_, ()>((Verdict::Succeeded, Outcome::new(500, "ran"), ()))
                    })
                    .unwrap()
                {
                    Executed::NotRun(decision) => decision,
                    ran => panic!("{ran:?}"),
                }
            } else {
                store.begin(id, fp, Timestamp(2)).unwrap()
            };
            assert!(matches!(decision, Decision::Replay { .. }), "{decision:?}");
        };
        for mode in [
            ConcurrencyMode::MultiWriter,
            ConcurrencyMode::ExclusiveWriter,
        ] {
            for grouped in [false, true] {
                let context = format!("{mode:?}, grouped {grouped}");
                let dir = tempfile::tempdir().unwrap();
                let store = Store::builder()
                    .concurrency(mode)
                    .open(dir.path().join("idem.redb"))
                    .unwrap();
                let id = RecordId::new("t", "o", "k").unwrap();
                let key = id.to_key_bytes();
                let fp = Fingerprint::of_bytes(b"x");
                settle(&store, &id, fp);
                let batches = || store.commit_counts().batches;

                store.shared.cache.remove([key.as_slice()]);
                store.shared.committer.pretend_batching(None);
                let before = batches();
                replay(&store, &id, fp, grouped);
                let joined = mode == ConcurrencyMode::MultiWriter;
                assert_eq!(batches() - before, u64::from(joined), "{context}");
                assert!(
                    store.shared.cache.live(&key).is_some(),
                    "{context}: not kept"
                );

                // Kept: the next retry needs no batch.
                store.shared.committer.pretend_batching(None);
                let before = batches();
                replay(&store, &id, fp, grouped);
                assert_eq!(batches(), before, "{context}");

                // A batch that has run too long: the snapshot answers.
                store.shared.cache.remove([key.as_slice()]);
                store
                    .shared
                    .committer
                    .pretend_batching(Some(2 * BATCHING_FOR));
                let before = batches();
                replay(&store, &id, fp, grouped);
                assert_eq!(batches(), before, "{context}");
            }
        }
    }

    /// A consume on a used token past its ttl and its record's retention, within the
    /// tombstone's, is admitted as Forgotten (from the snapshot) even while batches run
    /// in the multi-process mode: the batch's step admits by the token's entry, which
    /// has expired, and would refuse it.
    #[test]
    fn a_consume_is_answered_from_the_snapshot_while_a_batch_runs() {
        const HOUR: u64 = 3_600_000;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("idem.redb")).unwrap();
        let t0 = 1_750_000_000_000;
        let issued = store
            .issue_token("shop", "redeem", HOUR, None, [7; 16], Timestamp(t0))
            .unwrap();
        let id = RecordId::new("shop", "redeem", issued.token().as_str()).unwrap();
        let fp = Fingerprint::of_bytes(b"voucher");
        let used = store
            .consume_execute(&id, fp, Timestamp(t0 + 1), |_| {
                Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, "redeemed"), ()))
            })
            .unwrap();
        assert!(matches!(used, Consumed::Admitted(Executed::Ran { .. })));
        let later = Timestamp(t0 + 25 * HOUR);
        store.shared.cache.remove([id.to_key_bytes().as_slice()]);
        store.shared.committer.pretend_batching(None);
        let again = store.consume(&id, fp, later).unwrap();
        assert!(
            matches!(again, Consumed::Admitted(Decision::Forgotten { .. })),
            "{again:?}"
        );
    }

    /// Inside a batch's work, which runs on its leader's thread while that batch has just
    /// begun, a begin on a settled key the cache does not hold is answered from the
    /// snapshot: it cannot join a batch there (that would be refused as re-entrant).
    #[test]
    fn inside_a_batchs_work_a_begin_on_a_settled_key_is_answered_from_the_snapshot() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path().join("idem.redb")).unwrap());
        let settled = RecordId::new("t", "o", "settled").unwrap();
        let fp = Fingerprint::of_bytes(b"x");
        settle(&store, &settled, fp);
        store
            .shared
            .cache
            .remove([settled.to_key_bytes().as_slice()]);
        let inner = Arc::clone(&store);
        let ran = store
            .execute_grouped(
                &RecordId::new("t", "o", "fresh").unwrap(),
                fp,
                Timestamp(2),
                move |_| {
                    let answer = inner
                        .begin(&settled, fp, Timestamp(2))
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((Verdict::Succeeded, Outcome::new(200, "ok"), answer))
                },
            )
            .unwrap();
        let Executed::Ran { value, .. } = ran else {
            panic!("{ran:?}")
        };
        assert!(matches!(value, Decision::Replay { .. }), "{value:?}");
    }

    #[test]
    fn a_cached_replay_needs_no_redb_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("idem.redb")).unwrap();
        let id = RecordId::new("t", "o", "k").unwrap();
        let fp = Fingerprint::of_bytes(b"x");
        settle(&store, &id, fp);
        let stored = store.get(&id).unwrap().unwrap();
        // With the database taken exclusively, only the cache can answer.
        let db = store.shared.writer.exclusive().unwrap();
        let (send, answered) = mpsc::channel();
        thread::scope(|scope| {
            scope.spawn(|| {
                let replay = store.begin(&id, fp, Timestamp(2)).unwrap();
                let conflict = store
                    .begin(&id, Fingerprint::of_bytes(b"y"), Timestamp(2))
                    .unwrap();
                send.send((replay, conflict)).unwrap();
            });
            let (replay, conflict) = answered.recv_timeout(Duration::from_secs(10)).unwrap();
            drop(db);
            let expected = protocol::begin(
                Some(&stored),
                fp,
                stored.generation,
                Timestamp(2),
                &store.shared.config,
            );
            assert_eq!(replay, expected.decision);
            assert!(matches!(replay, Decision::Replay { .. }));
            assert!(matches!(conflict, Decision::Conflict { .. }));
        });
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::builder()
            .replay_cache(8)
            .open(dir.path().join("idem.redb"))
            .unwrap();
        let ids: Vec<RecordId> = (0..50)
            .map(|n| RecordId::new("t", "o", &format!("k{n}")).unwrap())
            .collect();
        for id in &ids {
            settle(&store, id, Fingerprint::of_bytes(id.key().as_bytes()));
            assert!(store.shared.cache.len() <= 8);
        }
        for id in ids.iter().rev() {
            let fp = Fingerprint::of_bytes(id.key().as_bytes());
            assert!(matches!(
                store.begin(id, fp, Timestamp(2)).unwrap(),
                Decision::Replay { .. }
            ));
            assert!(store.shared.cache.len() <= 8);
        }
        assert_eq!(store.shared.cache.len(), 8);
        let off = Store::builder()
            .replay_cache(0)
            .open(dir.path().join("off.redb"))
            .unwrap();
        settle(&off, &ids[0], Fingerprint::of_bytes(b"k0"));
        assert_eq!(off.shared.cache.len(), 0);
    }
}
