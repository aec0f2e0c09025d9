//! Unit tests of the store across its features: the replay cache, batching hints and
//! the snapshot answers, with the store's internals in reach.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict, protocol};

use crate::file::store::Store;
use crate::seam::report::{Consumed, Executed};

fn settle(store: &Store, id: &RecordId, fp: Fingerprint) {
    let ran = store
        .execute(id, fp, Timestamp(1), |_| {
            Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, id.key()), ()))
        })
        .unwrap();
    assert!(matches!(ran, Executed::Ran { .. }));
}

/// In the multi-process mode, a retry the cache does not hold, made while a batch
/// runs, joins a batch, which answers it and keeps the record for the next retry;
/// when the batch has run too long (waiting for another process), or in a single
/// process, the snapshot answers instead. Through begin and execute_grouped alike.
#[test]
fn while_a_batch_runs_a_shared_store_answers_an_uncached_retry_by_a_batch_and_keeps_it() {
    use crate::file::group::BATCHING_FOR;
    use redb::ConcurrencyMode;
    let replay = |store: &Store, id: &RecordId, fp: Fingerprint, grouped: bool| {
        let decision = if grouped {
            match store
                .execute_grouped(id, fp, Timestamp(2), |_| {
                    Ok::<_, ()>((Verdict::Succeeded, Outcome::new(500, "ran"), ()))
                })
                .unwrap()
            {
                Executed::NotRun(decision) => decision,
                ran => panic!("{ran:?}"),
            }
        } else {
            store.begin(id, fp, Timestamp(2)).unwrap()
        };
        assert!(matches!(decision, Decision::Replay { .. }), "{decision:?}");
    };
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        for grouped in [false, true] {
            let context = format!("{mode:?}, grouped {grouped}");
            let dir = tempfile::tempdir().unwrap();
            let store = Store::builder()
                .concurrency(mode)
                .open(dir.path().join("idem.redb"))
                .unwrap();
            let id = RecordId::new("t", "o", "k").unwrap();
            let key = id.to_key_bytes();
            let fp = Fingerprint::of_bytes(b"x");
            settle(&store, &id, fp);
            let batches = || store.commit_counts().batches;

            store.shared.cache.remove([key.as_slice()]);
            store.shared.committer.pretend_batching(None);
            let before = batches();
            replay(&store, &id, fp, grouped);
            let joined = mode == ConcurrencyMode::MultiWriter;
            assert_eq!(batches() - before, u64::from(joined), "{context}");
            assert!(
                store.shared.cache.live(&key).is_some(),
                "{context}: not kept"
            );

            // Kept: the next retry needs no batch.
            store.shared.committer.pretend_batching(None);
            let before = batches();
            replay(&store, &id, fp, grouped);
            assert_eq!(batches(), before, "{context}");

            // A batch that has run too long: the snapshot answers.
            store.shared.cache.remove([key.as_slice()]);
            store
                .shared
                .committer
                .pretend_batching(Some(2 * BATCHING_FOR));
            let before = batches();
            replay(&store, &id, fp, grouped);
            assert_eq!(batches(), before, "{context}");
        }
    }
}

/// A consume on a used token past its ttl and its record's retention, within the
/// tombstone's, is admitted as Forgotten (from the snapshot) even while batches run
/// in the multi-process mode: the batch's step admits by the token's entry, which
/// has expired, and would refuse it.
#[test]
fn a_consume_is_answered_from_the_snapshot_while_a_batch_runs() {
    const HOUR: u64 = 3_600_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("idem.redb")).unwrap();
    let t0 = 1_750_000_000_000;
    let issued = store
        .issue_token("shop", "redeem", HOUR, None, [7; 16], Timestamp(t0))
        .unwrap();
    let id = RecordId::new("shop", "redeem", issued.token().as_str()).unwrap();
    let fp = Fingerprint::of_bytes(b"voucher");
    let used = store
        .consume_execute(&id, fp, Timestamp(t0 + 1), |_| {
            Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, "redeemed"), ()))
        })
        .unwrap();
    assert!(matches!(used, Consumed::Admitted(Executed::Ran { .. })));
    let later = Timestamp(t0 + 25 * HOUR);
    store.shared.cache.remove([id.to_key_bytes().as_slice()]);
    store.shared.committer.pretend_batching(None);
    let again = store.consume(&id, fp, later).unwrap();
    assert!(
        matches!(again, Consumed::Admitted(Decision::Forgotten { .. })),
        "{again:?}"
    );
}

/// Inside a batch's work, which runs on its leader's thread while that batch has just
/// begun, a begin on a settled key the cache does not hold is answered from the
/// snapshot: it cannot join a batch there (that would be refused as re-entrant).
#[test]
fn inside_a_batchs_work_a_begin_on_a_settled_key_is_answered_from_the_snapshot() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path().join("idem.redb")).unwrap());
    let settled = RecordId::new("t", "o", "settled").unwrap();
    let fp = Fingerprint::of_bytes(b"x");
    settle(&store, &settled, fp);
    store
        .shared
        .cache
        .remove([settled.to_key_bytes().as_slice()]);
    let inner = Arc::clone(&store);
    let ran = store
        .execute_grouped(
            &RecordId::new("t", "o", "fresh").unwrap(),
            fp,
            Timestamp(2),
            move |_| {
                let answer = inner
                    .begin(&settled, fp, Timestamp(2))
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((Verdict::Succeeded, Outcome::new(200, "ok"), answer))
            },
        )
        .unwrap();
    let Executed::Ran { value, .. } = ran else {
        panic!("{ran:?}")
    };
    assert!(matches!(value, Decision::Replay { .. }), "{value:?}");
}

#[test]
fn a_cached_replay_needs_no_redb_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("idem.redb")).unwrap();
    let id = RecordId::new("t", "o", "k").unwrap();
    let fp = Fingerprint::of_bytes(b"x");
    settle(&store, &id, fp);
    let stored = store.get(&id).unwrap().unwrap();
    // With the database taken exclusively, only the cache can answer.
    let db = store.shared.writer.exclusive().unwrap();
    let (send, answered) = mpsc::channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let replay = store.begin(&id, fp, Timestamp(2)).unwrap();
            let conflict = store
                .begin(&id, Fingerprint::of_bytes(b"y"), Timestamp(2))
                .unwrap();
            send.send((replay, conflict)).unwrap();
        });
        let (replay, conflict) = answered.recv_timeout(Duration::from_secs(10)).unwrap();
        drop(db);
        let expected = protocol::begin(
            Some(&stored),
            fp,
            stored.generation,
            Timestamp(2),
            &store.shared.config,
        );
        assert_eq!(replay, expected.decision);
        assert!(matches!(replay, Decision::Replay { .. }));
        assert!(matches!(conflict, Decision::Conflict { .. }));
    });
}

#[test]
fn the_cache_holds_at_most_its_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .replay_cache(8)
        .open(dir.path().join("idem.redb"))
        .unwrap();
    let ids: Vec<RecordId> = (0..50)
        .map(|n| RecordId::new("t", "o", &format!("k{n}")).unwrap())
        .collect();
    for id in &ids {
        settle(&store, id, Fingerprint::of_bytes(id.key().as_bytes()));
        assert!(store.shared.cache.len() <= 8);
    }
    for id in ids.iter().rev() {
        let fp = Fingerprint::of_bytes(id.key().as_bytes());
        assert!(matches!(
            store.begin(id, fp, Timestamp(2)).unwrap(),
            Decision::Replay { .. }
        ));
        assert!(store.shared.cache.len() <= 8);
    }
    assert_eq!(store.shared.cache.len(), 8);
    let off = Store::builder()
        .replay_cache(0)
        .open(dir.path().join("off.redb"))
        .unwrap();
    settle(&off, &ids[0], Fingerprint::of_bytes(b"k0"));
    assert_eq!(off.shared.cache.len(), 0);
}
