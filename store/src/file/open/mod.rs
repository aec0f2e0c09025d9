//! Opening a store file: [`StoreBuilder`], the checks that keep a bad file untouched,
//! and the bounded wait for another process's lock.
//!
//! An existing file is first opened read-only, which changes no byte, to refuse a
//! directory, a read-only file, a non-redb or damaged file and a newer schema before
//! anything writes to it. Only then is it opened for writing, and, with
//! [`StoreBuilder::verify_on_open`] (the default), redb verifies the checksum of every
//! page before it trusts the file. A redb file without idem's tables (a new file, or one
//! that so far holds only the application's own tables) gets them; a file whose
//! `idem.records` table holds records but whose `idem.meta` table is gone is refused as
//! corrupt.
//!
//! A read-only open ([`StoreBuilder::read_only`]) is that first read-only open alone: it
//! checks the schema, keeps the handle, and never writes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::{fs, io};

use idem_core::Config;
use redb::{
    ConcurrencyMode, Database, DatabaseError, Durability, ReadableDatabase, ReadableTableMetadata,
    StorageError, TableError,
};

use crate::error::{Error, OpenError};
use crate::file::backend::Location;
use crate::file::cache::DEFAULT_REPLAY_CACHE;
use crate::file::handle::Handle;
use crate::file::journal::{self, DEFAULT_JOURNAL_LIMIT};
use crate::file::lock::begin_write;
use crate::file::schema::{
    self as tables, Counters, META, OLDEST_SCHEMA, RECORDS, SCHEMA_KEY, SCHEMA_VERSION, Tables,
};
use crate::file::wait::{Deadline, Tried, retry_until};

mod checks;

/// A file opened and checked by a [`StoreBuilder`], with the settings the store keeps.
pub(crate) struct Opened {
    pub(crate) handle: Handle,
    /// The reserve of a writable store file.
    pub(crate) room: Option<crate::file::room::Room>,
    /// Opens the same location again, for writing, as this open did: how a writable
    /// store reopens itself after a failure. `None` for a read-only store.
    pub(crate) reopen: Option<Reopen>,
    pub(crate) location: Location,
    pub(crate) config: Config,
    pub(crate) durability: Durability,
    pub(crate) lock_timeout: Duration,
    pub(crate) replay_cache: usize,
    pub(crate) floored: bool,
    // Opened for writing in ConcurrencyMode::ExclusiveWriter: no other process writes.
    pub(crate) alone: bool,
}

/// Opens a store's location again for writing, with the options of its first open.
pub(crate) type Reopen = Box<dyn Fn(&Location) -> Result<Handle, OpenError> + Send + Sync>;

/// The default bound on waiting for another process's lock: 5 s.
pub(crate) const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Options for [`crate::Store::builder`]: the protocol [`Config`] and the redb settings.
///
/// ```no_run
/// use std::time::Duration;
/// use idem_store::{Config, LeaseExpiry, Store};
///
/// let store = Store::builder()
///     .config(Config { lease_ms: 10_000, on_lease_expiry: LeaseExpiry::Unknown, ..Config::default() })
///     .lock_timeout(Duration::from_secs(2))
///     .open("terminal.redb")?;
/// # Ok::<(), idem_store::OpenError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct StoreBuilder {
    config: Config,
    durability: Durability,
    lock_timeout: Duration,
    // `None`: the default of where the store is opened (a file or a backend).
    concurrency: Option<ConcurrencyMode>,
    cache_size: Option<usize>,
    replay_cache: usize,
    verify_on_open: bool,
    read_only: bool,
    floored: bool,
    journal: bool,
    journal_limit: u64,
    space_reserve: u64,
}

impl Default for StoreBuilder {
    fn default() -> StoreBuilder {
        StoreBuilder {
            config: Config::default(),
            durability: Durability::Immediate,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            concurrency: None,
            cache_size: None,
            replay_cache: DEFAULT_REPLAY_CACHE,
            verify_on_open: true,
            read_only: false,
            floored: true,
            journal: true,
            journal_limit: DEFAULT_JOURNAL_LIMIT,
            space_reserve: crate::file::room::DEFAULT_RESERVE,
        }
    }
}

impl StoreBuilder {
    /// The protocol settings (lease, retentions, outcome limit, lease-expiry policy).
    /// Default: [`Config::default`].
    pub fn config(mut self, config: Config) -> StoreBuilder {
        self.config = config;
        self
    }

    /// How commits reach the disk. Default [`Durability::Immediate`]: every answer is
    /// given after its fsync. [`Durability::None`] needs
    /// [`ConcurrencyMode::ExclusiveWriter`], since a commit held only in this process's
    /// memory would be invisible to the others.
    pub fn durability(mut self, durability: Durability) -> StoreBuilder {
        self.durability = durability;
        self
    }

    /// How long opening, and every write, waits for another process that holds the lock
    /// before giving up with [`OpenError::Locked`] or [`Error::Busy`]. Default 5 s.
    pub fn lock_timeout(mut self, timeout: Duration) -> StoreBuilder {
        self.lock_timeout = timeout;
        self
    }

    /// How processes share the file. Default [`ConcurrencyMode::MultiWriter`]: any number
    /// of processes open it and write, one write transaction at a time. Every process
    /// opening one file must use the same mode. On a backend
    /// ([`StoreBuilder::open_on_backend`]) the default is
    /// [`ConcurrencyMode::ExclusiveWriter`].
    pub fn concurrency(mut self, mode: ConcurrencyMode) -> StoreBuilder {
        self.concurrency = Some(mode);
        self
    }

    /// The most memory redb uses to cache pages, in bytes. Default: redb's.
    pub fn cache_size(mut self, bytes: usize) -> StoreBuilder {
        self.cache_size = Some(bytes);
        self
    }

    /// How many settled records the store keeps in memory to answer a begin (or an
    /// execute) on a settled key without a redb transaction. Default 4096; 0 turns the
    /// cache off.
    ///
    /// Answers are the same with or without it: a settled record never changes before
    /// it expires, and an entry is never used at or past its `expires_at` (see the
    /// source of `cache.rs` for the argument, several processes included). Records enter
    /// when a begin reads them or a commit settles them, and leave first in, first out.
    /// Memory is bounded by the entry count and by 16 MiB of keys and outcome bodies; a
    /// body over 64 KiB is not kept.
    /// [`crate::Store::get`] does not use it.
    pub fn replay_cache(mut self, entries: usize) -> StoreBuilder {
        self.replay_cache = entries;
        self
    }

    /// Verify every page's checksum when opening, so a damaged file is refused with
    /// [`OpenError::Corrupt`] instead of being trusted. Default true.
    ///
    /// It reads the whole file once per open, under redb's write lock (other processes'
    /// writes wait for it), so its time grows with the file (`docs/performance.md`).
    /// Turn it off only for files far larger than a terminal's.
    pub fn verify_on_open(mut self, verify: bool) -> StoreBuilder {
        self.verify_on_open = verify;
        self
    }

    /// Whether a store that has its file to itself
    /// ([`ConcurrencyMode::ExclusiveWriter`]) with [`Durability::Immediate`] commits
    /// through a journal. Default true; other modes never do.
    ///
    /// The journal, `<file>-journal` beside the store file, turns a commit's scattered
    /// page writes into one append: each commit's pages are written into the store file
    /// (unsynced) and appended to the journal, and only the journal is synced before the
    /// answer; the store file is synced at a checkpoint, when the journal reaches
    /// [`StoreBuilder::journal_limit`] or the store closes. More commits per second
    /// wherever a sync of scattered pages costs more than one of contiguous pages (the
    /// compare bench measures both; `docs/performance.md`). Every
    /// answered commit stays fsync-durable: the next writable open, in any mode, first
    /// writes what the journal holds into the file, and until then a read-only open
    /// fails with [`OpenError::NeedsRecovery`]. A closed store leaves the journal empty
    /// (unless a write or sync failed: then it is kept for the next open), so the store
    /// file alone is the whole store. While a process has the store open, or after a
    /// crash until the next writable open, the two files belong together: the journal
    /// names its file (device and inode) and is refused beside another, so recover a
    /// crashed store where it is before copying it.
    pub fn journal(mut self, journal: bool) -> StoreBuilder {
        self.journal = journal;
        self
    }

    /// The journal's size in bytes past which a commit checkpoints (syncs the store file
    /// and empties the journal) instead of appending. Default 4 MiB: about 350
    /// single-input commits. At least 64 KiB, at most 4 GiB.
    pub fn journal_limit(mut self, bytes: u64) -> StoreBuilder {
        self.journal_limit = bytes;
        self
    }

    /// The free space kept on the store file's filesystem for settling the claims
    /// already made: a claim is refused ([`crate::Error::NoRoom`]) while less is free,
    /// so that a disk that fills up still lets every claimed request settle, release or
    /// turn Unknown, and settles never compete with new claims for the last bytes.
    /// Replays and other answers go on. Default 4 MiB; 0 keeps none. A store on a
    /// backend keeps none (its space is the backend's business).
    pub fn space_reserve(mut self, bytes: u64) -> StoreBuilder {
        self.space_reserve = bytes;
        self
    }

    /// The journal limit of a writable open in `concurrency`, when it uses a journal.
    fn journal_for(&self, concurrency: ConcurrencyMode) -> Option<u64> {
        let journaled = self.journal
            && !self.read_only
            && concurrency == ConcurrencyMode::ExclusiveWriter
            && matches!(self.durability, Durability::Immediate);
        journaled.then_some(self.journal_limit)
    }

    /// Open the file only to read it. Default false.
    ///
    /// A read-only store answers [`crate::Store::get`], [`crate::Store::list`], [`crate::Store::stats`],
    /// [`crate::Store::generation`], [`crate::Store::export`], a dry-run [`crate::Store::sweep`],
    /// [`crate::Store::read`] and the outbox's reads like any store, from the latest commit of
    /// every process, and refuses every write (and [`crate::Store::check`], whose integrity
    /// check needs the file for writing) with [`Error::ReadOnly`]. It changes no byte of
    /// the file: it reads a file that is read-only, or on a read-only mount, and opens
    /// beside processes that write it (in the same [concurrency
    /// mode](StoreBuilder::concurrency)) without waiting for them.
    ///
    /// Opening read-only creates nothing ([`OpenError::NoStore`] when there is no store
    /// yet), cannot recover a file whose last writer crashed ([`OpenError::NeedsRecovery`]
    /// until a writable open has), and does not verify the file
    /// ([`StoreBuilder::verify_on_open`] needs a writable open; [`crate::Store::check`] on a
    /// writable store does it).
    pub fn read_only(mut self, read_only: bool) -> StoreBuilder {
        self.read_only = read_only;
        self
    }

    /// Test-only: never in production. Turns the clock floor off, so that writes use the
    /// caller's time as given even when it went backwards, and a record settled by a
    /// clock that went back expires early. It exists so that a test can show that the
    /// floor is load-bearing.
    #[cfg(feature = "test-unfloored-clock")]
    #[doc(hidden)]
    pub fn without_clock_floor(mut self) -> StoreBuilder {
        self.floored = false;
        self
    }

    /// Opens and checks the file at `path` for [`StoreBuilder::open`] (in `store.rs`).
    pub(crate) fn open_file(self, path: &Path) -> Result<Opened, OpenError> {
        self.config.validate()?;
        let concurrency = self.concurrency.unwrap_or(ConcurrencyMode::MultiWriter);
        self.check_durability(concurrency)?;
        if self.read_only {
            return self.open_file_read_only(path, concurrency);
        }
        let path = path.to_path_buf();
        let deadline = Deadline::after(self.lock_timeout);
        let existing = match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => return Err(OpenError::IsDirectory { path }),
            Ok(meta) if meta.permissions().readonly() => {
                return Err(OpenError::ReadOnly { path });
            }
            Ok(meta) => meta.len() > 0,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(source) => return Err(OpenError::Io { path, source }),
        };
        if !existing {
            self.create_atomically(&path, concurrency, deadline)?;
        }
        let location = Location::file(&path).journaled(self.journal_for(concurrency));
        let current = self.precheck(&location, concurrency, deadline)?;
        let db = self.writable(&location, current, concurrency, deadline)?;
        Ok(self.opened(Handle::Writable(db), location, concurrency))
    }

    /// Opens a store on `backend` for [`StoreBuilder::open_on_backend`] (in `store.rs`).
    pub(crate) fn open_backend(self, location: Location) -> Result<Opened, OpenError> {
        self.config.validate()?;
        let concurrency = self.concurrency.unwrap_or(ConcurrencyMode::ExclusiveWriter);
        if concurrency != ConcurrencyMode::ExclusiveWriter && !location.locks_ranges() {
            return Err(OpenError::Options(
                "a concurrency mode other than ExclusiveWriter needs a backend that implements redb's byte-range locks, and this backend does not",
            ));
        }
        self.check_durability(concurrency)?;
        let location = if location.has_journal_backend() {
            if concurrency != ConcurrencyMode::ExclusiveWriter
                || !matches!(self.durability, Durability::Immediate)
            {
                return Err(OpenError::Options(
                    "a journal needs ConcurrencyMode::ExclusiveWriter and Durability::Immediate",
                ));
            }
            location.journaled(Some(self.journal_limit))
        } else {
            location
        };
        let label = location.label();
        let deadline = Deadline::after(self.lock_timeout);
        let empty = location.size().map_err(|source| OpenError::Io {
            path: label.into(),
            source,
        })? == 0;
        if self.read_only {
            if empty {
                return Err(OpenError::NoStore { path: label.into() });
            }
            let db = self.read_only_store(&location, concurrency, deadline)?;
            return Ok(self.opened(Handle::ReadOnly(db), location, concurrency));
        }
        let current = !empty && self.precheck(&location, concurrency, deadline)?;
        let db = self.writable(&location, current, concurrency, deadline)?;
        Ok(self.opened(Handle::Writable(db), location, concurrency))
    }

    fn check_durability(&self, concurrency: ConcurrencyMode) -> Result<(), OpenError> {
        if matches!(self.durability, Durability::None)
            && concurrency != ConcurrencyMode::ExclusiveWriter
        {
            return Err(OpenError::Options(
                "durability None needs ConcurrencyMode::ExclusiveWriter: a commit held only in this process's memory is invisible to other processes",
            ));
        }
        Ok(())
    }

    fn opened(self, handle: Handle, location: Location, concurrency: ConcurrencyMode) -> Opened {
        let reopen = handle.writable().is_some().then(|| {
            let builder = self.clone();
            let reopen: Reopen = Box::new(move |location: &Location| {
                let deadline = Deadline::after(builder.lock_timeout);
                let current = builder.precheck(location, concurrency, deadline)?;
                let db = builder.writable(location, current, concurrency, deadline)?;
                Ok(Handle::Writable(db))
            });
            reopen
        });
        let room = match (location.path(), handle.writable()) {
            (Some(path), Some(_)) => crate::file::room::Room::of(path, self.space_reserve),
            _ => None,
        };
        Opened {
            alone: handle.writable().is_some() && concurrency == ConcurrencyMode::ExclusiveWriter,
            room,
            reopen,
            handle,
            location,
            config: self.config,
            durability: self.durability,
            lock_timeout: self.lock_timeout,
            replay_cache: self.replay_cache,
            floored: self.floored,
        }
    }

    fn redb_builder(&self, concurrency: ConcurrencyMode) -> redb::Builder {
        let mut builder = Database::builder();
        builder.set_concurrency_mode(concurrency);
        if let Some(bytes) = self.cache_size {
            builder.set_cache_size(bytes);
        }
        builder
    }
}
