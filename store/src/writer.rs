//! The writer: the redb handle, the write lock, the durability of commits, and the
//! failed-commit state that refuses writes until the store is reopened.
//!
//! Every write of the store goes through [`Writer::writing`] and ends in
//! [`Writer::commit`] or [`Writer::finish`]; every read goes through [`Writer::read`].
//! Nothing above this module touches the redb handle or the lock directly.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::Duration;

use redb::{CommitError, Durability, WriteTransaction};

use crate::backend::Location;
use crate::error::Error;
use crate::handle::Handle;
use crate::lock::{Gate, Turn, begin_write, busy_error};
use crate::tables::Tables;
use crate::wait::{Attempt, Deadline, retry_until};

/// The redb database of one store and everything that decides whether and how it may be
/// written.
pub(crate) struct Writer {
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
}

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

/// A write transaction with the guards that make it this process's only one.
pub(crate) struct Writing<'w> {
    // Declared first so it drops before the guards.
    pub(crate) txn: WriteTransaction,
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
    ) -> Writer {
        Writer {
            floored,
            read_only: db.writable().is_none(),
            db: RwLock::new(db),
            location,
            gate: Gate::default(),
            broken: AtomicBool::new(false),
            durability,
            lock_timeout,
            commits: AtomicU64::new(0),
        }
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

    /// [`Writer::ensure_writable`], then refuses a store that needs a reopen.
    pub(crate) fn ensure_usable(&self, operation: &'static str) -> Result<(), Error> {
        self.ensure_writable(operation)?;
        if self.needs_reopen() {
            return Err(Error::NeedsReopen);
        }
        Ok(())
    }

    /// The database, shared, for a read (never waits for writers).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Handle> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The database to itself, for redb's integrity check, within the lock timeout.
    /// Tries rather than queueing on the lock, so that a thread holding a shared guard (a
    /// `list` visitor, an `execute` closure) that reads again is never stuck behind this
    /// waiting writer.
    pub(crate) fn exclusive(&self) -> Result<RwLockWriteGuard<'_, Handle>, Error> {
        retry_until(
            Deadline::after(self.lock_timeout),
            || match self.db.try_write() {
                Ok(db) => Attempt::Done(Ok(db)),
                Err(TryLockError::Poisoned(poisoned)) => Attempt::Done(Ok(poisoned.into_inner())),
                Err(TryLockError::WouldBlock) => Attempt::Held,
            },
            busy_error,
        )
    }

    /// The database, when the caller has the store to itself (`&mut Store`).
    pub(crate) fn handle_mut(&mut self) -> &mut Handle {
        self.db.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Begins this process's write transaction for `operation`, waiting for this
    /// process's other writers and then for other processes, until the lock timeout.
    pub(crate) fn writing(&self, operation: &'static str) -> Result<Writing<'_>, Error> {
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
        Ok(Writing {
            txn,
            _turn: turn,
            _db: db,
        })
    }

    /// The store's tables in `writing`'s transaction.
    pub(crate) fn tables<'t>(&self, writing: &'t Writing<'_>) -> Result<Tables<'t>, Error> {
        Tables::open_floored(&writing.txn, self.floored)
    }

    /// Commits, or marks the store as needing a reopen when the commit failed in a way
    /// redb says leaves the database unable to write.
    pub(crate) fn commit(&self, writing: Writing<'_>) -> Result<(), Error> {
        let Writing { txn, _turn, _db } = writing;
        match txn.commit() {
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
    pub(crate) fn finish(&self, writing: Writing<'_>, changed: bool) -> Result<(), Error> {
        if changed {
            self.commit(writing)
        } else {
            let Writing { txn, _turn, _db } = writing;
            Ok(txn.abort()?)
        }
    }
}
