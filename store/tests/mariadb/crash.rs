//! The server killed with SIGKILL and started again on the same data.

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::fresh_database;
use crate::server::Server;

fn claimed(decision: Decision) -> idem_store::Generation {
    match decision {
        Decision::Claimed { generation, .. } => generation,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_answered_survives_a_kill_9_and_generations_keep_rising() {
    let mut server = Server::start();
    let db = fresh_database(&server);
    let url = server.url_of(&db);
    let store = MySqlStore::connect(&url).await.unwrap();
    let settled = RecordId::new("shop", "charge", "settled").unwrap();
    let pending = RecordId::new("shop", "charge", "pending").unwrap();
    let fp = Fingerprint::of_bytes(b"a");
    let first = claimed(store.begin(&settled, fp, Timestamp(0)).await.unwrap());
    store
        .complete(
            &settled,
            first,
            Verdict::Succeeded,
            Outcome::new(201, "made"),
            Timestamp(0),
        )
        .await
        .unwrap();
    let second = claimed(store.begin(&pending, fp, Timestamp(0)).await.unwrap());
    drop(store);
    server.kill9();
    server.restart();
    let store = MySqlStore::connect(&url).await.unwrap();
    match store.begin(&settled, fp, Timestamp(0)).await.unwrap() {
        Decision::Replay { outcome, .. } => assert_eq!(outcome, Outcome::new(201, "made")),
        other => panic!("expected the settled outcome, got {other:?}"),
    }
    match store.begin(&pending, fp, Timestamp(0)).await.unwrap() {
        Decision::InProgress { generation, .. } => assert_eq!(generation, second),
        other => panic!("expected the claim in progress, got {other:?}"),
    }
    let third = RecordId::new("shop", "charge", "after").unwrap();
    let after = claimed(store.begin(&third, fp, Timestamp(0)).await.unwrap());
    assert!(
        after > second && second > first,
        "{first} {second} {after}: generations rise across the crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_sent_while_the_server_restarts_lands_once_it_is_back() {
    let mut server = Server::start();
    let db = fresh_database(&server);
    let store = MySqlStore::connect(&server.url_of(&db)).await.unwrap();
    let id = RecordId::new("shop", "charge", "k").unwrap();
    let fp = Fingerprint::of_bytes(b"a");
    let generation = claimed(store.begin(&id, fp, Timestamp(0)).await.unwrap());
    // The pool's connections break with the server; it is back a second later.
    server.kill9();
    let back = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(1));
        server.restart();
        server
    });
    let completed = store
        .complete(
            &id,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            Timestamp(0),
        )
        .await;
    // Joined before any assertion, so that a failing one still stops the server.
    let _server = back.join().unwrap();
    let record = completed.unwrap();
    assert_eq!(record.generation, generation);
    assert_eq!(store.get(&id).await.unwrap(), Some(record));
    match store.begin(&id, fp, Timestamp(0)).await.unwrap() {
        Decision::Replay { outcome, .. } => assert_eq!(outcome, Outcome::new(200, "ok")),
        other => panic!("expected the outcome, got {other:?}"),
    }
}
