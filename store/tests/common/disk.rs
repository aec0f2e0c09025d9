//! A simulated disk under redb: a [`StorageBackend`] that keeps what was synced apart
//! from what was only written, so that a test can cut the power at any moment and
//! reopen the store from the bytes that survive, and that fails a chosen write or sync
//! with an I/O error.
//!
//! The model is a page cache in front of a disk whose sectors ([`SECTOR`] bytes) are
//! written atomically:
//!
//! - `write` and `set_len` change what reads see at once, and are *pending*: not yet on
//!   the disk.
//! - `sync_data` puts everything pending on the disk, in one step, when it succeeds.
//! - A power cut keeps the disk and, of each sector written since the last sync, any
//!   prefix of the writes to it (the cache may have written the sector back at any
//!   moment, with what it held then): an arbitrary subset of the pending writes, each one
//!   possibly torn at a sector boundary, later writes to a sector never without the
//!   earlier ones it covers. The file length is any of the lengths it had since the last
//!   sync; positions past the synced length that no surviving write reached read zero.
//! - A failed write changes nothing; a failed sync leaves everything pending (it may still
//!   reach the disk, or be lost with the power), or, as Linux does, loses it for good
//!   while reads still see it ([`SimDisk::lose_unsynced_on_failed_sync`]).
//!
//! The disk records a [`Cut`] at every sync, before the sync takes effect, and at random
//! writes: the state a power cut at that moment leaves, from which [`Cut::image`] makes the
//! bytes that survive. A workload runs once, uninterrupted, and every recorded moment is a
//! cut: nothing before a power cut depends on whether it comes.
//!
//! Two disks made by [`SimDisk::pair`] (a store's and its journal's) lose power together:
//! a cut recorded by either is the state of both, kept in the main disk's list, and
//! [`Cut::journal_image`] makes what survives on the journal's. (A pair records a cut
//! with both disks locked, the recording one first; the store's journal writes and
//! syncs either disk one call at a time, so no two cuts are recorded at once. A test
//! calls `cut_now` on a pair only while no store call is running on it.)

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use idem_store::redb::{BackendError, StorageBackend};

use super::Rng;

/// The unit a disk writes atomically.
pub const SECTOR: usize = 512;

/// An I/O operation a fault can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Write,
    Sync,
}

/// A pending change, in the order it was made.
#[derive(Debug, Clone)]
enum Pending {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

/// The state a power cut at one moment leaves: the disk, and what was pending.
#[derive(Clone)]
pub struct Cut {
    durable: Arc<Vec<u8>>,
    pending: Arc<Vec<Pending>>,
    /// The value of the disk's tag ([`SimDisk::tag_with`]) when the cut was recorded.
    pub tag: u64,
    /// True when recorded at a sync (else at a write).
    pub at_sync: bool,
    /// Of a pair's main disk: the journal disk's state at the same moment.
    journal: Option<Box<Cut>>,
}

impl fmt::Debug for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cut")
            .field("durable_bytes", &self.durable.len())
            .field("pending", &self.pending.len())
            .field("tag", &self.tag)
            .field("at_sync", &self.at_sync)
            .finish()
    }
}

/// Which of the pending writes survive a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Survival {
    /// None: the disk as of the last sync.
    Nothing,
    /// All of them: what reads saw.
    Everything,
    /// The first few, in the order they were made, the last of them torn: a disk that
    /// writes in order.
    InOrder,
    /// Of each sector, a random prefix of its writes; the length, a random one of those
    /// it had.
    Random,
}

impl Survival {
    pub const ALL: [Survival; 4] = [
        Survival::Nothing,
        Survival::Everything,
        Survival::InOrder,
        Survival::Random,
    ];
}

impl Cut {
    /// True when something was pending (on either disk of a pair): the survivals differ.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.journal.as_ref().is_some_and(|j| j.has_pending())
    }

    /// Of a pair's main disk, the bytes that survive on the journal disk when `survival`
    /// decides which of its pending writes do.
    pub fn journal_image(&self, survival: Survival, rng: &mut Rng) -> Option<Vec<u8>> {
        self.journal.as_ref().map(|j| j.image(survival, rng))
    }

    /// The bytes that survive the cut when `survival` decides which pending writes do.
    pub fn image(&self, survival: Survival, rng: &mut Rng) -> Vec<u8> {
        let mut lengths = vec![self.durable.len()];
        let mut live = self.durable.len();
        for op in self.pending.iter() {
            live = match op {
                Pending::Write { offset, data } => live.max(offset + data.len()),
                Pending::SetLen(len) => *len,
            };
            lengths.push(live);
        }
        match survival {
            Survival::Nothing => self.durable.to_vec(),
            Survival::Everything => self.apply(self.pending.len(), None, *lengths.last().unwrap()),
            Survival::InOrder => {
                let kept = rng.below(self.pending.len() as u64 + 1) as usize;
                // The first `kept` whole, then some sectors of the next one.
                let torn = (kept < self.pending.len()).then(|| rng.next_u64());
                self.apply(kept, torn, lengths[kept])
            }
            Survival::Random => {
                let len = lengths[rng.below(lengths.len() as u64) as usize];
                self.random(rng, len)
            }
        }
    }

    /// The disk with the first `kept` pending changes, then the sectors of change `kept`
    /// that `torn` selects (one bit per sector), cut or grown to `len`.
    fn apply(&self, kept: usize, torn: Option<u64>, len: usize) -> Vec<u8> {
        let mut image = self.durable.to_vec();
        for op in &self.pending[..kept] {
            apply(&mut image, op);
        }
        if let (Some(bits), Some(Pending::Write { offset, data })) = (torn, self.pending.get(kept))
        {
            for (i, (at, piece)) in sectors(*offset, data).enumerate() {
                if bits >> (i % 64) & 1 == 1 {
                    write_at(&mut image, at, piece);
                }
            }
        }
        image.resize(len, 0);
        image
    }

    /// Of each sector, a random prefix of the pending writes to it.
    fn random(&self, rng: &mut Rng, len: usize) -> Vec<u8> {
        let mut image = self.durable.to_vec();
        let mut by_sector: BTreeMap<usize, Vec<(usize, &[u8])>> = BTreeMap::new();
        for op in self.pending.iter() {
            match op {
                Pending::Write { offset, data } => {
                    for (at, piece) in sectors(*offset, data) {
                        by_sector.entry(at / SECTOR).or_default().push((at, piece));
                    }
                }
                // A shrink of the cache drops the sectors past it: later writes there
                // start from zeros, which is what the image holds past its length too.
                Pending::SetLen(_) => {}
            }
        }
        for pieces in by_sector.values() {
            let kept = rng.below(pieces.len() as u64 + 1) as usize;
            for (at, piece) in &pieces[..kept] {
                write_at(&mut image, *at, piece);
            }
        }
        image.resize(len, 0);
        image
    }
}

fn apply(image: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => write_at(image, *offset, data),
        Pending::SetLen(len) => image.resize(*len, 0),
    }
}

fn write_at(image: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if image.len() < offset + data.len() {
        image.resize(offset + data.len(), 0);
    }
    image[offset..offset + data.len()].copy_from_slice(data);
}

/// The pieces of a write at `offset`, split at sector boundaries.
fn sectors(offset: usize, data: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = offset;
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let room = SECTOR - at % SECTOR;
        let (piece, tail) = rest.split_at(room.min(rest.len()));
        let here = at;
        at += piece.len();
        rest = tail;
        Some((here, piece))
    })
}

struct DiskState {
    live: Vec<u8>,
    durable: Arc<Vec<u8>>,
    pending: Vec<Pending>,
    // Shared with the cuts recorded since the last change.
    pending_shared: Option<Arc<Vec<Pending>>>,
    writes: u64,
    syncs: u64,
    // Record a cut at a write with this probability (per 65,536), at every sync when on.
    record: Option<(Rng, u64)>,
    cuts: Vec<Cut>,
    tag: Option<Arc<AtomicU64>>,
    // Fail the write or sync with this 0-based number.
    fault: Option<(IoKind, u64)>,
    // The fault is ENOSPC rather than EIO.
    fault_enospc: bool,
    faulted: bool,
    // Out of space: every write, growth and sync fails with ENOSPC.
    full: bool,
    lose_on_failed_sync: bool,
    locks: Vec<(Bound<u64>, Bound<u64>)>,
    // Of a pair's main disk: the journal disk.
    journal: Option<SimDisk>,
    // Of a pair's journal disk: the main disk, which keeps the cuts.
    main: Option<Weak<Mutex<DiskState>>>,
}

/// The simulated disk; clones share it (the store gets one, the test keeps one).
#[derive(Clone)]
pub struct SimDisk(Arc<Mutex<DiskState>>);

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("SimDisk")
            .field("len", &state.live.len())
            .field("pending", &state.pending.len())
            .field("writes", &state.writes)
            .field("syncs", &state.syncs)
            .finish_non_exhaustive()
    }
}

impl Default for SimDisk {
    fn default() -> SimDisk {
        SimDisk::from_image(Vec::new())
    }
}

impl SimDisk {
    /// A disk holding `image`, all of it synced.
    pub fn from_image(image: Vec<u8>) -> SimDisk {
        SimDisk(Arc::new(Mutex::new(DiskState {
            live: image.clone(),
            durable: Arc::new(image),
            pending: Vec::new(),
            pending_shared: None,
            writes: 0,
            syncs: 0,
            record: None,
            cuts: Vec::new(),
            tag: None,
            fault: None,
            fault_enospc: false,
            faulted: false,
            full: false,
            lose_on_failed_sync: false,
            locks: Vec::new(),
            journal: None,
            main: None,
        })))
    }

    /// A store's disk and its journal's, holding `main` and `journal`, all synced, that
    /// lose power together (see the module documentation).
    pub fn pair(main: Vec<u8>, journal: Vec<u8>) -> (SimDisk, SimDisk) {
        let main = SimDisk::from_image(main);
        let journal = SimDisk::from_image(journal);
        journal.state().main = Some(Arc::downgrade(&main.0));
        main.state().journal = Some(journal.clone());
        (main, journal)
    }

    fn state(&self) -> MutexGuard<'_, DiskState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a [`Cut`] at every sync from now on, and at a write with probability
    /// `per_65536 / 65536`, choosing with `rng`.
    pub fn record_cuts(&self, mut rng: Rng, per_65536: u64) {
        let mut state = self.state();
        if let Some(journal) = &state.journal {
            journal.state().record = Some((Rng::new(rng.next_u64()), per_65536));
        }
        state.record = Some((rng, per_65536));
    }

    /// Stops recording cuts (on both disks of a pair).
    pub fn stop_recording(&self) {
        let mut state = self.state();
        if let Some(journal) = &state.journal {
            journal.state().record = None;
        }
        state.record = None;
    }

    /// Stamps every cut with the value `tag` holds when it is recorded.
    pub fn tag_with(&self, tag: Arc<AtomicU64>) {
        self.state().tag = Some(tag);
    }

    /// The cuts recorded since the last call.
    pub fn take_cuts(&self) -> Vec<Cut> {
        std::mem::take(&mut self.state().cuts)
    }

    /// The state a power cut now leaves.
    pub fn cut_now(&self) -> Cut {
        let mut state = self.state();
        let mut cut = state.cut(false);
        if let Some(journal) = &state.journal {
            cut.journal = Some(Box::new(journal.state().cut(false)));
        }
        cut
    }

    /// Fails the write or sync numbered `nth` (0-based, counted from the disk's creation)
    /// with an I/O error.
    pub fn fail(&self, kind: IoKind, nth: u64) {
        let mut state = self.state();
        state.fault = Some((kind, nth));
        state.fault_enospc = false;
        state.faulted = false;
    }

    /// [`SimDisk::fail`] with ENOSPC, as a disk that is full at that call.
    pub fn fail_full(&self, kind: IoKind, nth: u64) {
        self.fail(kind, nth);
        self.state().fault_enospc = true;
    }

    /// From now on, a failed sync loses the writes pending before it: they never reach
    /// the disk, though reads still see them (Linux marks the pages clean after an
    /// fsync error), and a later sync does not write them again.
    pub fn lose_unsynced_on_failed_sync(&self) {
        self.state().lose_on_failed_sync = true;
    }

    /// Fills the disk: from now on every write, growth and sync fails with ENOSPC, until
    /// [`SimDisk::free`]. Nothing pending is lost: it stays pending, as a page cache
    /// keeps it.
    pub fn fill(&self) {
        self.state().full = true;
    }

    /// Frees space on a full disk: writes and syncs succeed again.
    pub fn free(&self) {
        self.state().full = false;
    }

    /// True once the fault set with [`SimDisk::fail`] happened.
    pub fn faulted(&self) -> bool {
        self.state().faulted
    }

    /// Writes and syncs so far.
    pub fn counts(&self) -> (u64, u64) {
        let state = self.state();
        (state.writes, state.syncs)
    }

    /// What reads see now (the disk and the cache).
    pub fn live_image(&self) -> Vec<u8> {
        self.state().live.clone()
    }

    /// Whether anything is pending.
    pub fn has_pending(&self) -> bool {
        !self.state().pending.is_empty()
    }
}

impl DiskState {
    fn cut(&mut self, at_sync: bool) -> Cut {
        let pending = self
            .pending_shared
            .get_or_insert_with(|| Arc::new(self.pending.clone()))
            .clone();
        Cut {
            durable: self.durable.clone(),
            pending,
            tag: self.tag.as_ref().map_or(0, |t| t.load(Ordering::SeqCst)),
            at_sync,
            journal: None,
        }
    }

    /// Records the cut a power cut now leaves: of this disk, or, in a pair, of both,
    /// in the main disk's list.
    fn record(&mut self, at_sync: bool) {
        if let Some(main) = self.main.as_ref().and_then(Weak::upgrade) {
            let mine = self.cut(at_sync);
            let mut main = main.lock().unwrap_or_else(PoisonError::into_inner);
            let mut cut = main.cut(at_sync);
            cut.journal = Some(Box::new(mine));
            main.cuts.push(cut);
            return;
        }
        let mut cut = self.cut(at_sync);
        if let Some(journal) = &self.journal {
            cut.journal = Some(Box::new(journal.state().cut(at_sync)));
        }
        self.cuts.push(cut);
    }

    fn push(&mut self, op: Pending) {
        self.pending.push(op);
        self.pending_shared = None;
    }

    /// True when the operation numbered `n` of `kind` is the one to fail.
    fn fails(&mut self, kind: IoKind, n: u64) -> bool {
        if self.fault == Some((kind, n)) {
            self.faulted = true;
            return true;
        }
        false
    }
}

fn enospc(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        format!("simulated disk: {what} failed: No space left on device (ENOSPC)"),
    )
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated disk: {what} failed (EIO)"))
}

impl StorageBackend for SimDisk {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state().live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state();
        let offset = usize::try_from(offset).unwrap();
        let Some(bytes) = state.live.get(offset..offset + out.len()) else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        let len = usize::try_from(len).unwrap();
        if state.full && len > state.live.len() {
            return Err(enospc("growth"));
        }
        state.live.resize(len, 0);
        state.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state();
        let n = state.syncs;
        state.syncs += 1;
        if state.record.is_some() {
            state.record(true);
        }
        if state.full && !state.pending.is_empty() {
            return Err(enospc("sync"));
        }
        if state.fails(IoKind::Sync, n) {
            if state.lose_on_failed_sync {
                state.pending.clear();
                state.pending_shared = None;
            }
            return Err(if state.fault_enospc {
                enospc("sync")
            } else {
                eio("sync")
            });
        }
        if !state.pending.is_empty() {
            state.durable = Arc::new(state.live.clone());
            state.pending.clear();
            state.pending_shared = None;
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        let n = state.writes;
        state.writes += 1;
        if state.full {
            return Err(enospc("write"));
        }
        if state.fails(IoKind::Write, n) {
            return Err(if state.fault_enospc {
                enospc("write")
            } else {
                eio("write")
            });
        }
        let offset = usize::try_from(offset).unwrap();
        write_at(&mut state.live, offset, data);
        state.push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        let record = match &mut state.record {
            Some((rng, per_65536)) => rng.below(65_536) < *per_65536,
            None => false,
        };
        if record {
            state.record(false);
        }
        Ok(())
    }

    fn close(&self) -> io::Result<()> {
        self.state().locks.clear();
        Ok(())
    }

    // The disk belongs to one process, which the store's open takes once at a time:
    // every lock is granted and kept until released, and none is held elsewhere.
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.state().locks.push((start, end));
        Ok(true)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.try_lock_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.try_lock_range(start, end).map(drop)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.try_lock_range(start, end).map(drop)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        let mut state = self.state();
        match state.locks.iter().position(|held| *held == (start, end)) {
            Some(i) => {
                state.locks.swap_remove(i);
                Ok(())
            }
            None => Err(BackendError::Io(io::Error::other(
                "simulated disk: unlock of a range that is not locked",
            ))),
        }
    }

    fn query_lock_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<bool, BackendError> {
        Ok(false)
    }
}
