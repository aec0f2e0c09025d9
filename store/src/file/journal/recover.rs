//! Recovery at open: the journal file, its owner and lock, and writing what a crash left in it into the store.

use super::*;

/// A salt no journal of this store used lately, for a journal without a valid header.
pub(super) fn fresh_salt() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Replays the journal's whole records over `main`, the store file `owner` names, syncs
/// `main` when any were, and empties the journal with a new salt, which it returns.
///
/// A journal whose records belong to another store file is refused
/// ([`io::ErrorKind::InvalidData`], which an open reports as a corrupt store).
pub(crate) fn recover(
    main: &dyn StorageBackend,
    journal: &dyn StorageBackend,
    owner: Owner,
) -> io::Result<u64> {
    let salt = match read_journal(journal)? {
        Some((bytes, salt, belongs_to)) => {
            let found = records(&bytes, salt);
            if !found.is_empty() && !same_owner(belongs_to, owner) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "its journal holds {} commits of another store file (device and inode {}; this file's are {}). If this file replaced the one that crashed, move the journal away to open it without them; if the two were copied together, open them where they were",
                        found.len(),
                        describe(belongs_to),
                        describe(owner)
                    ),
                ));
            }
            for payload in &found {
                apply(main, payload)?;
            }
            if !found.is_empty() {
                main.sync_data()?;
            }
            salt.wrapping_add(1)
        }
        None => fresh_salt(),
    };
    reset(journal, salt, owner)?;
    Ok(salt)
}

/// Whether a journal of `belongs_to` may be replayed over the file `owner` names: the
/// same file, or one side without an identity (a backend).
pub(super) fn same_owner(belongs_to: Owner, owner: Owner) -> bool {
    belongs_to == owner || belongs_to == [0; 16] || owner == [0; 16]
}

pub(super) fn describe(owner: Owner) -> String {
    format!("{}:{}", u64_at(&owner, 0), u64_at(&owner, 8))
}

/// Whether the journal holds records not yet written into the store file.
pub(crate) fn holds_records(journal: &dyn StorageBackend) -> io::Result<bool> {
    Ok(match read_journal(journal)? {
        Some((bytes, salt, _)) => !records(&bytes, salt).is_empty(),
        None => false,
    })
}

/// The journal of the store file at `path` and its lock: `None` when another process
/// holds it. Created when missing and `writable`; a writable open syncs its directory
/// entry, whoever created it (a process that created it may have died before syncing
/// it), before anything is appended to it.
pub(super) fn open_journal_file(
    path: &Path,
    writable: bool,
) -> io::Result<Option<(Arc<dyn StorageBackend>, File)>> {
    let journal = journal_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .create(writable)
        .truncate(false)
        .open(&journal)?;
    if !lock(&file, writable)? {
        return Ok(None);
    }
    // A creator that found no store file removed the journal a deleted one left
    // (`remove_stale`) after this open and before this lock: this file is no longer the
    // journal. The open is tried again.
    if !same_file(&file, &journal) {
        return Ok(None);
    }
    if writable {
        sync_parent(&journal)?;
    }
    let backend = FileBackend::new(file.try_clone()?).map_err(database_io)?;
    Ok(Some((Arc::new(backend), file)))
}

/// Locks `file`, exclusively or shared; false when another process holds it.
pub(super) fn lock(file: &File, exclusive: bool) -> io::Result<bool> {
    let locked = if exclusive {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match locked {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Whether `path` still names the open `file`.
#[cfg(unix)]
pub(super) fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
pub(super) fn same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// Before a new store file is placed at `path`: removes the journal a deleted store file
/// left there, so that it is never replayed over the new one. Done under the journal's
/// lock and only while no store file is at `path`, so that no process can have written a
/// journal of the new file yet; left alone while another process holds it.
pub(crate) fn remove_stale(path: &Path) -> io::Result<()> {
    let journal = journal_path(path);
    let file = match OpenOptions::new().read(true).write(true).open(&journal) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !lock(&file, true)? {
        return Ok(());
    }
    let no_store = match std::fs::metadata(path) {
        Ok(meta) => meta.len() == 0,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(e) => return Err(e),
    };
    if no_store && same_file(&file, &journal) {
        std::fs::remove_file(&journal)?;
    }
    Ok(())
}

pub(super) fn database_io(e: DatabaseError) -> io::Error {
    match e {
        DatabaseError::Storage(redb::StorageError::Io(e)) => e,
        other => io::Error::other(other.to_string()),
    }
}

/// Before a store file at `path` (already opened as `main`, the file `owner` names) is
/// opened without a journal: replays a journal a crashed process left, when `writable`.
/// [`DatabaseError::DatabaseAlreadyOpen`] while another process holds the journal;
/// [`DatabaseError::RepairAborted`] when the open is read-only and the journal holds
/// records (only a writable open replays them).
pub(crate) fn recover_file(
    main: &dyn StorageBackend,
    path: &Path,
    owner: Owner,
    writable: bool,
) -> Result<(), DatabaseError> {
    if !journal_path(path).exists() {
        return Ok(());
    }
    // Held: a process has the file open through its journal (and the file to itself),
    // or is replaying it; either way the open waits, as for redb's own lock.
    let Some((journal, _lock)) = open_journal_file(path, writable).map_err(storage_io)? else {
        return Err(DatabaseError::DatabaseAlreadyOpen);
    };
    recover_backend(main, &*journal, owner, writable)
}

/// Before a store is opened without a journal: replays what `journal` holds over `main`
/// when `writable`; [`DatabaseError::RepairAborted`] when the open is read-only and the
/// journal holds records (only a writable open replays them).
pub(crate) fn recover_backend(
    main: &dyn StorageBackend,
    journal: &dyn StorageBackend,
    owner: Owner,
    writable: bool,
) -> Result<(), DatabaseError> {
    if !holds_records(journal).map_err(storage_io)? {
        return Ok(());
    }
    if !writable {
        return Err(DatabaseError::RepairAborted);
    }
    recover(main, journal, owner).map_err(storage_io)?;
    Ok(())
}

pub(super) fn storage_io(e: io::Error) -> DatabaseError {
    DatabaseError::Storage(redb::StorageError::Io(e))
}

/// Makes the directory entry of `path` durable.
pub(crate) fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
        _ => std::fs::File::open(".")?.sync_all(),
    }
}
