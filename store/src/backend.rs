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

/// What errors name instead of a path when the store is on a backend.
pub(crate) const BACKEND_LABEL: &str = "(storage backend)";

/// The bytes of a store, and whether an I/O error met them since the store opened.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    place: Place,
    io_failed: Arc<AtomicBool>,
}

#[derive(Debug, Clone)]
enum Place {
    /// A file, by the path it was opened from.
    File(PathBuf),
    /// The application's backend.
    Backend(Arc<dyn StorageBackend>),
}

impl Location {
    /// The file at `path`.
    pub(crate) fn file(path: &Path) -> Location {
        Location {
            place: Place::File(path.to_path_buf()),
            io_failed: Arc::default(),
        }
    }

    /// The application's `backend`.
    pub(crate) fn backend(backend: impl StorageBackend) -> Location {
        Location {
            place: Place::Backend(Arc::new(backend)),
            io_failed: Arc::default(),
        }
    }

    /// The path of a store file; `None` on a backend.
    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.place {
            Place::File(path) => Some(path),
            Place::Backend(_) => None,
        }
    }

    /// What an error names: the path, or [`BACKEND_LABEL`].
    pub(crate) fn label(&self) -> &Path {
        match &self.place {
            Place::File(path) => path,
            Place::Backend(_) => Path::new(BACKEND_LABEL),
        }
    }

    /// The size of the file, or the backend's length, in bytes.
    pub(crate) fn size(&self) -> io::Result<u64> {
        match &self.place {
            Place::File(path) => Ok(std::fs::metadata(path)?.len()),
            Place::Backend(backend) => backend.len(),
        }
    }

    /// True once a read, write, length or sync of the storage failed.
    pub(crate) fn io_failed(&self) -> bool {
        self.io_failed.load(Ordering::Acquire)
    }

    /// The storage for one redb open, read-only (the file opened for reading only) or
    /// not (the file opened for reading and writing, and created when missing, as
    /// [`redb::Builder::create`] does).
    pub(crate) fn open(&self, writable: bool) -> Result<Watched, DatabaseError> {
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
                Arc::new(FileBackend::new(file)?)
            }
            Place::Backend(backend) => Arc::clone(backend),
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
        let Place::Backend(backend) = &self.place else {
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
