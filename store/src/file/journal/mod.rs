//! The journal: a redo log beside the store file that turns each commit's scattered page
//! writes into one append and one sync.
//!
//! # Why
//!
//! A redb commit writes its pages wherever its B-trees' free pages are, and its sync
//! flushes them all; a sync after scattered pages costs several times one after the same
//! number of contiguous pages (the compare bench measures both). SQLite's WAL appends. A
//! [`Journaled`] storage does the same under redb: every write goes to the store file at
//! once (so reads see it, through the page cache) and is also kept in memory; at redb's
//! sync, the writes since the last one are appended to the journal as one checksummed
//! record, and the journal alone is synced. The store file is synced only at a
//! checkpoint, when the journal is full or closed.
//!
//! # Why nothing acknowledged is lost
//!
//! redb acknowledges a commit after its sync returns. Here that sync returns after the
//! record holding every write of the commit (and of every write since the previous sync)
//! is on the disk. At the next open, [`recover`] writes every whole record of the journal,
//! in order, over the store file, syncs it, and empties the journal. The store file then
//! holds every write up to the last whole record, plus possibly some writes made after it
//! that the page cache wrote back on its own: a state a plain disk can be left in by a
//! power cut after that sync, which redb's commit protocol recovers from. A record cut
//! short fails its checksum and ends the replay.
//!
//! A checkpoint syncs the store file first and only then empties the journal, by writing
//! a new header whose salt no older record carries. A cut between the two replays the
//! older records over a file that also holds the commit being checkpointed: the result
//! is the state after the last record with part of that (unacknowledged) commit's
//! writes, again a state a power cut after the last record's sync can leave.
//!
//! # When the disk fails, or the journal is not the file's
//!
//! After any failed write or sync of either file, the journal writes nothing more: every
//! later sync fails, and closing does not checkpoint (a failed fsync may have dropped
//! the file's unsynced pages; a second one would report success, and emptying the
//! journal then would lose the commits it alone holds). The next open replays it.
//!
//! The header names the store file it belongs to. A journal holding records for another
//! file (the one that crashed was replaced, say by a restored backup, and its journal
//! left beside it) is refused, never replayed over the new one.
//!
//! # Layout
//!
//! The header ([`HEADER_LEN`] bytes, one sector, written whole): `idem-jnl`, the format
//! version (u32), the salt (u64), the store file's identity (16 bytes: its device and
//! inode on Unix, zeros where there is none), the CRC-32 of the 36 bytes before it.
//! Then records, back to back: `IJRC`, the CRC-32 of the rest of the record, the salt
//! (u64), the record's number from 0 (u64), the payload length (u32), 4 zero bytes, and
//! the payload: operations, each a tag byte then, for a write (1), its offset (u64),
//! length (u32) and bytes; for a length change (2), the new length (u64); for zeros (3),
//! their offset (u64) and length (u32). All integers little-endian.
//! Only records carrying the header's salt and the next number count; the file keeps its
//! length between checkpoints, so its blocks are reused and a sync does not also write
//! the file's size.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::backends::FileBackend;
use redb::{BackendError, DatabaseError, StorageBackend};

mod record;
mod recover;

use record::*;
use recover::*;
pub(crate) use recover::{recover_backend, recover_file, remove_stale, sync_parent};

/// The journal's header length: one sector, so that its write is never torn.
pub(crate) const HEADER_LEN: u64 = 512;
/// The journal size past which a sync checkpoints instead of appending: 4 MiB.
pub(crate) const DEFAULT_JOURNAL_LIMIT: u64 = 4 << 20;
/// The smallest journal limit: a smaller one is raised to this.
const MIN_JOURNAL_LIMIT: u64 = HEADER_LEN + (64 << 10);

const MAGIC: &[u8; 8] = b"idem-jnl";
/// The largest journal limit: a record's length is a u32.
const MAX_JOURNAL_LIMIT: u64 = u32::MAX as u64;
const VERSION: u32 = 1;
const RECORD_MAGIC: &[u8; 4] = b"IJRC";
const RECORD_HEADER: usize = 32;
const WRITE: u8 = 1;
const SET_LEN: u8 = 2;
const ZERO: u8 = 3;

/// The journal file of the store file at `path`: `<path>-journal`.
pub(crate) fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

/// The store's storage with a journal in front of it; see the module documentation.
#[derive(Debug)]
pub(crate) struct Journaled {
    main: Arc<dyn StorageBackend>,
    journal: Arc<dyn StorageBackend>,
    limit: u64,
    state: Mutex<Appending>,
    // The store file's identity, written in the journal's header.
    owner: Owner,
    // The journal file's lock, held while the store is open: no other process replays
    // the journal under this one.
    _lock: Option<File>,
}

/// What identifies a store file across opens: its device and inode on Unix; zeros
/// where there is none (a backend, or another system), which matches every journal.
pub(crate) type Owner = [u8; 16];

/// The identity of the open store file `file`.
pub(crate) fn owner_of(file: &File) -> io::Result<Owner> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        let mut owner = [0; 16];
        owner[..8].copy_from_slice(&meta.dev().to_le_bytes());
        owner[8..].copy_from_slice(&meta.ino().to_le_bytes());
        Ok(owner)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok([0; 16])
    }
}

#[derive(Debug)]
struct Appending {
    salt: u64,
    // The number of the next record.
    seq: u64,
    // Where the next record goes.
    end: u64,
    // The next record: its header's room, then the operations since the last sync.
    record: Vec<u8>,
    // The operations since the last sync outgrew the journal: the next sync checkpoints.
    overflowed: bool,
    // A write or sync of either file failed: nothing more is written (see the module).
    failed: bool,
}

impl Appending {
    fn has_operations(&self) -> bool {
        self.overflowed || self.record.len() > RECORD_HEADER
    }

    fn clear(&mut self) {
        self.record.truncate(RECORD_HEADER);
        self.overflowed = false;
    }
}

impl Journaled {
    /// `main`, the store file `owner` names, with its journal on `journal`: replays what
    /// the journal holds over `main` ([`recover`]), then starts an empty journal.
    pub(crate) fn open(
        main: Arc<dyn StorageBackend>,
        journal: Arc<dyn StorageBackend>,
        limit: u64,
        owner: Owner,
        lock: Option<File>,
    ) -> io::Result<Journaled> {
        let limit = limit.clamp(MIN_JOURNAL_LIMIT, MAX_JOURNAL_LIMIT);
        preallocate(&*journal, limit)?;
        let salt = recover(&*main, &*journal, owner)?;
        let mut record = Vec::with_capacity(64 << 10);
        record.resize(RECORD_HEADER, 0);
        Ok(Journaled {
            main,
            journal,
            limit,
            state: Mutex::new(Appending {
                salt,
                seq: 0,
                end: HEADER_LEN,
                record,
                overflowed: false,
                failed: false,
            }),
            owner,
            _lock: lock,
        })
    }

    /// The store file at `path` (opened as `main`) with its journal beside it, created
    /// when missing. [`DatabaseError::DatabaseAlreadyOpen`] when another process holds the
    /// journal.
    pub(crate) fn open_file(
        main: File,
        path: &Path,
        limit: u64,
    ) -> Result<Journaled, DatabaseError> {
        let (journal, lock) = open_journal_file(path, true)
            .map_err(storage_io)?
            .ok_or(DatabaseError::DatabaseAlreadyOpen)?;
        let owner = owner_of(&main).map_err(storage_io)?;
        let main: Arc<dyn StorageBackend> = Arc::new(FileBackend::new(main)?);
        Journaled::open(main, journal, limit, owner, Some(lock)).map_err(storage_io)
    }

    fn state(&self) -> MutexGuard<'_, Appending> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes every write so far durable in the store file and empties the journal.
    fn checkpoint(&self, state: &mut Appending) -> io::Result<()> {
        self.main.sync_data()?;
        state.salt = state.salt.wrapping_add(1);
        reset(&*self.journal, state.salt, self.owner)?;
        state.seq = 0;
        state.end = HEADER_LEN;
        state.clear();
        Ok(())
    }

    /// Runs `io` on the files, unless an earlier call failed; a failure stops every later
    /// one (see the module documentation).
    fn guarded<T>(
        state: &mut Appending,
        io: impl FnOnce(&mut Appending) -> io::Result<T>,
    ) -> io::Result<T> {
        if state.failed {
            return Err(io::Error::other(
                "an earlier write or sync of the store or its journal failed: reopen the store",
            ));
        }
        let result = io(state);
        if result.is_err() {
            state.failed = true;
        }
        result
    }

    /// Keeps `op` (encoded by `encode`, `len` bytes) for the next record, unless the
    /// operations since the last sync no longer fit in the journal.
    fn keep(&self, state: &mut Appending, len: usize, encode: impl FnOnce(&mut Vec<u8>)) {
        if state.overflowed {
            return;
        }
        if (state.record.len() + len) as u64 > self.limit - HEADER_LEN {
            state.overflowed = true;
            state.record.truncate(RECORD_HEADER);
            state.record.shrink_to(64 << 10);
            return;
        }
        encode(&mut state.record);
    }
}

impl StorageBackend for Journaled {
    fn len(&self) -> io::Result<u64> {
        self.main.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.main.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        Self::guarded(&mut state, |state| {
            self.main.set_len(len)?;
            self.keep(state, 9, |record| {
                record.push(SET_LEN);
                record.extend_from_slice(&len.to_le_bytes());
            });
            Ok(())
        })
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if u32::try_from(data.len()).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a write of 4 GiB or more",
            ));
        }
        let mut state = self.state();
        Self::guarded(&mut state, |state| {
            self.main.write(offset, data)?;
            // Encoded, a write never takes more than this (see `encode_write`).
            self.keep(state, 13 + data.len(), |record| {
                encode_write(record, offset, data);
            });
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state();
        Self::guarded(&mut state, |state| {
            if !state.has_operations() {
                return Ok(());
            }
            let size = state.record.len() as u64;
            if state.overflowed || state.end + size > self.limit {
                return self.checkpoint(state);
            }
            let (salt, seq) = (state.salt, state.seq);
            seal(&mut state.record, salt, seq);
            self.journal.write(state.end, &state.record)?;
            self.journal.sync_data()?;
            state.end += size;
            state.seq += 1;
            state.clear();
            Ok(())
        })
    }

    fn close(&self) -> io::Result<()> {
        let mut state = self.state();
        // After a failure, the journal is left as it is for the next open to replay.
        let checkpointed = if state.failed {
            Ok(())
        } else if state.end > HEADER_LEN || state.has_operations() {
            Self::guarded(&mut state, |state| self.checkpoint(state))
        } else {
            Ok(())
        };
        let closed = self.main.close();
        let journal_closed = self.journal.close();
        checkpointed.and(closed).and(journal_closed)
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.main.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.main.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.main.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.main.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.main.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.main.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;

    fn image(backend: &dyn StorageBackend) -> Vec<u8> {
        let mut bytes = vec![0; backend.len().unwrap() as usize];
        backend.read(0, &mut bytes).unwrap();
        bytes
    }

    /// Bytes with runs of zeros of every length around the threshold, at every
    /// alignment, and bytes that are not zero.
    fn patterned(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let run = (state % 80) as usize;
            let fill = if state.is_multiple_of(3) {
                0
            } else {
                (state >> 8) as u8 | 1
            };
            bytes.extend(std::iter::repeat_n(fill, run.min(len - bytes.len())));
        }
        bytes
    }

    #[test]
    fn a_record_written_back_over_old_bytes_gives_the_written_bytes() {
        for seed in 0..200u64 {
            let data = patterned(4096 + (seed as usize % 9), seed);
            let offset = seed * 7 % 5000;
            let mut record = Vec::new();
            encode_write(&mut record, offset, &data);
            assert!(
                record.len() <= data.len() + 13,
                "seed {seed}: {} > {}",
                record.len(),
                data.len() + 13
            );
            let main = holding(&[0xAB; 10_000]);
            apply(&main, &record).unwrap();
            let after = image(&main);
            let at = offset as usize;
            assert_eq!(&after[at..at + data.len()], &data[..], "seed {seed}");
            assert!(
                after[..at].iter().all(|b| *b == 0xAB),
                "seed {seed}: wrote before"
            );
            assert!(
                after[at + data.len()..].iter().all(|b| *b == 0xAB),
                "seed {seed}: wrote after"
            );
        }
        // A page of zeros past a few entries is mostly one zeroing operation.
        let mut page = vec![0u8; 4096];
        page[..100].fill(7);
        let mut record = Vec::new();
        encode_write(&mut record, 0, &page);
        assert!(record.len() < 140, "{}", record.len());
    }

    /// A backend holding `bytes`.
    fn holding(bytes: &[u8]) -> InMemoryBackend {
        let backend = InMemoryBackend::new();
        backend.set_len(bytes.len() as u64).unwrap();
        backend.write(0, bytes).unwrap();
        backend
    }

    fn journaled(main: &Arc<InMemoryBackend>, journal: &Arc<InMemoryBackend>) -> Journaled {
        Journaled::open(
            Arc::clone(main) as Arc<dyn StorageBackend>,
            Arc::clone(journal) as Arc<dyn StorageBackend>,
            MIN_JOURNAL_LIMIT,
            [0; 16],
            None,
        )
        .unwrap()
    }

    #[test]
    fn recovery_replays_whole_records_in_order_and_stops_at_a_torn_one() {
        let main = Arc::new(InMemoryBackend::new());
        let journal = Arc::new(InMemoryBackend::new());
        let store = journaled(&main, &journal);
        store.set_len(8192).unwrap();
        store.write(0, &[1; 4096]).unwrap();
        store.sync_data().unwrap();
        store.write(4096, &[2; 4096]).unwrap();
        store.write(0, &[3; 10]).unwrap();
        store.sync_data().unwrap();
        let (end, salt) = {
            let state = store.state();
            (state.end, state.salt)
        };
        store.write(100, &[4; 10]).unwrap();
        store.sync_data().unwrap();
        let synced = image(&*main);
        let journal_bytes = image(&*journal);
        std::mem::forget(store);

        // Everything the syncs covered, over a file that lost all of it.
        let lost = InMemoryBackend::new();
        let full = holding(&journal_bytes);
        let next = recover(&lost, &full, [0; 16]).unwrap();
        assert_eq!(image(&lost), synced);
        assert_eq!(next, salt.wrapping_add(1));
        // Recovered, the journal is empty: a second recovery writes nothing.
        let untouched = InMemoryBackend::new();
        recover(&untouched, &full, [0; 16]).unwrap();
        assert_eq!(untouched.len().unwrap(), 0);

        // The third record torn: the first two are replayed, the third is not.
        let mut torn = journal_bytes.clone();
        torn[end as usize + RECORD_HEADER + 3] ^= 0xFF;
        let cut = holding(&torn);
        let lost = InMemoryBackend::new();
        recover(&lost, &cut, [0; 16]).unwrap();
        let replayed = image(&lost);
        assert_eq!(&replayed[0..10], &[3; 10]);
        assert_eq!(
            &replayed[100..110],
            &[1; 10],
            "the torn record was replayed"
        );
        assert_eq!(&replayed[4096..8192], &[2; 4096]);
    }

    #[test]
    fn records_of_an_older_salt_are_never_replayed() {
        let main = Arc::new(InMemoryBackend::new());
        let journal = Arc::new(InMemoryBackend::new());
        let store = journaled(&main, &journal);
        store.set_len(4096).unwrap();
        store.write(0, &[1; 4096]).unwrap();
        store.sync_data().unwrap();
        store.write(0, &[2; 4096]).unwrap();
        store.sync_data().unwrap();
        // A checkpoint empties the journal; the old records are still in its bytes.
        {
            let mut state = store.state();
            store.checkpoint(&mut state).unwrap();
        }
        let after_checkpoint = image(&*journal);
        assert!(!holds_records(&*journal).unwrap());
        std::mem::forget(store);
        let lost = InMemoryBackend::new();
        let copy = holding(&after_checkpoint);
        recover(&lost, &copy, [0; 16]).unwrap();
        assert_eq!(
            lost.len().unwrap(),
            0,
            "a record of the old salt was replayed"
        );
    }

    #[test]
    fn a_sync_past_the_limit_checkpoints_and_the_journal_never_grows() {
        let main = Arc::new(InMemoryBackend::new());
        let journal = Arc::new(InMemoryBackend::new());
        let store = journaled(&main, &journal);
        assert_eq!(journal.len().unwrap(), MIN_JOURNAL_LIMIT);
        store.set_len(1 << 20).unwrap();
        for i in 0..200u64 {
            store
                .write((i % 200) * 4096, &patterned(4096, i + 1))
                .unwrap();
            store.sync_data().unwrap();
        }
        // A write larger than the journal: the sync checkpoints.
        store
            .write(0, &patterned(MIN_JOURNAL_LIMIT as usize * 2, 9))
            .unwrap();
        assert!(store.state().overflowed);
        store.sync_data().unwrap();
        assert!(!holds_records(&*journal).unwrap());
        assert_eq!(journal.len().unwrap(), MIN_JOURNAL_LIMIT);
        store.close().unwrap();
    }
}
