//! A replica's caches, for every server engine: settled records it read or wrote,
//! answered from memory (the replay cache), and the entities it last read or moved.
//!
//! A settled record does not change until it expires, so any replica may replay it
//! without asking the database, as long as it is sure the record has not expired. The
//! time is the database's: the cache keeps the last time a statement read from the
//! database's clock and counts on from it with this process's monotonic clock, so a
//! step of the system clock changes nothing; and it answers only for records whose
//! expiry is more than [`MARGIN_MS`] ahead of that estimate. Pending, unknown and
//! forgotten records are never kept: they always come from the database.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

#[cfg(feature = "postgres")]
use idem_core::Entity;
use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Generation, Record, RecordId, Status, Timestamp, Write};

#[cfg(feature = "postgres")]
use crate::seam::entity::EntityId;

/// How far ahead of the estimated database time a cached record's expiry must be for
/// the cache to answer: room for the database's own clock to step and for the estimate
/// to lag.
pub(crate) const MARGIN_MS: u64 = 60_000;

pub(crate) struct ReplayCache {
    capacity: usize,
    entries: Mutex<Entries>,
    clock: Mutex<Option<(Timestamp, Instant)>>,
}

#[derive(Default)]
struct Entries {
    records: HashMap<RecordId, Record>,
    /// Insertion order, for eviction.
    order: VecDeque<RecordId>,
}

impl ReplayCache {
    /// A cache of at most `capacity` records; 0 keeps none.
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            capacity,
            entries: Mutex::default(),
            clock: Mutex::new(None),
        }
    }

    /// A statement read `now` from the database's clock.
    pub(crate) fn observe(&self, now: Timestamp) {
        let mut clock = self
            .clock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *clock {
            Some((seen, _)) if seen > now => {}
            _ => *clock = Some((now, Instant::now())),
        }
    }

    /// The database's time now, as far as this replica can tell without asking.
    fn estimate(&self) -> Option<Timestamp> {
        let clock = self
            .clock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clock.map(|(seen, at)| {
            let elapsed = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
            seen.plus_millis(elapsed)
        })
    }

    /// Keeps `record` if it is settled.
    pub(crate) fn keep(&self, id: &RecordId, record: &Record) {
        if self.capacity == 0 || !matches!(record.status, Status::Settled { .. }) {
            return;
        }
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.records.insert(id.clone(), record.clone()).is_none() {
            entries.order.push_back(id.clone());
        }
        while entries.records.len() > self.capacity {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            entries.records.remove(&oldest);
        }
    }

    /// The core's answer to a begin of `id` with `fingerprint` from the cached record,
    /// when it is a replay or a conflict and the record is surely not expired.
    pub(crate) fn answer(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        config: &Config,
    ) -> Option<Decision> {
        let now = self.estimate()?;
        let record = {
            let entries = self
                .entries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            entries.records.get(id)?.clone()
        };
        let expires_at = record.expires_at()?;
        if now.plus_millis(MARGIN_MS) >= expires_at {
            return None;
        }
        // The stand-in generation is never used: a settled, unexpired record is never
        // claimed.
        let decided = protocol::begin(Some(&record), fingerprint, Generation(0), now, config);
        match (decided.write, decided.decision) {
            (Write::Nothing, decision @ (Decision::Replay { .. } | Decision::Conflict { .. })) => {
                Some(decision)
            }
            _ => None,
        }
    }
}

/// The entities a replica last read or moved, for a move in one statement: the core
/// decides on the entity as this replica last saw it, and the move is written only if
/// the row is still exactly that (its version); otherwise the engine reads the row and
/// the core decides again. Only an applied move is taken from it: an answer that writes
/// nothing (already there, illegal, version mismatch) always comes from the database.
/// (PostgreSQL's alone so far: the other engines read the entity before each move.)
#[cfg(feature = "postgres")]
pub(crate) struct EntityCache {
    capacity: usize,
    entries: Mutex<Bounded<EntityId, Entity>>,
}

/// A map that forgets its oldest entries past its capacity.
#[cfg(feature = "postgres")]
struct Bounded<K, V> {
    values: HashMap<K, V>,
    order: VecDeque<K>,
}

#[cfg(feature = "postgres")]
impl EntityCache {
    /// A cache of at most `capacity` entities; 0 keeps none.
    pub(crate) fn new(capacity: usize) -> EntityCache {
        EntityCache {
            capacity,
            entries: Mutex::new(Bounded {
                values: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    pub(crate) fn get(&self, id: &EntityId) -> Option<Entity> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.values.get(id).cloned()
    }

    pub(crate) fn keep(&self, id: &EntityId, entity: &Entity) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.values.insert(id.clone(), entity.clone()).is_none() {
            entries.order.push_back(id.clone());
        }
        while entries.values.len() > self.capacity {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            entries.values.remove(&oldest);
        }
    }

    /// Drops what this replica saw of `id` (another writer moved it), and its place in
    /// the order, so that keeping it again neither queues it twice nor lets the order
    /// outgrow the capacity.
    pub(crate) fn forget(&self, id: &EntityId) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.values.remove(id).is_some() {
            entries.order.retain(|kept| kept != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::{Outcome, Verdict};

    fn settled(expires_at: u64) -> Record {
        Record {
            fingerprint: Fingerprint([1; 32]),
            generation: Generation(3),
            created_at: Timestamp(1_000),
            updated_at: Timestamp(1_000),
            status: Status::Settled {
                verdict: Verdict::Succeeded,
                outcome: Outcome::new(200, "ok"),
                completed_at: Timestamp(1_000),
                expires_at: Timestamp(expires_at),
            },
        }
    }

    #[test]
    fn answers_replays_and_conflicts_only_well_before_expiry() {
        let cache = ReplayCache::new(2);
        let config = Config::default();
        let id = RecordId::new("t", "o", "k").unwrap();
        cache.keep(&id, &settled(1_000 + 3_600_000));
        assert_eq!(
            cache.answer(&id, Fingerprint([1; 32]), &config),
            None,
            "no clock read yet"
        );
        cache.observe(Timestamp(2_000));
        assert!(matches!(
            cache.answer(&id, Fingerprint([1; 32]), &config),
            Some(Decision::Replay { .. })
        ));
        assert!(matches!(
            cache.answer(&id, Fingerprint([2; 32]), &config),
            Some(Decision::Conflict { .. })
        ));
        // Within the margin of its expiry: the database answers.
        cache.observe(Timestamp(1_000 + 3_600_000 - MARGIN_MS));
        assert_eq!(cache.answer(&id, Fingerprint([1; 32]), &config), None);
        // Never kept: pending records; and the oldest goes past the capacity.
        let pending = Record {
            status: Status::Pending {
                lease_until: Timestamp(9_999_999),
            },
            ..settled(0)
        };
        let other = RecordId::new("t", "o", "p").unwrap();
        cache.keep(&other, &pending);
        assert!(!cache.entries.lock().unwrap().records.contains_key(&other));
        for key in ["a", "b"] {
            cache.keep(
                &RecordId::new("t", "o", key).unwrap(),
                &settled(u64::MAX / 2),
            );
        }
        assert!(!cache.entries.lock().unwrap().records.contains_key(&id));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn an_entity_forgotten_and_kept_again_takes_one_place() {
        let cache = EntityCache::new(4);
        let id = EntityId::new("t", "account", "a").unwrap();
        let entity = Entity {
            state: "open".into(),
            version: 1,
            updated_at: Timestamp(1_000),
        };
        for _ in 0..100 {
            cache.keep(&id, &entity);
            cache.forget(&id);
        }
        cache.keep(&id, &entity);
        let entries = cache.entries.lock().unwrap();
        assert_eq!((entries.values.len(), entries.order.len()), (1, 1));
    }
}
