//! The operator's work (docs/design.md §4, §11): sweep, stats, check and
//! compact, the reconciler, export and import, and the JSON view of a record, with
//! the reports each returns.

pub(crate) mod steps;

use idem_core::{Generation, Timestamp};

use crate::error::{Error, MaintainError};
use crate::file::maintain::steps::CheckReport;
use crate::file::store::Store;
use crate::seam::report::{Stats, SweepReport};

impl Store {
    /// Sweeps settled records whose retention ended at `now`, and tombstones whose time
    /// ended, oldest `expires_at` first, at most `limit`, in write transactions of at
    /// most 256 records. A settled record leaves its tombstone
    /// (fingerprint, generation, verdict, completion time; no outcome) for
    /// [`crate::Config::tombstone_retention_ms`], so that a late retry is answered
    /// [`crate::Decision::Forgotten`] and does not execute again; with that setting at 0 it is
    /// deleted, and a late retry executes again. Pending and Unknown records are never
    /// swept. With `dry_run`, counts what would be swept and writes nothing (a read: it
    /// works on a read-only store).
    ///
    /// # Errors
    ///
    /// Storage errors (batches committed before one stay committed), or
    /// [`Error::Corrupt`] when the expiry index disagrees with a record.
    pub fn sweep(&self, now: Timestamp, limit: usize, dry_run: bool) -> Result<SweepReport, Error> {
        steps::sweep(
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
        steps::stats(&self.shared.writer, now)
    }

    /// The store-wide generation counter: the last generation handed out.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn generation(&self) -> Result<Generation, Error> {
        steps::generation(&self.shared.writer)
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
        steps::clock_floor(&self.shared.writer)
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
        steps::check(&self.shared.writer)
    }

    /// Compacts the file, returning freed space to the file system. Returns true when
    /// anything moved.
    ///
    /// # Errors
    ///
    /// [`MaintainError::CompactionBusy`] while any transaction is open in this or
    /// another process; [`Error::Reopening`] while a store that failed cannot reopen
    /// yet; storage errors (a compaction that meets an I/O error leaves the store to
    /// reopen itself, as a failed commit does).
    pub fn compact(&mut self) -> Result<bool, MaintainError> {
        steps::compact(&self.shared.writer)
    }
}
