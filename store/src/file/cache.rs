//! The replay cache: settled records kept in memory, so that a begin (or an execute) on a
//! settled key is answered without a redb transaction.
//!
//! # Why an answer from the cache is the one the file would give
//!
//! A settled record never changes before it expires (docs/design.md §2, invariant 1): sweep
//! deletes it only once `now >= expires_at`; a begin claims the key again only once
//! `now >= expires_at`; resolve applies only to Unknown, complete, heartbeat, release
//! and mark_unknown only to Pending; import refuses a different record under an
//! existing id. So for a cached settled record and a caller `now < expires_at`,
//! `protocol::begin(Some(&cached), ..)` answers Replay (same fingerprint) or Conflict
//! (another fingerprint) and writes nothing, which is exactly what the read path
//! (`snapshot.rs`) answers. A caller `now >= expires_at` drops the entry and takes the
//! normal path.
//!
//! Only settled records and tombstones enter, never Pending or Unknown, and only records
//! read from the file or committed to it (after the commit succeeded). A tombstone
//! never changes before its `expires_at` either (only sweep and a claiming begin touch
//! it, both at or past it), so the same argument holds for it: it answers Forgotten or
//! Conflict and writes nothing. When sweep turns a settled record into its tombstone,
//! it removes the cached entry as for a delete.
//!
//! Callers pass their own clocks, which may disagree. In this process, a settled record
//! is replaced or deleted only by a begin or a sweep whose `now` is at or past its
//! `expires_at`. Every lookup and every sweep first raises the cache's *horizon* to its
//! `now`, before it can write, and an entry whose `expires_at` is at or below the
//! horizon is never served (it is dropped). So once this process may have displaced a
//! record, no caller of this process, whatever its clock, gets it from the cache again:
//! it reads the file. A sweep also removes the entries of the records it deleted. An
//! import removes the entries of the keys it wrote and bumps the *epoch*; a record read
//! or committed before that bump is not inserted after it (an insert carries the epoch
//! seen before its read began), so an import can never be shadowed by an older read.
//!
//! Several processes: another process can delete a record only after its expiry by
//! that process's clock (its sweep, or its begin claiming the key again). A caller here
//! whose clock is behind may still replay the record from the cache until its own
//! clock reaches `expires_at`; that is the answer its own read path would have given a
//! moment before the other process committed, and the same outcome bytes the record
//! always held: nothing settled is ever replayed past the expiry of the caller's clock,
//! so the cache never extends retention.
//!
//! # Bounds
//!
//! At most `capacity` entries, and at most [`REPLAY_CACHE_BYTES`] of keys and outcome
//! bodies in all (a record whose body exceeds [`REPLAY_CACHE_MAX_BODY`] is not kept),
//! evicted first in, first out. Eviction only sends a lookup to the file, so its order
//! never changes an answer. One mutex, held for
//! a hash lookup and an `Arc` clone; the protocol decision runs outside it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idem_core::{Record, Timestamp};

/// The default number of settled records a [`crate::Store`] keeps in memory.
pub(crate) const DEFAULT_REPLAY_CACHE: usize = 4096;

/// The most bytes of keys and outcome bodies the replay cache holds, whatever its
/// entry capacity: 16 MiB.
pub(crate) const REPLAY_CACHE_BYTES: usize = 16 << 20;

/// The largest outcome body the replay cache keeps: 64 KiB. Larger ones are replayed
/// from the file.
pub(crate) const REPLAY_CACHE_MAX_BODY: usize = 64 << 10;

/// The bytes an entry counts against [`REPLAY_CACHE_BYTES`].
fn weight(id_key: &[u8], record: &Record) -> usize {
    let body = match &record.status {
        idem_core::Status::Settled { outcome, .. } => outcome.body.len(),
        idem_core::Status::Pending { .. }
        | idem_core::Status::Unknown
        | idem_core::Status::Tombstone { .. } => 0,
    };
    id_key.len() + body
}

/// Settled records by id key, bounded; see the module documentation.
pub(crate) struct ReplayCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    // Each entry with the sequence number of its insertion, which the ring names.
    entries: HashMap<Vec<u8>, (u64, Arc<Record>)>,
    // The sum of the entries' weights.
    bytes: usize,
    // Insertion order, oldest first; a ring slot whose sequence number no longer
    // matches its entry is stale and skipped.
    ring: VecDeque<(u64, Vec<u8>)>,
    next_seq: u64,
    // The highest `now` of any lookup or sweep: entries expiring at or before it are
    // never served.
    horizon: Timestamp,
    // Bumped by every import; inserts from before a bump are refused.
    epoch: u64,
}

/// The epoch [`ReplayCache::epoch`] handed out before a record was read or written, which
/// [`ReplayCache::insert`] takes back with the record: an insert from before an import's
/// bump is refused. Neither copied nor made by callers, so each is given back once.
#[derive(Debug)]
#[must_use = "give the epoch back to ReplayCache::insert with the record"]
pub(crate) struct Epoch(u64);

impl Inner {
    /// Removes the entry under `id_key`, if any; its ring slot goes stale.
    fn take(&mut self, id_key: &[u8]) {
        if let Some((_, record)) = self.entries.remove(id_key) {
            self.bytes -= weight(id_key, &record);
        }
    }
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            capacity,
            inner: Mutex::default(),
        }
    }

    fn enabled(&self) -> bool {
        self.capacity > 0
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settled record under `id_key` that a caller at `now` may be answered from.
    /// Raises the horizon to `now` first; drops an entry that has expired by it.
    pub(crate) fn lookup(&self, id_key: &[u8], now: Timestamp) -> Option<Arc<Record>> {
        if !self.enabled() {
            return None;
        }
        let mut inner = self.inner();
        inner.horizon = inner.horizon.max(now);
        let horizon = inner.horizon;
        let (_, record) = inner.entries.get(id_key)?;
        if record.expires_at().is_some_and(|at| at > horizon) {
            return Some(Arc::clone(record));
        }
        inner.take(id_key);
        None
    }

    /// The settled record under `id_key` while it has not expired by the horizon, for a
    /// read that has no time of its own ([`crate::Store::get`]); the horizon stays.
    pub(crate) fn live(&self, id_key: &[u8]) -> Option<Arc<Record>> {
        if !self.enabled() {
            return None;
        }
        let inner = self.inner();
        let (_, record) = inner.entries.get(id_key)?;
        record
            .expires_at()
            .is_some_and(|at| at > inner.horizon)
            .then(|| Arc::clone(record))
    }

    /// Raises the horizon to `now`: called before a write that may displace settled
    /// records expired at `now` (a sweep).
    pub(crate) fn raise_horizon(&self, now: Timestamp) {
        if self.enabled() {
            let mut inner = self.inner();
            inner.horizon = inner.horizon.max(now);
        }
    }

    /// The cache's epoch, handed out to be given back to [`ReplayCache::insert`] with the
    /// record: take it before reading or writing the record.
    pub(crate) fn epoch(&self) -> Epoch {
        if !self.enabled() {
            return Epoch(0);
        }
        Epoch(self.inner().epoch)
    }

    /// Keeps `record`, read from or committed to the file under `id_key` after `epoch`
    /// was read, when it is settled, not expired by the horizon, and no import ran since.
    pub(crate) fn insert(&self, id_key: &[u8], record: &Record, Epoch(epoch): Epoch) {
        if !self.enabled() {
            return;
        }
        let Some(expires_at) = record.expires_at() else {
            return;
        };
        let weight = weight(id_key, record);
        if weight > REPLAY_CACHE_MAX_BODY + id_key.len() {
            return;
        }
        {
            let inner = self.inner();
            if inner.epoch != epoch || expires_at <= inner.horizon {
                return;
            }
            if let Some((_, cached)) = inner.entries.get(id_key) {
                // Already kept (a settled record does not change while it is live).
                if **cached == *record {
                    return;
                }
            }
        }
        // Copied outside the lock, which other callers wait for; checked again under it.
        let (key, slot_key, kept) = (id_key.to_vec(), id_key.to_vec(), Arc::new(record.clone()));
        let mut inner = self.inner();
        if inner.epoch != epoch || expires_at <= inner.horizon {
            return;
        }
        inner.take(id_key);
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.entries.insert(key, (seq, kept));
        inner.bytes += weight;
        inner.ring.push_back((seq, slot_key));
        while inner.entries.len() > self.capacity || inner.bytes > REPLAY_CACHE_BYTES {
            let Some((seq, key)) = inner.ring.pop_front() else {
                break;
            };
            if inner.entries.get(&key).is_some_and(|(s, _)| *s == seq) {
                inner.take(&key);
            }
        }
        // Removals leave stale ring slots behind: drop them before the ring outgrows
        // the entries by much.
        if inner.ring.len() > 2 * self.capacity + 16 {
            let Inner { entries, ring, .. } = &mut *inner;
            ring.retain(|(seq, key)| entries.get(key).is_some_and(|(s, _)| s == seq));
        }
    }

    /// Removes the entries of `id_keys` (records a sweep deleted).
    pub(crate) fn remove<'k>(&self, id_keys: impl IntoIterator<Item = &'k [u8]>) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.inner();
        for key in id_keys {
            inner.take(key);
        }
    }

    /// Removes the entries of `id_keys` (records an import wrote) and bumps the epoch,
    /// so that no read from before the import inserts one of them again.
    pub(crate) fn invalidate<'k>(&self, id_keys: impl IntoIterator<Item = &'k [u8]>) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.inner();
        for key in id_keys {
            inner.take(key);
        }
        inner.epoch += 1;
    }

    /// The number of records kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner().entries.len()
    }

    /// The bytes counted against [`REPLAY_CACHE_BYTES`].
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.inner().bytes
    }

    /// The number of ring slots, stale ones included.
    #[cfg(test)]
    fn ring_len(&self) -> usize {
        self.inner().ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::{Config, Fingerprint, Generation, Outcome, Verdict, protocol};

    fn settled(n: u64, expires_at: u64) -> Record {
        let config = Config::default();
        let pending = protocol::begin(
            None,
            Fingerprint::of_bytes(&n.to_be_bytes()),
            Generation(n + 1),
            Timestamp(0),
            &config,
        )
        .write;
        let idem_core::Write::Put(pending) = pending else {
            unreachable!()
        };
        let mut record = protocol::complete(
            Some(&pending),
            pending.generation,
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            Timestamp(0),
            &config,
        )
        .unwrap();
        if let idem_core::Status::Settled { expires_at: at, .. } = &mut record.status {
            *at = Timestamp(expires_at);
        }
        record
    }

    #[test]
    fn holds_at_most_capacity_entries_first_in_first_out() {
        let cache = ReplayCache::new(3);
        for n in 0..10u64 {
            cache.insert(&n.to_be_bytes(), &settled(n, 1_000), cache.epoch());
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.lookup(&9u64.to_be_bytes(), Timestamp(1)).is_some());
        assert!(cache.lookup(&6u64.to_be_bytes(), Timestamp(1)).is_none());
        // Removals and reinsertions never let the ring grow without bound.
        for round in 0..100u64 {
            let key = (round % 5).to_be_bytes();
            cache.remove([&key[..]]);
            cache.insert(&key, &settled(round % 5, 1_000), cache.epoch());
            assert!(cache.len() <= 3 && cache.ring_len() <= 2 * 3 + 16 + 1);
        }
    }

    #[test]
    fn holds_at_most_its_byte_budget() {
        let cache = ReplayCache::new(100_000);
        let mut big = settled(1, 1_000);
        if let idem_core::Status::Settled { outcome, .. } = &mut big.status {
            outcome.body = vec![7; REPLAY_CACHE_MAX_BODY];
        }
        for n in 0..(REPLAY_CACHE_BYTES / REPLAY_CACHE_MAX_BODY + 10) as u64 {
            cache.insert(&n.to_be_bytes(), &big, cache.epoch());
            assert!(cache.bytes() <= REPLAY_CACHE_BYTES);
        }
        assert!(cache.len() < REPLAY_CACHE_BYTES / REPLAY_CACHE_MAX_BODY);
        // A body over the per-entry limit is not kept.
        if let idem_core::Status::Settled { outcome, .. } = &mut big.status {
            outcome.body.push(0);
        }
        cache.insert(b"huge", &big, cache.epoch());
        assert!(cache.lookup(b"huge", Timestamp(1)).is_none());
        let keys: Vec<[u8; 8]> = (0..300u64).map(u64::to_be_bytes).collect();
        cache.remove(keys.iter().map(|k| &k[..]));
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    #[test]
    fn disabled_keeps_nothing() {
        let cache = ReplayCache::new(0);
        cache.insert(b"k", &settled(1, 1_000), cache.epoch());
        assert_eq!(cache.len(), 0);
        assert!(cache.lookup(b"k", Timestamp(1)).is_none());
    }

    #[test]
    fn nothing_is_served_at_or_past_the_horizon() {
        let cache = ReplayCache::new(8);
        cache.insert(b"k", &settled(1, 1_000), cache.epoch());
        assert!(cache.lookup(b"k", Timestamp(999)).is_some());
        // A caller at the expiry drops it ...
        assert!(cache.lookup(b"k", Timestamp(1_000)).is_none());
        assert_eq!(cache.len(), 0);
        // ... and a caller whose clock is behind does not get it back from a late insert.
        cache.insert(b"k", &settled(1, 1_000), cache.epoch());
        assert!(cache.lookup(b"k", Timestamp(5)).is_none());
        // A sweep raises the horizon before it writes.
        cache.insert(b"j", &settled(2, 2_000), cache.epoch());
        assert!(cache.live(b"j").is_some());
        cache.raise_horizon(Timestamp(2_000));
        assert!(cache.live(b"j").is_none());
        assert!(cache.lookup(b"j", Timestamp(5)).is_none());
    }

    #[test]
    fn an_insert_from_before_an_import_is_refused() {
        let cache = ReplayCache::new(8);
        let epoch = cache.epoch();
        cache.invalidate([&b"k"[..]]);
        cache.insert(b"k", &settled(1, 1_000), epoch);
        assert_eq!(cache.len(), 0);
        cache.insert(b"k", &settled(1, 1_000), cache.epoch());
        assert_eq!(cache.len(), 1);
        // Only settled records enter.
        let mut pending = settled(2, 1_000);
        pending.status = idem_core::Status::Unknown;
        cache.insert(b"u", &pending, cache.epoch());
        assert_eq!(cache.len(), 1);
    }
}
