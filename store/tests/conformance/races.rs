//! Many callers at once: on one key, exactly one claim per round and generations
//! unique, for a fresh key, an expired lease taken over and a settled key past its
//! retention; sweepers racing claimers lose no claim and claim no key twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_core::{
    Config, Fingerprint, Generation, LeaseExpiry, Outcome, Record, RecordId, State, Status,
    Timestamp, Verdict,
};
use idem_store::Receiver;
use idem_store::maintain::record_json;
use tokio::sync::Barrier;

use crate::{Engine, claimed, fp, id};

const CALLERS: usize = 64;
const ROUNDS: usize = 200;

/// What stands on each round's key before the callers are released together.
#[derive(Clone, Copy, Debug)]
enum Before {
    /// Nothing: a fresh key.
    Nothing,
    /// A pending claim whose lease ran out, under the Takeover policy.
    ExpiredLease,
    /// A settled record past its retention, tombstones off.
    PastRetention,
}

/// Seeds every round's key as `before` says, then races [`CALLERS`] begins on each key
/// in turn.
async fn race<E: Engine>(before: Before) {
    let config = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        tombstone_retention_ms: 0,
        ..Config::default()
    };
    let mut h = E::open(config.clone()).await;
    let keys: Vec<RecordId> = (0..ROUNDS).map(|r| id(&format!("round-{r}"))).collect();
    let mut seeds = vec![None; ROUNDS];
    if !matches!(before, Before::Nothing) {
        for (round, key) in keys.iter().enumerate() {
            let generation = claimed(h.store().begin(key, fp("r"), h.now()).await.unwrap());
            if matches!(before, Before::PastRetention) {
                h.store()
                    .complete(
                        key,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(200, "ok"),
                        h.now(),
                    )
                    .await
                    .unwrap();
            }
            seeds[round] = Some(generation);
        }
        h.pass(config.lease_ms.max(config.success_retention_ms))
            .await;
    }
    let mut generations = BTreeSet::new();
    for (round, key) in keys.iter().enumerate() {
        let barrier = Arc::new(Barrier::new(CALLERS));
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (store, barrier, key, now) =
                    (h.shared(), barrier.clone(), key.clone(), h.now());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.begin(&key, fp("r"), now).await
                })
            })
            .collect();
        let mut claims = Vec::new();
        for caller in callers {
            match caller.await.unwrap() {
                Ok(Decision::Claimed { generation, .. }) => claims.push(generation),
                Ok(Decision::InProgress { .. }) => {}
                other => panic!("{before:?}, round {round}: {other:?}"),
            }
        }
        assert_eq!(
            claims.len(),
            1,
            "{before:?}, round {round}: claims {claims:?}"
        );
        if let Some(seed) = seeds[round] {
            assert!(
                claims[0] > seed,
                "{before:?}, round {round}: a new generation"
            );
            generations.insert(seed);
        }
        assert!(
            generations.insert(claims[0]),
            "{before:?}, round {round}: generation {} handed out twice",
            claims[0]
        );
        let stored = h.store().get(key).await.unwrap().unwrap();
        assert_eq!(
            (stored.state(), stored.generation),
            (State::Pending, claims[0]),
            "{before:?}, round {round}"
        );
    }
}

pub(crate) async fn sixty_four_callers_on_a_fresh_key_claim_it_once<E: Engine>() {
    race::<E>(Before::Nothing).await;
}

pub(crate) async fn sixty_four_callers_on_an_expired_lease_take_it_over_once<E: Engine>() {
    race::<E>(Before::ExpiredLease).await;
}

pub(crate) async fn sixty_four_callers_on_a_key_past_retention_claim_it_once<E: Engine>() {
    race::<E>(Before::PastRetention).await;
}

/// `n` settled records `old-0`… whose retention ended before `now` (`old-n` 1 + n ms
/// before), as import lines.
fn expired_records(n: usize, now: Timestamp, fingerprint: Fingerprint) -> String {
    (0..n)
        .map(|i| {
            let record = Record {
                fingerprint,
                generation: Generation(i as u64 + 1),
                created_at: Timestamp(now.0 - 1_000),
                updated_at: Timestamp(now.0 - 1_000),
                status: Status::Settled {
                    verdict: Verdict::Succeeded,
                    outcome: Outcome::new(200, "ok"),
                    completed_at: Timestamp(now.0 - 1_000),
                    expires_at: Timestamp(now.0 - 1 - i as u64),
                },
            };
            format!("{}\n", record_json(&id(&format!("old-{i}")), &record))
        })
        .collect()
}

/// Two sweepers delete expired settled records while four claimers claim every key:
/// each key is claimed exactly once, and every acknowledged claim is in the store with
/// the generation its claimer was given.
pub(crate) async fn sweepers_racing_claimers_lose_no_claim_and_claim_no_key_twice<E: Engine>() {
    const KEYS: usize = 2_000;
    let config = Config {
        tombstone_retention_ms: 0,
        ..Config::default()
    };
    let h = E::open(config).await;
    let lines = expired_records(KEYS, h.clock().await, fp("r"));
    let imported = h.store().import(&mut lines.as_bytes()).await.unwrap();
    assert_eq!(imported.records, KEYS as u64);
    let now = h.now();
    let sweepers: Vec<_> = (0..2)
        .map(|_| {
            let store = h.shared();
            tokio::spawn(async move {
                let mut removed = 0;
                loop {
                    let report = store.sweep(now, 50, false).await.unwrap();
                    removed += report.removed;
                    if !report.remaining_expired && report.removed == 0 {
                        return removed;
                    }
                }
            })
        })
        .collect();
    let claimers: Vec<_> = (0..4)
        .map(|c| {
            let store = h.shared();
            tokio::spawn(async move {
                let mut claims = Vec::new();
                // Each claimer walks the keys from its own starting point.
                for n in (0..KEYS).map(|n| (n + c * KEYS / 4) % KEYS) {
                    let key = id(&format!("old-{n}"));
                    match store.begin(&key, fp("r"), now).await.unwrap() {
                        Decision::Claimed { generation, .. } => claims.push((n, generation)),
                        Decision::InProgress { .. } => {}
                        other => panic!("old-{n}: {other:?}"),
                    }
                }
                claims
            })
        })
        .collect();
    let mut claimed: Vec<(usize, Generation)> = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.unwrap());
    }
    let mut removed = 0;
    for sweeper in sweepers {
        removed += sweeper.await.unwrap();
    }
    claimed.sort();
    let keys: BTreeSet<_> = claimed.iter().map(|(n, _)| *n).collect();
    assert_eq!(keys.len(), claimed.len(), "a key claimed twice");
    assert_eq!(keys.len(), KEYS, "every key claimed once");
    for (n, generation) in &claimed {
        let stored = h.store().get(&id(&format!("old-{n}"))).await.unwrap();
        assert_eq!(
            stored.map(|r| (r.state(), r.generation)),
            Some((State::Pending, *generation)),
            "old-{n}: the acknowledged claim"
        );
    }
    println!(
        "sweepers deleted {removed} of {KEYS} keys before their claim; the rest were claimed past retention"
    );
}
