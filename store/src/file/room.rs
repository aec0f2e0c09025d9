//! The room kept for settles (docs/store.md): a claim is refused while the free space of
//! the store file's filesystem is below a reserve, so that the claims already made can
//! still settle, release or turn Unknown on a disk that fills up, and settles never
//! compete with new claims for the last bytes. The free space is read from the
//! filesystem (statvfs) at most every 100 ms.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Error;

/// The default reserve: 4 MiB, room for a few settles of the largest outcome the default
/// settings keep (1 MiB) with the pages a commit copies.
pub(crate) const DEFAULT_RESERVE: u64 = 4 << 20;

/// How long a reading of the free space is used before it is read again.
const FRESH: Duration = Duration::from_millis(100);

/// The reserve of one store file.
#[derive(Debug)]
pub(crate) struct Room {
    dir: PathBuf,
    reserve: u64,
    read: Mutex<Option<(Instant, Option<u64>)>>,
}

impl Room {
    /// The reserve of `reserve` bytes on the filesystem holding the file at `path`;
    /// `None` for a reserve of 0.
    pub(crate) fn of(path: &Path, reserve: u64) -> Option<Room> {
        if reserve == 0 {
            return None;
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Some(Room {
            dir,
            reserve,
            read: Mutex::new(None),
        })
    }

    /// Refuses a claim when the free space is below the reserve; a filesystem that
    /// cannot tell its free space refuses nothing.
    pub(crate) fn for_claim(&self) -> Result<(), Error> {
        match self.free() {
            Some(free) if free < self.reserve => Err(Error::NoRoom {
                dir: self.dir.display().to_string(),
                free,
                reserve: self.reserve,
            }),
            _ => Ok(()),
        }
    }

    fn free(&self) -> Option<u64> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, free)) = *read
            && at.elapsed() < FRESH
        {
            return free;
        }
        let free = free_bytes(&self.dir);
        *read = Some((Instant::now(), free));
        free
    }
}

#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}
