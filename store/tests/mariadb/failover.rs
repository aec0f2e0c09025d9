//! A failover to a semi-synchronous replica (`rpl_semi_sync_master_wait_point =
//! AFTER_SYNC`): the primary is killed with SIGKILL while claims and settles run, the
//! replica applies what it received and becomes the primary, and every answered settle
//! replays there; a claim on it gets a generation above every one answered before. The
//! store is connected once, to a URL that lists both hosts (the read-only replica
//! first), and follows the promotion without a restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Generation, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answered_settles_survive_a_failover_to_a_semi_synchronous_replica() {
    let (mut primary, replica) = Server::semi_synchronous_pair("shop");
    // Both hosts, the replica first: the store writes to the one that takes writes.
    let url = format!(
        "mysql://root@127.0.0.1:{},127.0.0.1:{}/shop",
        replica.port(),
        primary.port()
    );
    // No replay cache: every replay below is read from the database.
    let store = Arc::new(
        MySqlStore::builder()
            .pool_size(16)
            .replay_cache(0)
            .connect(&url)
            .await
            .unwrap(),
    );
    assert_eq!(store.unready().await, None);
    let answered: Arc<Mutex<BTreeMap<String, Generation>>> = Arc::default();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (store, answered) = (store.clone(), answered.clone());
            tokio::spawn(async move {
                for n in 0.. {
                    let key = format!("w{w}-{n}");
                    let id = RecordId::new("shop", "charge", &key).unwrap();
                    let fp = Fingerprint::of_bytes(key.as_bytes());
                    let Ok(Decision::Claimed { generation, .. }) =
                        store.begin(&id, fp, Timestamp(0)).await
                    else {
                        return;
                    };
                    let settled = store
                        .complete(
                            &id,
                            generation,
                            Verdict::Succeeded,
                            Outcome::new(201, key.clone()),
                            Timestamp(0),
                        )
                        .await;
                    // Unanswered (the primary died under it): it may or may not have
                    // landed, and nothing is promised of it.
                    if settled.is_err() {
                        return;
                    }
                    answered.lock().unwrap().insert(key, generation);
                }
            })
        })
        .collect();
    // Some settles are answered, then the primary dies mid-run.
    let started = Instant::now();
    while answered.lock().unwrap().len() < 200 {
        assert!(started.elapsed() < Duration::from_secs(60), "too slow");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    primary.kill9();
    for writer in writers {
        writer.await.unwrap();
    }
    // No host takes writes until the replica is promoted, and the store says why.
    let unready = store.unready().await.expect("no writable host");
    assert!(
        unready.contains(&format!("127.0.0.1:{} (read_only is ON)", replica.port())),
        "{unready}"
    );

    // The replica applies what it received, and becomes the primary.
    replica.promote();
    // The same store, connected before the failover, follows the promotion.
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 200, "{}", answered.len());
    for (key, generation) in &answered {
        let id = RecordId::new("shop", "charge", key).unwrap();
        match store
            .begin(&id, Fingerprint::of_bytes(key.as_bytes()), Timestamp(0))
            .await
            .unwrap()
        {
            Decision::Replay { outcome, .. } => {
                assert_eq!(outcome, Outcome::new(201, key.clone()), "{key}");
            }
            other => {
                panic!("{key} (generation {generation}) answered before the failover: {other:?}")
            }
        }
    }
    let highest = answered.values().max().copied().unwrap();
    let id = RecordId::new("shop", "charge", "after-failover").unwrap();
    match store
        .begin(&id, Fingerprint::of_bytes(b"x"), Timestamp(0))
        .await
        .unwrap()
    {
        Decision::Claimed { generation, .. } => {
            assert!(generation > highest, "{generation} after {highest}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.unready().await, None);
    println!(
        "{} settles answered before the kill, all replayed by the new primary through the \
         store connected before it",
        answered.len()
    );
}
