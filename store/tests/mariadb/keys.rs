//! Keys are bytes: no collation folds case, accents or trailing spaces.

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, ListFilter, Receiver, RecordId, Timestamp};

use crate::{fresh_database, shared_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_differ_in_case_or_a_trailing_space_are_three_keys() {
    let server = shared_server();
    let db = fresh_database(&server);
    let store = MySqlStore::connect(&server.url_of(&db)).await.unwrap();
    let keys = ["Key-A", "key-a", "key-a "];
    let mut generations = Vec::new();
    for key in keys {
        let id = RecordId::new("shop", "charge", key).unwrap();
        let decision = store
            .begin(&id, Fingerprint::of_bytes(key.as_bytes()), Timestamp(0))
            .await
            .unwrap();
        let Decision::Claimed { generation, .. } = decision else {
            panic!("{key:?}: {decision:?}, expected a claim of its own");
        };
        generations.push(generation);
    }
    generations.dedup();
    assert_eq!(generations.len(), 3, "{generations:?}");
    for key in keys {
        let id = RecordId::new("shop", "charge", key).unwrap();
        let record = store.get(&id).await.unwrap().unwrap();
        assert_eq!(record.fingerprint, Fingerprint::of_bytes(key.as_bytes()));
    }
    // The same for tenants and operations, and a list in byte order.
    let listed: Vec<String> = store
        .list(&ListFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id.key().to_owned())
        .collect();
    assert_eq!(listed, ["Key-A", "key-a", "key-a "]);
    for tenant in ["Shop", "shop "] {
        let id = RecordId::new(tenant, "charge", "key-a").unwrap();
        let decision = store
            .begin(&id, Fingerprint::of_bytes(b"other"), Timestamp(0))
            .await
            .unwrap();
        assert!(
            matches!(decision, Decision::Claimed { .. }),
            "{tenant:?}: {decision:?}"
        );
    }
    assert_eq!(
        server.sql(&format!("SELECT COUNT(*) FROM {db}.idem_records")),
        "5\n"
    );
}

/// 64 connections on one key for 200 rounds: each round exactly one claims, the others
/// are answered in progress, and the claim is released; every claim's generation is
/// above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_connections_on_one_key_claim_it_once_a_round_for_200_rounds() {
    let server = shared_server();
    let db = fresh_database(&server);
    let store = std::sync::Arc::new(
        MySqlStore::builder()
            .pool_size(64)
            .connect(&server.url_of(&db))
            .await
            .unwrap(),
    );
    let id = RecordId::new("shop", "charge", "hot").unwrap();
    let mut last = None;
    for round in 0..200 {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(64));
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .begin(&id, Fingerprint::of_bytes(b"hot"), Timestamp(0))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut claims = Vec::new();
        for caller in callers {
            match caller.await.unwrap() {
                Decision::Claimed { generation, .. } => claims.push(generation),
                Decision::InProgress { .. } => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(claims.len(), 1, "round {round}: {claims:?}");
        let generation = claims[0];
        assert!(
            last.is_none_or(|last| generation > last),
            "round {round}: {generation} after {last:?}"
        );
        last = Some(generation);
        store.release(&id, generation, Timestamp(0)).await.unwrap();
    }
}

/// A write's answer does not depend on the client's `CLIENT_FOUND_ROWS` flag: with it off
/// (the driver's default) and on (as many drivers and ProxySQL set it), heartbeats on a
/// stopped clock (each writes the lease the one before wrote: an update that would change
/// nothing but the row's revision) each succeed, and a claim, its settle and a replay
/// answer the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_the_same_whatever_client_found_rows_says() {
    let server = shared_server();
    for found_rows in ["false", "true"] {
        let db = fresh_database(&server);
        let url = format!("{}?client_found_rows={found_rows}", server.url_of(&db));
        let store = MySqlStore::connect(&url).await.unwrap();
        server.sql(&format!(
            "CREATE OR REPLACE FUNCTION {db}.idem_now() RETURNS BIGINT NOT DETERMINISTIC NO SQL \
               RETURN 1700000000000"
        ));
        let id = RecordId::new("shop", "charge", "k").unwrap();
        let fp = Fingerprint::of_bytes(b"k");
        let Decision::Claimed { generation, .. } =
            store.begin(&id, fp, Timestamp(0)).await.unwrap()
        else {
            panic!("a fresh key is claimed");
        };
        for _ in 0..5 {
            let record = store
                .heartbeat(&id, generation, Timestamp(0))
                .await
                .unwrap_or_else(|e| panic!("client_found_rows={found_rows}: {e:?}"));
            assert_eq!(record.generation, generation);
        }
        store
            .complete(
                &id,
                generation,
                idem_store::Verdict::Succeeded,
                idem_store::Outcome::new(200, "ok"),
                Timestamp(0),
            )
            .await
            .unwrap();
        assert!(matches!(
            store.begin(&id, fp, Timestamp(0)).await.unwrap(),
            Decision::Replay { .. }
        ));
    }
}
