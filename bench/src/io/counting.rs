//! The counting storage: a file under redb with every read, write and sync counted.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_store::redb::backends::FileBackend;
use idem_store::redb::{BackendError, StorageBackend};
use serde::Serialize;

/// Running totals of one storage's calls.
#[derive(Debug, Default)]
struct Totals {
    writes: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
}

/// Calls a storage received, from [`Counter::now`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Calls {
    /// `write` calls.
    pub writes: u64,
    /// Bytes those calls wrote.
    pub bytes_written: u64,
    /// `sync_data` calls (fsyncs).
    pub syncs: u64,
    /// `read` calls (those redb's page cache did not answer).
    pub reads: u64,
    /// Bytes those calls read.
    pub bytes_read: u64,
}

impl std::ops::Sub for Calls {
    type Output = Calls;

    fn sub(self, before: Calls) -> Calls {
        Calls {
            writes: self.writes - before.writes,
            bytes_written: self.bytes_written - before.bytes_written,
            syncs: self.syncs - before.syncs,
            reads: self.reads - before.reads,
            bytes_read: self.bytes_read - before.bytes_read,
        }
    }
}

/// Reads the totals of a [`Counting`] storage, which redb owns once the store is open.
#[derive(Debug, Clone)]
pub struct Counter(Arc<Totals>);

impl Counter {
    /// The calls so far.
    #[must_use]
    pub fn now(&self) -> Calls {
        let t = &self.0;
        Calls {
            writes: t.writes.load(Ordering::Relaxed),
            bytes_written: t.bytes_written.load(Ordering::Relaxed),
            syncs: t.syncs.load(Ordering::Relaxed),
            reads: t.reads.load(Ordering::Relaxed),
            bytes_read: t.bytes_read.load(Ordering::Relaxed),
        }
    }
}

/// A file, through redb's own [`FileBackend`] (locks included, so the multi-process
/// modes work), with every read, write and sync counted.
#[derive(Debug)]
pub struct Counting {
    file: FileBackend,
    totals: Arc<Totals>,
}

impl Counting {
    /// The file at `path`, created when missing, and the counter of its calls.
    ///
    /// # Errors
    ///
    /// Opening the file.
    pub fn create(path: &Path) -> io::Result<(Counting, Counter)> {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let totals = Arc::<Totals>::default();
        let counting = Counting {
            file: FileBackend::new(file).map_err(io::Error::other)?,
            totals: Arc::clone(&totals),
        };
        Ok((counting, Counter(totals)))
    }
}

impl StorageBackend for Counting {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.totals.reads.fetch_add(1, Ordering::Relaxed);
        self.totals
            .bytes_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.totals.syncs.fetch_add(1, Ordering::Relaxed);
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.totals.writes.fetch_add(1, Ordering::Relaxed);
        self.totals
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.file.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}
