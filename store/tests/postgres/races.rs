//! Many connections on one key at once: exactly one claim per round, generations
//! unique, for a fresh key, an expired lease taken over, a settled key past its
//! retention, and sweepers racing claimers.

use std::collections::BTreeSet;
use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_core::{Config, Generation, LeaseExpiry, Timestamp};
use idem_store::Receiver;
use idem_store::postgres::PgStore;
use tokio::sync::Barrier;

use super::{Server, client, fp, id, store};

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

async fn race(before: Before) {
    let server = Server::start();
    let config = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        tombstone_retention_ms: 0,
        ..Config::default()
    };
    let store = store(&server, config, CALLERS).await;
    let db = client(&server).await;
    let mut generations = BTreeSet::new();
    for round in 0..ROUNDS {
        let key = id(&format!("round-{round}"));
        let seeded = match before {
            Before::Nothing => None,
            Before::ExpiredLease | Before::PastRetention => {
                let Decision::Claimed { generation, .. } =
                    store.begin(&key, fp("r"), Timestamp(0)).await.unwrap()
                else {
                    panic!("round {round}: the seed claim")
                };
                let sql = match before {
                    Before::ExpiredLease => {
                        "UPDATE idem_records SET lease_until = idem_now() - 1 WHERE key = $1"
                    }
                    _ => {
                        "UPDATE idem_records SET state = 1, verdict = 0, lease_until = NULL, \
                           completed_at = idem_now() - 100, expires_at = idem_now() - 1, \
                           outcome_code = 200, outcome_body = '\\x6f6b' WHERE key = $1"
                    }
                };
                assert_eq!(db.execute(sql, &[&key.key()]).await.unwrap(), 1);
                Some(generation)
            }
        };
        let barrier = Arc::new(Barrier::new(CALLERS));
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.begin(&key, fp("r"), Timestamp(0)).await
                })
            })
            .collect();
        let mut claimed = Vec::new();
        for caller in callers {
            match caller.await.unwrap() {
                Ok(Decision::Claimed { generation, .. }) => claimed.push(generation),
                Ok(Decision::InProgress { .. }) => {}
                other => panic!("{before:?}, round {round}: {other:?}"),
            }
        }
        assert_eq!(
            claimed.len(),
            1,
            "{before:?}, round {round}: claims {claimed:?}"
        );
        if let Some(seed) = seeded {
            assert!(
                claimed[0] > seed,
                "{before:?}, round {round}: a new generation"
            );
            generations.insert(seed);
        }
        assert!(
            generations.insert(claimed[0]),
            "{before:?}, round {round}: generation {} handed out twice",
            claimed[0]
        );
        let stored = store.get(&key).await.unwrap().unwrap();
        assert_eq!(stored.generation, claimed[0], "{before:?}, round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_callers_on_a_fresh_key_claim_it_once_per_round() {
    race(Before::Nothing).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_callers_on_an_expired_lease_take_it_over_once_per_round() {
    race(Before::ExpiredLease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_callers_on_a_key_past_retention_claim_it_once_per_round() {
    race(Before::PastRetention).await;
}

/// Two sweepers delete expired settled records while four claimers claim every key:
/// each key is claimed exactly once, and every acknowledged claim is in the table with
/// the generation its claimer was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sweepers_racing_claimers_lose_no_claim_and_claim_no_key_twice() {
    const KEYS: usize = 2_000;
    let server = Server::start();
    let config = Config {
        tombstone_retention_ms: 0,
        ..Config::default()
    };
    let store = store(&server, config, 16).await;
    let db = client(&server).await;
    db.execute(
        "INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, verdict, \
           created_at, updated_at, completed_at, expires_at, outcome_code, outcome_body) \
         SELECT 'shop', 'charge', 'old-' || n, $1, nextval('idem_generation'), 1, 0, \
           idem_now() - 1000, idem_now() - 1000, idem_now() - 1000, idem_now() - 1 - n, 200, 'ok' \
           FROM generate_series(0, $2::bigint - 1) AS n",
        &[&fp("r").0.as_slice(), &(KEYS as i64)],
    )
    .await
    .unwrap();
    let sweepers: Vec<_> = (0..2)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut removed = 0;
                loop {
                    let report = store.sweep(Timestamp(0), 50, false).await.unwrap();
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
            let store: PgStore = store.clone();
            tokio::spawn(async move {
                let mut claims = Vec::new();
                // Each claimer walks the keys from its own starting point.
                for n in (0..KEYS).map(|n| (n + c * KEYS / 4) % KEYS) {
                    let key = id(&format!("old-{n}"));
                    match store.begin(&key, fp("r"), Timestamp(0)).await.unwrap() {
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
    let removed: u64 = futures_sum(sweepers).await;
    claimed.sort();
    let keys: BTreeSet<_> = claimed.iter().map(|(n, _)| *n).collect();
    assert_eq!(keys.len(), claimed.len(), "a key claimed twice");
    assert_eq!(keys.len(), KEYS, "every key claimed once");
    for (n, generation) in &claimed {
        let stored = store.get(&id(&format!("old-{n}"))).await.unwrap();
        assert_eq!(
            stored.map(|r| (r.state(), r.generation)),
            Some((idem_core::State::Pending, *generation)),
            "old-{n}: the acknowledged claim"
        );
    }
    println!(
        "sweepers deleted {removed} of {KEYS} keys before their claim; the rest were claimed past retention"
    );
}

async fn futures_sum(tasks: Vec<tokio::task::JoinHandle<u64>>) -> u64 {
    let mut sum = 0;
    for task in tasks {
        sum += task.await.unwrap();
    }
    sum
}
