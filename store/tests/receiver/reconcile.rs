//! Reconciliation on the file (docs/design.md §11): abandoned claims turn Unknown at
//! start-up (`Store::recover_abandoned`). (The checker's run is the conformance suite's,
//! on every engine.)

use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Generation, LeaseExpiry, Outcome, RecordId, State, Timestamp, Verdict};
use idem_store::Store;

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
