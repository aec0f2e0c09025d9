//! The writer: the redb handle, the write lock, the durability of commits, and the
//! failed-commit state that refuses writes until the store is reopened.
//!
//! Every write of the store runs in [`Writer::transact`], the one function that owns a
//! write transaction: it begins it, opens the store's tables, writes the counters and
//! commits, or aborts. Every read goes through [`Writer::read`]. Nothing above this
//! module touches the redb handle, the lock or a transaction's lifecycle.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};
use std::time::{Duration, Instant};
use std::{fmt, io};

use redb::{CommitError, Durability, ReadOnlyTable, WriteTransaction};

use crate::error::Error;
use crate::file::backend::Location;
use crate::file::handle::Handle;
use crate::file::lock::{Gate, Turn, begin_write, busy_error};
use crate::file::open::Reopen;
use crate::file::schema::{Counters, Known, RECORDS, Tables};
use crate::file::wait::{Deadline, Tried, retry_until};

/// The redb database of one store and everything that decides whether and how it may be
/// written.
pub(crate) struct Writer {
    // Declared before `db`, so that it drops first: see `Writer::records`.
    snapshot: Snapshot,
    // Check takes it exclusively (redb's integrity check needs `&mut Database`); every
    // other operation shares it.
    db: RwLock<Handle>,
    location: Location,
    // Opened read-only: every write is refused.
    read_only: bool,
    // Serializes this process's write transactions, so that waiting for the redb write
    // lock only ever waits for another process; both waits are bounded.
    gate: Gate,
    // Set by a failed commit: redb refuses writes until the database is reopened.
    broken: AtomicBool,
    durability: Durability,
    lock_timeout: Duration,
    // Write transactions committed, on every path.
    commits: AtomicU64,
    // The clock floor applies (always, but in a test that shows what it prevents).
    floored: bool,
    // In ExclusiveWriter mode, the generation counter and clock floor of the latest
    // commit, carried into the next transaction (see `Snapshot` for why nothing else can
    // change them); `None` in the multi-process modes, and after a failed commit.
    known: Mutex<Option<Known>>,
    // How a writable store opens its location again after a failure; `None` read-only.
    reopen: Option<Reopen>,
    // When the next reopen may be tried, and why the last one failed.
    recovery: Mutex<Recovery>,
    // Reopens that succeeded since the store was opened.
    reopens: AtomicU64,
}

/// The backoff of a store that reopens itself: a failed reopen waits before the next
/// try, from 10 ms doubling to a second, so that a disk still full is not hammered.
#[derive(Debug, Default)]
struct Recovery {
    not_before: Option<Instant>,
    pause: Duration,
    last_failure: Option<String>,
}

/// The first pause after a failed reopen.
const FIRST_REOPEN_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two reopens.
const LONGEST_REOPEN_PAUSE: Duration = Duration::from_secs(1);
/// How long a reopen waits for this process's transactions to end.
const REOPEN_WAIT: Duration = Duration::from_millis(200);

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("location", &self.location.label())
            .field("read_only", &self.read_only)
            .field("durability", &self.durability)
            .field("lock_timeout", &self.lock_timeout)
            .field("needs_reopen", &self.needs_reopen())
            .finish_non_exhaustive()
    }
}

/// The records table of a read snapshot, shared by readers.
pub(crate) type Records = Arc<ReadOnlyTable<&'static [u8], &'static [u8]>>;

/// In [`redb::ConcurrencyMode::ExclusiveWriter`] mode, the records table of a read
/// snapshot taken since this process's last commit, kept for the next reads.
///
/// # Why a kept snapshot answers what a new one would
///
/// In that mode no other process writes the file (redb locks it), so the file changes
/// only by this process's commits, and every commit goes through [`Writer::commit`],
/// which drops the kept snapshot once redb has committed and before the committer is
/// answered. A read that takes the kept snapshot therefore sees the latest commit, or,
/// when a commit is finishing at that moment, the one just before it: what a read that
/// began before that commit was acknowledged would see with a snapshot of its own.
/// A snapshot pins the pages it reads; dropping it at every commit bounds that to the
/// pages of one commit, as a reader's own short transaction does. Compact and check
/// need no live read transaction: [`Writer::exclusive`] and [`Writer::handle_mut`] drop
/// it first. After an I/O error nothing is kept, so reads meet redb's own refusal.
///
/// In the multi-process modes another process may commit at any moment; every read
/// takes a new snapshot, which is what redb's `begin_read` is for.
#[derive(Default)]
struct Snapshot {
    // Only in ExclusiveWriter mode.
    enabled: bool,
    kept: Mutex<Option<Records>>,
}

impl Snapshot {
    fn kept(&self) -> MutexGuard<'_, Option<Records>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn drop_kept(&self) {
        if self.enabled {
            self.kept().take();
        }
    }
}

/// The records table of a snapshot, with the shared guard of the database.
pub(crate) struct Reading<'w> {
    // Declared first so it drops before the guard.
    pub(crate) records: Records,
    _db: RwLockReadGuard<'w, Handle>,
}

/// A write transaction with the guards that make it this process's only one.
struct Writing<'w> {
    // Declared first so it drops before the guards.
    txn: WriteTransaction,
    // The generation counter and clock floor of this transaction, written at the commit.
    counters: Counters,
    _turn: Turn<'w>,
    _db: RwLockReadGuard<'w, Handle>,
}

impl Writer {
    /// The writer of `db`, opened on `location`.
    pub(crate) fn new(
        db: Handle,
        location: Location,
        durability: Durability,
        lock_timeout: Duration,
        floored: bool,
        alone: bool,
        reopen: Option<Reopen>,
    ) -> Writer {
        Writer {
            snapshot: Snapshot {
                enabled: alone,
                kept: Mutex::default(),
            },
            floored,
            read_only: db.writable().is_none(),
            db: RwLock::new(db),
            location,
            gate: Gate::default(),
            broken: AtomicBool::new(false),
            durability,
            lock_timeout,
            commits: AtomicU64::new(0),
            known: Mutex::new(alone.then_some((None, None))),
            reopen,
            recovery: Mutex::default(),
            reopens: AtomicU64::new(0),
        }
    }

    fn known(&self) -> MutexGuard<'_, Option<Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The path the store was opened from; `None` on a backend.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.location.path()
    }

    /// The size of the store file, or the backend's length, in bytes.
    pub(crate) fn size(&self) -> io::Result<u64> {
        self.location.size()
    }

    /// True when opened read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// True after a failed commit, or once the storage failed a read, write or sync
    /// (redb then refuses every later operation): writes are refused until the store is
    /// reopened.
    pub(crate) fn needs_reopen(&self) -> bool {
        self.broken.load(Ordering::Acquire) || self.location.io_failed()
    }

    /// True in ExclusiveWriter mode, where reads share a snapshot kept until the next
    /// commit ([`Snapshot`]); false in the multi-process modes, where each read begins
    /// a redb read transaction of its own.
    pub(crate) fn keeps_snapshot(&self) -> bool {
        self.snapshot.enabled
    }

    /// True unless a test turned the clock floor off.
    pub(crate) fn is_floored(&self) -> bool {
        self.floored
    }

    /// Write transactions committed since the store was opened.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Refuses `operation`, which writes, on a read-only store. Called first by every
    /// write, so that a read-only store refuses it the same way whatever the file holds.
    pub(crate) fn ensure_writable(&self, operation: &'static str) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::ReadOnly { operation });
        }
        Ok(())
    }

    /// [`Writer::ensure_writable`], then reopens a store that failed ([`Writer::recover`]).
    pub(crate) fn ensure_usable(&self, operation: &'static str) -> Result<(), Error> {
        self.ensure_writable(operation)?;
        self.recover()
    }

    /// Reopens the store when a commit or an I/O call failed it: the redb database is
    /// dropped and its location opened again with the options of the first open, which
    /// decides, as an application's own reopen would, whether the failed commit's changes
    /// are there. Done under the database to itself (every transaction of this process
    /// finished), once for all callers that meet the failure. A reopen that fails leaves
    /// the store closed and refuses calls with its cause until the next try, a pause
    /// later (10 ms, doubling to 1 s). Ok at once when nothing failed.
    pub(crate) fn recover(&self) -> Result<(), Error> {
        if !self.needs_reopen() {
            return Ok(());
        }
        let Some(reopen) = &self.reopen else {
            return Err(Error::NeedsReopen);
        };
        let mut recovery = self.recovery.lock().unwrap_or_else(PoisonError::into_inner);
        // Another caller reopened it meanwhile.
        if !self.needs_reopen() {
            return Ok(());
        }
        if let Some(not_before) = recovery.not_before
            && Instant::now() < not_before
        {
            return Err(match &recovery.last_failure {
                Some(cause) => Error::Reopening {
                    cause: cause.clone(),
                },
                None => Error::NeedsReopen,
            });
        }
        // The database to itself, waiting briefly for this process's transactions to end
        // (a caller that holds a read itself must not wait long for itself): when they
        // do not, a later call tries again.
        self.snapshot.drop_kept();
        let mut db = retry_until(
            Deadline::after(REOPEN_WAIT.min(self.lock_timeout)),
            || match self.db.try_write() {
                Ok(db) => Tried::Done(Ok(db)),
                Err(TryLockError::Poisoned(poisoned)) => Tried::Done(Ok(poisoned.into_inner())),
                Err(TryLockError::WouldBlock) => Tried::Held,
            },
            |_| Error::NeedsReopen,
        )?;
        // The failed database first: the reopen takes the file's lock anew.
        drop(std::mem::replace(&mut *db, Handle::Closed));
        self.snapshot.drop_kept();
        if let Some(known) = self.known().as_mut() {
            *known = (None, None);
        }
        self.location.clear_io_failed();
        match reopen(&self.location) {
            Ok(handle) => {
                *db = handle;
                self.broken.store(false, Ordering::Release);
                self.reopens.fetch_add(1, Ordering::Relaxed);
                *recovery = Recovery::default();
                Ok(())
            }
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                let cause = e.to_string();
                recovery.pause = (recovery.pause * 2)
                    .max(FIRST_REOPEN_PAUSE)
                    .min(LONGEST_REOPEN_PAUSE);
                recovery.not_before = Some(Instant::now() + recovery.pause);
                recovery.last_failure = Some(cause.clone());
                Err(Error::Reopening { cause })
            }
        }
    }

    /// Reopens that succeeded since the store was opened.
    pub(crate) fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }

    /// Why the last reopen failed, while the store waits to try again; `None` when it
    /// is open, or has not tried yet.
    pub(crate) fn reopen_failure(&self) -> Option<String> {
        if !self.needs_reopen() {
            return None;
        }
        self.recovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_failure
            .clone()
    }

    /// The database, shared, for a read (never waits for writers); reopened first when
    /// a failure closed it and it can be now ([`Writer::recover`]), else the read meets
    /// the failure.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Handle> {
        if !self.read_only && self.needs_reopen() {
            let _reopened = self.recover();
        }
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The records table of the latest commit, for a read: the kept snapshot in
    /// ExclusiveWriter mode (see [`Snapshot`]), else a new one.
    ///
    /// The database stays shared while the table is read, as for every read, so that
    /// check never runs under a live read.
    pub(crate) fn records(&self) -> Result<Reading<'_>, Error> {
        if !self.read_only {
            self.recover()?;
        }
        let db = self.read();
        let open = |db: &Handle| -> Result<Records, Error> {
            let txn = db.begin_read()?;
            Ok(Arc::new(txn.open_table(RECORDS)?))
        };
        if !self.snapshot.enabled || self.needs_reopen() {
            let records = open(&db)?;
            return Ok(Reading { records, _db: db });
        }
        let mut kept = self.snapshot.kept();
        let records = match kept.as_ref() {
            Some(records) => Arc::clone(records),
            None => {
                let records = open(&db)?;
                *kept = Some(Arc::clone(&records));
                records
            }
        };
        drop(kept);
        Ok(Reading { records, _db: db })
    }

    /// The database to itself, for redb's integrity check, within the lock timeout.
    /// Tries rather than queueing on the lock, so that a thread holding a shared guard (a
    /// `list` visitor, an `execute` closure) that reads again is never stuck behind this
    /// waiting writer.
    pub(crate) fn exclusive(&self) -> Result<RwLockWriteGuard<'_, Handle>, Error> {
        self.snapshot.drop_kept();
        retry_until(
            Deadline::after(self.lock_timeout),
            || match self.db.try_write() {
                Ok(db) => Tried::Done(Ok(db)),
                Err(TryLockError::Poisoned(poisoned)) => Tried::Done(Ok(poisoned.into_inner())),
                Err(TryLockError::WouldBlock) => Tried::Held,
            },
            busy_error,
        )
    }

    /// Whether the calling thread is inside this store's write transaction (running
    /// the work of an execute): a write it asks for would wait for itself.
    pub(crate) fn writing_here(&self) -> bool {
        self.gate.held_here()
    }

    /// Runs `work` in a write transaction of this process for `operation`, the one
    /// function that owns a write transaction: begins it (waiting for this process's
    /// other writers, then for other processes, until the lock timeout), hands `work`
    /// the transaction and the store's tables (each opened on first use), then writes
    /// the generation counter and clock floor the work raised and commits when the work
    /// says it wrote, or aborts, which costs no fsync.
    ///
    /// `work` returns its answer and whether it wrote. When it fails, the transaction
    /// is rolled back, whatever it wrote before, and its error is the answer (an abort
    /// that fails too drops the transaction, which rolls it back as well).
    pub(crate) fn transact<R, E: From<Error>>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&WriteTransaction, &mut Tables<'_>) -> Result<(R, bool), E>,
    ) -> Result<R, E> {
        let writing = self.writing(operation)?;
        let ran = {
            let mut tables = Tables::open_floored(&writing.txn, &writing.counters, self.floored);
            work(&writing.txn, &mut tables).and_then(|ran| {
                // Through the index the work may have open: redb opens a table once.
                tables.write_counters()?;
                Ok(ran)
            })
        };
        match ran {
            Ok((answer, wrote)) => {
                self.finish(writing, wrote)?;
                Ok(answer)
            }
            Err(e) => {
                let _ = self.finish(writing, false);
                Err(e)
            }
        }
    }

    /// Begins this process's write transaction for `operation`, waiting for this
    /// process's other writers and then for other processes, until the lock timeout.
    fn writing(&self, operation: &'static str) -> Result<Writing<'_>, Error> {
        self.ensure_usable(operation)?;
        let deadline = Deadline::after(self.lock_timeout);
        let db = self.read();
        let Some(writable) = db.writable() else {
            return Err(Error::ReadOnly { operation });
        };
        let turn = self.gate.enter(deadline)?;
        let mut txn = begin_write(writable, deadline)?;
        if !matches!(self.durability, Durability::Immediate) {
            txn.set_durability(self.durability)?;
        }
        let counters = match *self.known() {
            Some(known) => Counters::seeded(known),
            None => Counters::default(),
        };
        Ok(Writing {
            txn,
            counters,
            _turn: turn,
            _db: db,
        })
    }

    /// Puts the generation counter and clock floor this transaction raised into meta
    /// ([`Counters::write`]), then commits, or marks the store as needing a reopen when
    /// the commit failed in a way redb says leaves the database unable to write. An
    /// error before the commit drops the transaction, which rolls it back.
    fn commit(&self, writing: Writing<'_>) -> Result<(), Error> {
        writing.counters.write(&writing.txn)?;
        let Writing {
            txn,
            counters,
            _turn,
            _db,
        } = writing;
        let committed = txn.commit();
        // Whatever the commit did, the kept snapshot may no longer be the latest.
        self.snapshot.drop_kept();
        let mut known = self.known();
        if let Some(before) = known.as_mut() {
            *before = match committed {
                Ok(()) => counters.known_after(*before),
                // Read again after the reopen.
                Err(_) => (None, None),
            };
        }
        drop(known);
        match committed {
            Ok(()) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(CommitError::TransactionPoisoned) => {
                Err(Error::Storage(CommitError::TransactionPoisoned.into()))
            }
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                Err(Error::CommitFailed(e))
            }
        }
    }

    /// Commits when `changed`, aborts otherwise (an abort costs no fsync).
    fn finish(&self, writing: Writing<'_>, changed: bool) -> Result<(), Error> {
        if changed {
            self.commit(writing)
        } else {
            let Writing {
                txn, _turn, _db, ..
            } = writing;
            Ok(txn.abort()?)
        }
    }
}
