//! Reconciliation (docs/design.md §11): abandoned claims turn Unknown, and a checker settles
//! Unknown records oldest first, each only if it is still the record the checker saw.

use crate::common::{T0, fp, id};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, LeaseExpiry, Outcome, RecordId, State, Timestamp, Verdict};
use idem_store::Store;
use idem_store::maintain::Check;
use idem_store::maintain::ReconcileError;
use idem_store::maintain::ReconcileReport;

const LEASE: u64 = 1_000;

fn open(dir: &tempfile::TempDir, policy: LeaseExpiry) -> Store {
    Store::builder()
        .config(Config {
            lease_ms: LEASE,
            on_lease_expiry: policy,
            ..Config::default()
        })
        .open(dir.path().join("idem.redb"))
        .unwrap()
}

fn claim(store: &Store, key: &RecordId, at: u64) -> Generation {
    match store.begin(key, fp(key.key()), Timestamp(at)).unwrap() {
        Decision::Claimed { generation, .. } => generation,
        other => panic!("{key}: {other:?}"),
    }
}

fn state(store: &Store, key: &RecordId) -> Option<State> {
    store.get(key).unwrap().map(|r| r.state())
}

#[test]
fn silent_claims_turn_unknown_and_live_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Unknown);
    let silent = id("shop", "charge", "silent");
    let live = id("shop", "charge", "live");
    let settled = id("shop", "charge", "settled");
    claim(&store, &silent, T0);
    let g = claim(&store, &settled, T0);
    store
        .complete(
            &settled,
            g,
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            Timestamp(T0),
        )
        .unwrap();
    claim(&store, &live, T0 + LEASE);
    let found = store.recover_abandoned(Timestamp(T0 + LEASE + 1)).unwrap();
    assert_eq!(found.turned_unknown, std::slice::from_ref(&silent));
    assert!(found.left_for_takeover.is_empty());
    assert_eq!(state(&store, &silent), Some(State::Unknown));
    assert_eq!(state(&store, &live), Some(State::Pending));
    assert_eq!(state(&store, &settled), Some(State::Succeeded));
    // Unknown since the recovery, not since the claim.
    let stats = store.stats(Timestamp(T0 + LEASE + 11)).unwrap();
    assert_eq!(stats.oldest_unknown_age_ms, Some(10));
    // Nothing left to recover.
    let again = store.recover_abandoned(Timestamp(T0 + LEASE + 2)).unwrap();
    assert!(again.turned_unknown.is_empty());
}

#[test]
fn under_takeover_silent_claims_are_only_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Takeover);
    let silent = id("shop", "charge", "silent");
    claim(&store, &silent, T0);
    let found = store.recover_abandoned(Timestamp(T0 + LEASE)).unwrap();
    assert_eq!(found.left_for_takeover, std::slice::from_ref(&silent));
    assert!(found.turned_unknown.is_empty());
    assert_eq!(state(&store, &silent), Some(State::Pending));
}

/// Four Unknown records, created in key order.
fn four_unknown(store: &Store) -> Vec<RecordId> {
    let keys: Vec<RecordId> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| id("shop", "charge", k))
        .collect();
    for (n, key) in keys.iter().enumerate() {
        let g = claim(store, key, T0 + n as u64);
        store.mark_unknown(key, g, Timestamp(T0 + 10)).unwrap();
    }
    keys
}

#[test]
fn a_checker_settles_what_it_can_tell_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Unknown);
    let keys = four_unknown(&store);
    let mut seen = Vec::new();
    let report = store
        .reconcile(Timestamp(T0 + 20), 10, |key, record| {
            assert_eq!(record.state(), State::Unknown);
            seen.push(key.key().to_string());
            Ok::<_, String>(match key.key() {
                "a" => Check::Succeeded(Outcome::new(201, "receipt a")),
                "b" => Check::Failed(Outcome::new(402, "declined")),
                "c" => Check::NotExecuted,
                _ => Check::CannotTell,
            })
        })
        .unwrap();
    assert_eq!(seen, ["a", "b", "c", "d"], "oldest first");
    assert_eq!(
        report,
        ReconcileReport {
            examined: 4,
            succeeded: 1,
            failed: 1,
            not_executed: 1,
            undecided: 1,
            changed_meanwhile: 0,
            remaining: false,
        }
    );
    // a and b replay their outcome; c runs again under a new generation; d waits.
    match store.begin(&keys[0], fp("a"), Timestamp(T0 + 30)).unwrap() {
        Decision::Replay {
            verdict, outcome, ..
        } => assert_eq!(
            (verdict, outcome),
            (Verdict::Succeeded, Outcome::new(201, "receipt a"))
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.begin(&keys[1], fp("b"), Timestamp(T0 + 30)).unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            ..
        }
    ));
    assert!(matches!(
        store.begin(&keys[2], fp("c"), Timestamp(T0 + 30)).unwrap(),
        Decision::Claimed { .. }
    ));
    assert_eq!(state(&store, &keys[3]), Some(State::Unknown));
}

#[test]
fn a_limit_leaves_the_rest_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Unknown);
    four_unknown(&store);
    let report = store
        .reconcile(Timestamp(T0 + 20), 3, |_, _| {
            Ok::<_, String>(Check::NotExecuted)
        })
        .unwrap();
    assert_eq!(
        (report.examined, report.not_executed, report.remaining),
        (3, 3, true)
    );
    let report = store
        .reconcile(Timestamp(T0 + 20), 3, |_, _| {
            Ok::<_, String>(Check::NotExecuted)
        })
        .unwrap();
    assert_eq!((report.examined, report.remaining), (1, false));
    assert_eq!(store.stats(Timestamp(T0 + 20)).unwrap().unknown, 0);
}

#[test]
fn an_answer_is_not_applied_to_a_record_that_changed_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Unknown);
    let keys = four_unknown(&store);
    let report = store
        .reconcile(Timestamp(T0 + 20), 1, |key, _| {
            // Someone resolves it while the checker asks the provider, and a retry claims
            // the key again and goes silent: a new Unknown generation.
            store
                .resolve(key, Resolution::NotExecuted, Timestamp(T0 + 20))
                .unwrap();
            let g = claim(&store, key, T0 + 20);
            store.mark_unknown(key, g, Timestamp(T0 + 21)).unwrap();
            Ok::<_, String>(Check::Succeeded(Outcome::new(
                200,
                "for the old generation",
            )))
        })
        .unwrap();
    assert_eq!(
        (report.examined, report.changed_meanwhile, report.succeeded),
        (1, 1, 0)
    );
    assert_eq!(state(&store, &keys[0]), Some(State::Unknown));
}

#[test]
fn a_failing_checker_stops_the_run_and_changes_its_record_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, LeaseExpiry::Unknown);
    let keys = four_unknown(&store);
    let err = store
        .reconcile(Timestamp(T0 + 20), 10, |key, _| match key.key() {
            "a" => Ok(Check::NotExecuted),
            _ => Err("the provider is down"),
        })
        .unwrap_err();
    match err {
        ReconcileError::Checker { id, report, source } => {
            assert_eq!(id, keys[1]);
            assert_eq!((report.examined, report.not_executed), (1, 1));
            assert_eq!(source, "the provider is down");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&store, &keys[0]), None);
    assert_eq!(state(&store, &keys[1]), Some(State::Unknown));
}
