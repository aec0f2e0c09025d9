//! The receiver protocol on a real redb file: every input of the two-phase path, the
//! answers and the records they leave, and the generation counter across reopen.

use crate::common::{T0, fp, id};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Generation, LeaseExpiry, Outcome, Refusal, State, Status, Timestamp, Verdict,
};
use idem_store::{Error, Store};

fn at(ms: u64) -> Timestamp {
    Timestamp(T0 + ms)
}

fn open(dir: &tempfile::TempDir, config: Config) -> Store {
    Store::builder()
        .config(config)
        .open(dir.path().join("idem.redb"))
        .unwrap()
}

fn claimed(decision: Decision) -> Generation {
    match decision {
        Decision::Claimed { generation, .. } => generation,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

#[test]
fn begin_answers_every_state_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Config::default());
    let key = id("shop", "charge", "k-1");

    let generation = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
    assert_eq!(generation, Generation(1));
    let pending = store.get(&key).unwrap().unwrap();
    assert_eq!(
        pending.status,
        Status::Pending {
            lease_until: at(30_000)
        }
    );

    assert_eq!(
        store.begin(&key, fp("a"), at(10)).unwrap(),
        Decision::InProgress {
            generation,
            lease_until: at(30_000)
        }
    );
    assert_eq!(
        store.begin(&key, fp("b"), at(10)).unwrap(),
        Decision::Conflict {
            state: State::Pending,
            stored_fingerprint: fp("a")
        }
    );

    let settled = store
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "done"),
            at(20),
        )
        .unwrap();
    assert_eq!(settled.state(), State::Succeeded);
    assert_eq!(store.get(&key).unwrap(), Some(settled));
    assert_eq!(
        store.begin(&key, fp("a"), at(30)).unwrap(),
        Decision::Replay {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(201, "done"),
            completed_at: at(20)
        }
    );
    assert!(matches!(
        store.begin(&key, fp("b"), at(30)).unwrap(),
        Decision::Conflict {
            state: State::Succeeded,
            ..
        }
    ));

    // Past its retention the outcome is forgotten: a retry does not run again.
    let defaults = Config::default();
    let expired = at(20 + defaults.success_retention_ms);
    assert_eq!(
        store.begin(&key, fp("a"), expired).unwrap(),
        Decision::Forgotten {
            generation,
            verdict: Verdict::Succeeded,
            completed_at: at(20)
        }
    );
    // Past the tombstone's time too, the key is claimable again, with a new generation.
    let forgotten = expired.plus_millis(defaults.tombstone_retention_ms);
    assert_eq!(
        claimed(store.begin(&key, fp("b"), forgotten).unwrap()),
        Generation(2)
    );
}

#[test]
fn an_expired_lease_becomes_unknown_or_is_taken_over_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Config::default());
    let key = id("shop", "charge", "k-1");
    let first = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
    assert_eq!(
        store.begin(&key, fp("a"), at(30_000)).unwrap(),
        Decision::NeedsReconciliation { generation: first }
    );
    assert_eq!(store.get(&key).unwrap().unwrap().state(), State::Unknown);
    // The late executor is fenced: Unknown is not its Pending record any more.
    assert!(matches!(
        store.complete(
            &key,
            first,
            Verdict::Succeeded,
            Outcome::default(),
            at(30_001)
        ),
        Err(Error::Refused(Refusal::Stale { .. }))
    ));
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    let takeover = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        ..Config::default()
    };
    let store = open(&dir, takeover);
    let first = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
    let second = claimed(store.begin(&key, fp("a"), at(30_000)).unwrap());
    assert!(second > first);
    assert!(matches!(
        store.heartbeat(&key, first, at(30_001)),
        Err(Error::Refused(Refusal::Stale { given, current, state: State::Pending }))
            if given == first && current == second
    ));
    store.heartbeat(&key, second, at(30_001)).unwrap();
}

#[test]
fn heartbeat_release_mark_unknown_and_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Config::default());
    let key = id("shop", "charge", "k-1");
    let absent = id("shop", "charge", "nobody");

    assert!(matches!(
        store.heartbeat(&absent, Generation(1), at(0)),
        Err(Error::Refused(Refusal::NotFound))
    ));
    assert!(matches!(
        store.release(&absent, Generation(1), at(0)),
        Err(Error::Refused(Refusal::NotFound))
    ));

    let generation = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
    let renewed = store.heartbeat(&key, generation, at(20_000)).unwrap();
    assert_eq!(renewed.lease_until(), Some(at(50_000)));
    assert_eq!(store.get(&key).unwrap(), Some(renewed));
    // The renewed lease holds past the first lease's end.
    assert!(matches!(
        store.begin(&key, fp("a"), at(40_000)).unwrap(),
        Decision::InProgress { .. }
    ));

    store.release(&key, generation, at(40_001)).unwrap();
    assert_eq!(store.get(&key).unwrap(), None);
    let again = claimed(store.begin(&key, fp("a"), at(40_002)).unwrap());
    assert!(again > generation);

    let unknown = store.mark_unknown(&key, again, at(40_003)).unwrap();
    assert_eq!(unknown.state(), State::Unknown);
    assert_eq!(
        store.begin(&key, fp("a"), at(40_004)).unwrap(),
        Decision::NeedsReconciliation { generation: again }
    );
    assert!(matches!(
        store.release(&key, again, at(40_005)),
        Err(Error::Refused(Refusal::Stale { .. }))
    ));

    // resolve(NotExecuted) deletes: a retry claims a fresh generation.
    assert_eq!(
        store
            .resolve(&key, Resolution::NotExecuted, at(40_006))
            .unwrap(),
        None
    );
    let third = claimed(store.begin(&key, fp("a"), at(40_007)).unwrap());
    assert!(third > again);
    store.mark_unknown(&key, third, at(40_008)).unwrap();
    let resolved = store
        .resolve(
            &key,
            Resolution::Failed(Outcome::new(402, "declined")),
            at(40_009),
        )
        .unwrap()
        .unwrap();
    assert_eq!(resolved.state(), State::Failed);
    assert!(matches!(
        store.resolve(&key, Resolution::NotExecuted, at(40_010)),
        Err(Error::Refused(Refusal::WrongState {
            state: State::Failed,
            expected: State::Unknown
        }))
    ));
    assert_eq!(
        store.begin(&key, fp("a"), at(40_011)).unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            outcome: Outcome::new(402, "declined"),
            completed_at: at(40_009)
        }
    );
}

#[test]
fn refusals_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_outcome_bytes: 4,
        ..Config::default()
    };
    let store = open(&dir, config);
    let key = id("shop", "charge", "k-1");
    let generation = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
    let before = store.get(&key).unwrap();
    let err = store
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "too long"),
            at(1),
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "outcome: 8 bytes, at most 4");
    let err = store
        .complete(
            &key,
            Generation(99),
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            at(1),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "generation 99 is stale: the record is pending with generation 1; only the current pending generation may act"
    );
    assert_eq!(store.get(&key).unwrap(), before);
    assert_eq!(store.generation().unwrap(), Generation(1));
}

#[test]
fn generations_keep_increasing_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = Generation(0);
    for round in 0..4 {
        let store = open(&dir, Config::default());
        assert_eq!(store.generation().unwrap(), last);
        for n in 0..5 {
            let key = id("shop", "charge", &format!("r{round}-{n}"));
            let generation = claimed(store.begin(&key, fp("a"), at(0)).unwrap());
            assert!(generation > last, "{generation} after {last}");
            last = generation;
            if n % 2 == 0 {
                // A released key's generation is never handed out again.
                store.release(&key, generation, at(1)).unwrap();
            }
        }
    }
    assert_eq!(last, Generation(20));
}

#[test]
fn many_threads_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Config::default());
    let key = id("shop", "charge", "contended");
    let decisions: Vec<Decision> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| scope.spawn(|| store.begin(&key, fp("a"), at(0)).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let claims = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Claimed { .. }))
        .count();
    assert_eq!(claims, 1, "{decisions:?}");
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d, Decision::Claimed { .. } | Decision::InProgress { .. }))
    );
    assert_eq!(store.generation().unwrap(), Generation(1));
}
