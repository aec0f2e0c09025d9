//! An in-memory receiver: the protocol applied to records in a sorted `Vec`, for tests,
//! simulations and service workers that keep no file.
//!
//! It is the smallest correct driver of [`crate::protocol`]: each call reads the record,
//! runs the transition and applies its write before answering, exactly as a durable
//! store does inside one transaction. It holds the store-wide generation counter.

use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::protocol::{self, Decision, Refusal, Resolution, Swept, Write};
use crate::{
    Config, DecodeError, Fingerprint, Generation, Outcome, Record, RecordId, Timestamp, Verdict,
};

/// The format version of [`MemoryReceiver::snapshot`]. Version 2 added
/// [`Config::tombstone_retention_ms`] to the settings and tombstones to the records.
pub const SNAPSHOT_VERSION: u8 = 2;

/// The snapshot layout of format version 1, read by [`MemoryReceiver::restore`].
mod v1 {
    use alloc::vec::Vec;
    use serde::Deserialize;

    use crate::{Generation, LeaseExpiry, Record, RecordId};

    #[derive(Deserialize)]
    pub(super) struct Config {
        lease_ms: u64,
        success_retention_ms: u64,
        failure_retention_ms: u64,
        max_outcome_bytes: usize,
        on_lease_expiry: LeaseExpiry,
    }

    #[derive(Deserialize)]
    pub(super) struct MemoryReceiver {
        config: Config,
        generation: Generation,
        records: Vec<(RecordId, Record)>,
    }

    impl From<MemoryReceiver> for super::MemoryReceiver {
        fn from(v1: MemoryReceiver) -> super::MemoryReceiver {
            let Config {
                lease_ms,
                success_retention_ms,
                failure_retention_ms,
                max_outcome_bytes,
                on_lease_expiry,
            } = v1.config;
            super::MemoryReceiver {
                config: crate::Config {
                    lease_ms,
                    success_retention_ms,
                    failure_retention_ms,
                    max_outcome_bytes,
                    on_lease_expiry,
                    ..crate::Config::default()
                },
                generation: v1.generation,
                records: v1.records,
            }
        }
    }
}

/// Records by id, plus the generation counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReceiver {
    config: Config,
    generation: Generation,
    /// Sorted by id, no id twice. A sorted `Vec` rather than a `BTreeMap` (the map's code
    /// costs the npm package's wasm ~20 KB). postcard writes a map as its length and then
    /// each key and value, and a sequence of pairs the same way, so the snapshot bytes
    /// are those of the `BTreeMap` this replaced.
    records: Vec<(RecordId, Record)>,
}

impl MemoryReceiver {
    /// An empty receiver with `config`.
    #[must_use]
    pub fn new(config: Config) -> MemoryReceiver {
        MemoryReceiver {
            config,
            generation: Generation(0),
            records: Vec::new(),
        }
    }

    /// The settings in force.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The last generation handed out (0 before the first claim).
    #[must_use]
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The record under `id`, if any.
    #[must_use]
    pub fn get(&self, id: &RecordId) -> Option<&Record> {
        let at = self.position(id).ok()?;
        self.records.get(at).map(|(_, record)| record)
    }

    /// Every record, ordered by id.
    pub fn iter(&self) -> impl Iterator<Item = (&RecordId, &Record)> {
        self.records.iter().map(|(id, record)| (id, record))
    }

    /// A request with `fingerprint` arrives for `id`; see [`protocol::begin`].
    ///
    /// # Errors
    ///
    /// [`Refusal::GenerationsExhausted`] when the answer is a claim and the counter is at
    /// `u64::MAX` (a restored snapshot may hold any counter); nothing changes. Every
    /// other answer needs no new generation and is given as usual.
    pub fn begin(
        &mut self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Decision, Refusal> {
        let next = self.generation.0.checked_add(1).map(Generation);
        // At the end of the counter, the last generation stands in: only a claim would
        // take it, and a claim is refused.
        let candidate = next.unwrap_or(self.generation);
        let t = protocol::begin(self.get(id), fingerprint, candidate, now, &self.config);
        if matches!(t.decision, Decision::Claimed { .. }) {
            self.generation = next.ok_or(Refusal::GenerationsExhausted)?;
        }
        self.apply(id, t.write);
        Ok(t.decision)
    }

    /// See [`protocol::heartbeat`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn heartbeat(
        &mut self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let record = protocol::heartbeat(self.get(id), generation, now, &self.config)?;
        self.apply(id, Write::Put(record));
        Ok(())
    }

    /// See [`protocol::complete`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn complete(
        &mut self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let record = protocol::complete(
            self.get(id),
            generation,
            verdict,
            outcome,
            now,
            &self.config,
        )?;
        self.apply(id, Write::Put(record));
        Ok(())
    }

    /// See [`protocol::release`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn release(&mut self, id: &RecordId, generation: Generation) -> Result<(), Refusal> {
        let protocol::Delete = protocol::release(self.get(id), generation)?;
        self.apply(id, Write::Delete);
        Ok(())
    }

    /// See [`protocol::mark_unknown`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn mark_unknown(
        &mut self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let record = protocol::mark_unknown(self.get(id), generation, now)?;
        self.apply(id, Write::Put(record));
        Ok(())
    }

    /// See [`protocol::resolve`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn resolve(
        &mut self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let write = match protocol::resolve(self.get(id), resolution, now, &self.config)? {
            Some(record) => Write::Put(record),
            None => Write::Delete,
        };
        self.apply(id, write);
        Ok(())
    }

    /// Sweeps up to `limit` records past their expiry, oldest expiry first, and returns
    /// their ids: a settled record leaves its tombstone (see [`protocol::sweep`]), a
    /// tombstone past its own time is deleted. Pending and Unknown records are never
    /// swept.
    pub fn sweep(&mut self, now: Timestamp, limit: usize) -> Vec<RecordId> {
        let expiry = |r: &Record| r.expires_at().filter(|_| protocol::sweepable(r, now));
        let expired: Vec<(Timestamp, usize)> = self
            .records
            .iter()
            .enumerate()
            .filter_map(|(at, (_, r))| Some((expiry(r)?, at)))
            .collect();
        // Positions follow the ids, which are unique, so no two entries tie.
        let mut order =
            crate::order::sorted_positions(expired.len(), &mut |a, b| expired[a].cmp(&expired[b]));
        order.truncate(limit);
        let mut swept = Vec::with_capacity(order.len());
        let mut doomed = alloc::vec![false; self.records.len()];
        for &(_, at) in order.iter().filter_map(|&i| expired.get(i)) {
            let (id, record) = &mut self.records[at];
            swept.push(id.clone());
            match protocol::sweep(record, now, &self.config) {
                Swept::Tombstone(tombstone) => *record = tombstone,
                Swept::Delete => doomed[at] = true,
                Swept::Keep => {}
            }
        }
        let mut at = 0;
        self.records.retain(|_| {
            at += 1;
            !doomed[at - 1]
        });
        swept
    }

    /// The persisted bytes of the whole receiver, behind [`SNAPSHOT_VERSION`].
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        crate::encoding::encode_as(SNAPSHOT_VERSION, self)
    }

    /// A receiver from bytes made by [`MemoryReceiver::snapshot`], of this format version
    /// or version 1 (before tombstones: its settings get the default
    /// [`Config::tombstone_retention_ms`]).
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for bytes that do not decode, hold an invalid id, a record of a
    /// later generation than the counter, records not in strictly ascending id order
    /// (as `snapshot` writes them), or a tombstone in version 1 bytes.
    pub fn restore(bytes: &[u8]) -> Result<MemoryReceiver, DecodeError> {
        const WHAT: &str = "receiver snapshot";
        let (version, body) = crate::encoding::split_version(bytes, SNAPSHOT_VERSION)?;
        let receiver = if version == 1 {
            let v1: v1::MemoryReceiver = crate::encoding::decode_body(body, WHAT)?;
            v1.into()
        } else {
            crate::encoding::decode_body::<MemoryReceiver>(body, WHAT)?
        };
        let mut previous: Option<&RecordId> = None;
        let mut invalid = false;
        for (id, record) in &receiver.records {
            invalid |= id.validate().is_err()
                || record.generation > receiver.generation
                || previous.is_some_and(|p| p >= id)
                || (version == 1 && matches!(record.status, crate::Status::Tombstone { .. }));
            previous = Some(id);
        }
        if invalid {
            return Err(DecodeError::Invalid { what: WHAT });
        }
        Ok(receiver)
    }

    /// Where `id` is in `records`: `Ok` with its index, or `Err` with where it would go.
    fn position(&self, id: &RecordId) -> Result<usize, usize> {
        self.records.binary_search_by(|(other, _)| other.cmp(id))
    }

    fn apply(&mut self, id: &RecordId, write: Write) {
        match write {
            Write::Nothing => {}
            Write::Put(record) => match self.position(id) {
                Ok(at) => self.records[at].1 = record,
                Err(at) => self.records.insert(at, (id.clone(), record)),
            },
            Write::Delete => {
                if let Ok(at) = self.position(id) {
                    self.records.remove(at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::encode;
    use alloc::collections::BTreeMap;

    const T0: Timestamp = Timestamp(1_000);

    fn receiver() -> MemoryReceiver {
        MemoryReceiver::new(Config {
            success_retention_ms: 10_000,
            failure_retention_ms: 5_000,
            ..Config::default()
        })
    }

    fn id(key: &str) -> RecordId {
        RecordId::new("t", "op", key).unwrap()
    }

    /// Claims `key` at `at` and returns the generation.
    fn claim(r: &mut MemoryReceiver, key: &str, at: Timestamp) -> Generation {
        match r.begin(&id(key), Fingerprint::of_bytes(b"body"), at) {
            Ok(Decision::Claimed { generation, .. }) => generation,
            other => panic!("{key}: {other:?}"),
        }
    }

    /// Claims `key` at `at` and settles it with `verdict`.
    fn settle(r: &mut MemoryReceiver, key: &str, verdict: Verdict, at: Timestamp) {
        let generation = claim(r, key, at);
        r.complete(&id(key), generation, verdict, Outcome::new(200, "ok"), at)
            .unwrap();
    }

    fn keys(r: &MemoryReceiver) -> Vec<&str> {
        r.iter().map(|(id, _)| id.key()).collect()
    }

    /// A snapshot is input (the npm package's `MemoryReceiver.restore` takes the bytes a
    /// service worker kept; the fuzz target `receiver_snapshot` restores arbitrary bytes):
    /// restored with its counter at `u64::MAX`, the next claim panicked. A claim is
    /// refused; every other answer is still given.
    #[test]
    fn at_the_end_of_the_counter_a_claim_is_refused_and_the_rest_answered() {
        use alloc::string::ToString;
        let mut r = receiver();
        settle(&mut r, "a", Verdict::Succeeded, Timestamp(1));
        r.generation = Generation(u64::MAX);
        let restored = MemoryReceiver::restore(&r.snapshot()).unwrap();
        assert_eq!(restored, r);
        for mut r in [r, restored] {
            assert!(matches!(
                r.begin(&id("a"), Fingerprint::of_bytes(b"body"), Timestamp(2)),
                Ok(Decision::Replay { .. })
            ));
            let before = r.clone();
            let refused = r.begin(&id("b"), Fingerprint::of_bytes(b"body"), Timestamp(2));
            assert_eq!(refused, Err(Refusal::GenerationsExhausted));
            assert_eq!(r, before, "a refused claim changes nothing");
            assert_eq!(
                Refusal::GenerationsExhausted.to_string(),
                "generation counter exhausted: no generation after 18446744073709551615"
            );
        }
    }

    #[test]
    fn records_stay_ordered_by_id_whatever_the_order_of_writes() {
        let mut r = receiver();
        for key in ["m", "c", "x", "a", "n"] {
            claim(&mut r, key, T0);
        }
        assert_eq!(keys(&r), ["a", "c", "m", "n", "x"]);
        assert_eq!(r.get(&id("m")).unwrap().generation, Generation(1));
        assert_eq!(r.get(&id("n")).unwrap().generation, Generation(5));
        assert_eq!(r.get(&id("b")), None);

        r.release(&id("m"), Generation(1)).unwrap();
        r.complete(
            &id("c"),
            Generation(2),
            Verdict::Failed,
            Outcome::new(1, ""),
            T0,
        )
        .unwrap();
        assert_eq!(keys(&r), ["a", "c", "n", "x"]);
        assert_eq!(r.get(&id("c")).unwrap().state(), crate::State::Failed);
        assert_eq!(r.get(&id("m")), None);
        assert_eq!(
            r.release(&id("m"), Generation(1)),
            Err(Refusal::NotFound),
            "a released record is gone"
        );
    }

    #[test]
    fn sweep_takes_the_oldest_expiry_first_then_the_smallest_id() {
        let mut r = MemoryReceiver::new(Config {
            tombstone_retention_ms: 0,
            ..receiver().config
        });
        settle(&mut r, "a", Verdict::Succeeded, T0); // expires T0 + 10 000
        settle(&mut r, "c", Verdict::Failed, T0); // expires T0 + 5 000
        settle(&mut r, "b", Verdict::Failed, T0); // expires T0 + 5 000
        settle(&mut r, "d", Verdict::Succeeded, T0.plus_millis(1)); // T0 + 10 001
        claim(&mut r, "p", T0);
        let at = |ms| T0.plus_millis(ms);

        assert_eq!(r.sweep(at(4_999), 10), []);
        assert_eq!(r.sweep(at(7_000), 1), [id("b")]);
        assert_eq!(
            keys(&r),
            ["a", "c", "d", "p"],
            "c has b's expiry but is past the limit"
        );
        assert_eq!(r.sweep(at(7_000), 10), [id("c")]);
        assert_eq!(r.sweep(at(20_000), 0), []);
        assert_eq!(r.sweep(at(20_000), 10), [id("a"), id("d")]);
        assert_eq!(keys(&r), ["p"], "a pending record is never swept");
    }

    #[test]
    fn sweep_leaves_tombstones_that_answer_forgotten_then_removes_them() {
        let mut r = MemoryReceiver::new(Config {
            tombstone_retention_ms: 1_000,
            ..receiver().config
        });
        settle(&mut r, "a", Verdict::Succeeded, T0); // expires T0 + 10 000
        settle(&mut r, "b", Verdict::Failed, T0); // expires T0 + 5 000
        let at = |ms| T0.plus_millis(ms);
        assert_eq!(r.sweep(at(5_500), 10), [id("b")]);
        assert_eq!(keys(&r), ["a", "b"], "b is a tombstone now");
        assert_eq!(r.get(&id("b")).unwrap().state(), crate::State::Forgotten);
        assert!(matches!(
            r.begin(&id("b"), Fingerprint::of_bytes(b"body"), at(5_900)),
            Ok(Decision::Forgotten {
                verdict: Verdict::Failed,
                ..
            })
        ));
        // The tombstone's time ends 1 000 ms after the retention; a as well leaves one.
        assert_eq!(r.sweep(at(10_000), 10), [id("b"), id("a")]);
        assert_eq!(keys(&r), ["a"]);
        assert_eq!(r.sweep(at(11_000), 10), [id("a")]);
        assert_eq!(keys(&r), Vec::<&str>::new());
    }

    /// The snapshot layout of format version 1, before tombstones.
    #[derive(Serialize)]
    struct V1<'a> {
        config: (u64, u64, u64, usize, crate::LeaseExpiry),
        generation: Generation,
        records: Vec<(&'a RecordId, &'a Record)>,
    }

    #[test]
    fn a_version_1_snapshot_restores_with_default_tombstones() {
        let mut r = receiver();
        settle(&mut r, "z", Verdict::Succeeded, T0);
        claim(&mut r, "k", T0);
        let c = r.config().clone();
        let v1 = encode(&V1 {
            config: (
                c.lease_ms,
                c.success_retention_ms,
                c.failure_retention_ms,
                c.max_outcome_bytes,
                c.on_lease_expiry,
            ),
            generation: r.generation(),
            records: r.iter().collect(),
        });
        assert_eq!(v1[0], 1);
        let restored = MemoryReceiver::restore(&v1).unwrap();
        assert_eq!(restored, r);
        assert_eq!(
            restored.config().tombstone_retention_ms,
            Config::default().tombstone_retention_ms
        );
        // A tombstone in version 1 bytes was never written by a version 1 writer.
        let mut swept = r.clone();
        swept.sweep(T0.plus_millis(10_000), 10);
        let with_tombstone = encode(&V1 {
            config: (1, 1, 1, 1, crate::LeaseExpiry::Unknown),
            generation: swept.generation(),
            records: swept.iter().collect(),
        });
        assert_eq!(
            MemoryReceiver::restore(&with_tombstone),
            Err(DecodeError::Invalid {
                what: "receiver snapshot"
            })
        );
        let mut newer = r.snapshot();
        newer[0] = SNAPSHOT_VERSION + 1;
        assert!(matches!(
            MemoryReceiver::restore(&newer),
            Err(DecodeError::NewerFormat { .. })
        ));
    }

    /// The shape of the receiver when its records were a `BTreeMap`.
    #[derive(Serialize)]
    struct MapShaped<'a> {
        config: &'a Config,
        generation: Generation,
        records: BTreeMap<&'a RecordId, &'a Record>,
    }

    #[test]
    fn snapshot_bytes_are_those_of_a_map_of_records() {
        let mut r = receiver();
        settle(&mut r, "z", Verdict::Succeeded, T0);
        claim(&mut r, "k", T0);
        settle(&mut r, "a", Verdict::Failed, T0);
        let map = MapShaped {
            config: r.config(),
            generation: r.generation(),
            records: r.iter().collect(),
        };
        assert_eq!(
            r.snapshot(),
            crate::encoding::encode_as(SNAPSHOT_VERSION, &map)
        );
        assert_eq!(MemoryReceiver::restore(&r.snapshot()), Ok(r));
    }

    #[test]
    fn restore_refuses_records_out_of_order_twice_or_ahead_of_the_counter() {
        let mut r = receiver();
        claim(&mut r, "a", T0);
        claim(&mut r, "b", T0);
        assert_eq!(MemoryReceiver::restore(&r.snapshot()).as_ref(), Ok(&r));
        let invalid = Err(DecodeError::Invalid {
            what: "receiver snapshot",
        });

        let mut swapped = r.clone();
        swapped.records.swap(0, 1);
        assert_eq!(MemoryReceiver::restore(&swapped.snapshot()), invalid);
        let mut twice = r.clone();
        twice.records[1] = twice.records[0].clone();
        assert_eq!(MemoryReceiver::restore(&twice.snapshot()), invalid);
        let mut behind = r.clone();
        behind.generation = Generation(1);
        assert_eq!(MemoryReceiver::restore(&behind.snapshot()), invalid);
    }
}
