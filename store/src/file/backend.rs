//! Where a store keeps its bytes (a file, or a redb [`StorageBackend`] the application
//! gives, [`crate::StoreBuilder::open_on_backend`]) and the watch on its I/O.
//!
//! redb reaches its storage through a [`Watched`] backend: every call is passed through
//! unchanged, and an I/O error is remembered. redb stops using a storage whose read,
//! write, length or sync failed (every later operation fails with
//! [`redb::StorageError::PreviousIo`] until the database is reopened), wherever the error
//! met it: in a commit, but also in a write transaction growing the file or evicting
//! pages, or in a read. The watch lets the store know that as it happens, so that
//! [`crate::Store::needs_reopen`] tells the truth and the next write is refused up front.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, DatabaseError, StorageBackend};

use crate::file::journal::{self, Journaled};

/// What errors name instead of a path when the store is on a backend.
pub(crate) const BACKEND_LABEL: &str = "(storage backend)";

/// The bytes of a store, and whether an I/O error met them since the store opened.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    place: Place,
    // A writable open puts a journal in front of the storage, which checkpoints once it
    // holds this many bytes (see `journal`).
    journal_limit: Option<u64>,
    io_failed: Arc<AtomicBool>,
}

#[derive(Debug, Clone)]
enum Place {
    /// A file, by the path it was opened from; its journal, if any, is beside it.
    File(PathBuf),
    /// The application's backend, and the one for its journal.
    Backend {
        main: Arc<dyn StorageBackend>,
        journal: Option<Arc<dyn StorageBackend>>,
    },
}

impl Location {
    /// The file at `path`.
    pub(crate) fn file(path: &Path) -> Location {
        Location {
            place: Place::File(path.to_path_buf()),
            journal_limit: None,
            io_failed: Arc::default(),
        }
    }

    /// The application's `backend`, with `journal` in front of it when given.
    pub(crate) fn backend(
        backend: impl StorageBackend,
        journal: Option<Arc<dyn StorageBackend>>,
    ) -> Location {
        Location {
            place: Place::Backend {
                main: Arc::new(backend),
                journal,
            },
            journal_limit: None,
            io_failed: Arc::default(),
        }
    }

    /// Writable opens of this location put a journal in front of the storage, which
    /// checkpoints past `limit` bytes; `None`: they do not.
    pub(crate) fn journaled(mut self, limit: Option<u64>) -> Location {
        self.journal_limit = limit;
        self
    }

    /// True when writable opens put a journal in front of the storage.
    pub(crate) fn is_journaled(&self) -> bool {
        self.journal_limit.is_some()
    }

    /// True when the application gave a backend for the journal.
    pub(crate) fn has_journal_backend(&self) -> bool {
        matches!(
            self.place,
            Place::Backend {
                journal: Some(_),
                ..
            }
        )
    }

    /// The path of a store file; `None` on a backend.
    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.place {
            Place::File(path) => Some(path),
            Place::Backend { .. } => None,
        }
    }

    /// What an error names: the path, or [`BACKEND_LABEL`].
    pub(crate) fn label(&self) -> &Path {
        match &self.place {
            Place::File(path) => path,
            Place::Backend { .. } => Path::new(BACKEND_LABEL),
        }
    }

    /// The size of the file, or the backend's length, in bytes.
    pub(crate) fn size(&self) -> io::Result<u64> {
        match &self.place {
            Place::File(path) => Ok(std::fs::metadata(path)?.len()),
            Place::Backend { main, .. } => main.len(),
        }
    }

    /// True once a read, write, length or sync of the storage failed.
    pub(crate) fn io_failed(&self) -> bool {
        self.io_failed.load(Ordering::Acquire)
    }

    /// Forgets a failure of the storage, for a reopen: the storage of the next open is
    /// watched afresh.
    pub(crate) fn clear_io_failed(&self) {
        self.io_failed.store(false, Ordering::Release);
    }

    /// The storage for one redb open, read-only (the file opened for reading only) or
    /// not (the file opened for reading and writing, and created when missing, as
    /// [`redb::Builder::create`] does).
    ///
    /// A writable open of a journaled location goes through a [`Journaled`] storage, which
    /// first replays what the journal holds. Any other open first replays a journal a
    /// crashed process left ([`journal::recover_file`]), or, read-only, fails with
    /// [`DatabaseError::RepairAborted`] when there is one to replay.
    pub(crate) fn open(&self, writable: bool) -> Result<Watched, DatabaseError> {
        let journal_limit = self.journal_limit.filter(|_| writable);
        let backend: Arc<dyn StorageBackend> = match &self.place {
            Place::File(path) => {
                let file: File = if writable {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(path)?
                } else {
                    OpenOptions::new().read(true).open(path)?
                };
                match journal_limit {
                    Some(limit) => Arc::new(Journaled::open_file(file, path, limit)?),
                    None => {
                        let owner = journal::owner_of(&file)?;
                        let main = FileBackend::new(file)?;
                        journal::recover_file(&main, path, owner, writable)?;
                        Arc::new(main)
                    }
                }
            }
            Place::Backend { main, journal } => match (journal, journal_limit) {
                (Some(journal), Some(limit)) => Arc::new(
                    Journaled::open(Arc::clone(main), Arc::clone(journal), limit, [0; 16], None)
                        .map_err(|e| DatabaseError::Storage(e.into()))?,
                ),
                (Some(journal), None) => {
                    journal::recover_backend(&**main, &**journal, [0; 16], writable)?;
                    Arc::clone(main)
                }
                (None, _) => Arc::clone(main),
            },
        };
        Ok(Watched {
            backend,
            io_failed: Arc::clone(&self.io_failed),
        })
    }

    /// Whether the backend implements redb's byte-range locks, which the multi-process
    /// modes ([`redb::ConcurrencyMode::SingleWriter`] and `MultiWriter`) need: a shared
    /// lock on byte 0 (a byte redb never locks) is taken and released again. A backend
    /// that reports an error other than "unsupported" is given the benefit of the doubt;
    /// redb then reports its errors when it opens. A file always locks.
    pub(crate) fn locks_ranges(&self) -> bool {
        let Place::Backend { main: backend, .. } = &self.place else {
            return true;
        };
        let (start, end) = (Bound::Included(0), Bound::Excluded(1));
        match backend.try_lock_shared_range(start, end) {
            Ok(true) => {
                // Held by this probe alone; a failed release shows at redb's first lock.
                let _ = backend.unlock_range(start, end);
                true
            }
            Ok(false) => true,
            Err(e) => io::Error::from(e).kind() != io::ErrorKind::Unsupported,
        }
    }
}

/// A storage as redb sees it: every call passed through, every I/O error remembered.
#[derive(Debug)]
pub(crate) struct Watched {
    backend: Arc<dyn StorageBackend>,
    io_failed: Arc<AtomicBool>,
}

impl Watched {
    fn watch<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if result.is_err() {
            self.io_failed.store(true, Ordering::Release);
        }
        result
    }
}

impl StorageBackend for Watched {
    fn len(&self) -> io::Result<u64> {
        self.watch(self.backend.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.watch(self.backend.read(offset, out))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.watch(self.backend.set_len(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.watch(self.backend.sync_data())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.watch(self.backend.write(offset, data))
    }

    fn close(&self) -> io::Result<()> {
        self.backend.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.backend.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.backend.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.backend.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.backend.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        let result = self.backend.unlock_range(start, end);
        // redb fails every later operation when a lock cannot be released.
        if result.is_err() {
            self.io_failed.store(true, Ordering::Release);
        }
        result
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.backend.query_lock_range(start, end)
    }
}
