//! The replay cache: a settled record this replica read or wrote is answered from memory,
//! with the server stopped; a store that keeps none, and a pending record, still ask.

use std::time::Duration;

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::fresh_database;
use crate::server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_replays_a_settled_record_from_memory_and_asks_for_the_rest() {
    let mut server = Server::start();
    let db = fresh_database(&server);
    let url = server.url_of(&db);
    let connect = |records: usize| {
        MySqlStore::builder()
            .replay_cache(records)
            .connect_timeout(Duration::from_secs(2))
            .statement_timeout(Duration::from_secs(2))
            .connect(&url)
    };
    let writer = connect(1_000).await.unwrap();
    let reader = connect(1_000).await.unwrap();
    let uncached = connect(0).await.unwrap();
    let (a, b) = (Fingerprint::of_bytes(b"a"), Fingerprint::of_bytes(b"b"));
    let settled = RecordId::new("shop", "charge", "settled").unwrap();
    let pending = RecordId::new("shop", "charge", "pending").unwrap();
    let Decision::Claimed { generation, .. } =
        writer.begin(&settled, a, Timestamp(0)).await.unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    writer
        .complete(
            &settled,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "made"),
            Timestamp(0),
        )
        .await
        .unwrap();
    // The reader keeps the record it replays.
    assert!(matches!(
        reader.begin(&settled, a, Timestamp(0)).await.unwrap(),
        Decision::Replay { .. }
    ));
    assert!(matches!(
        writer.begin(&pending, a, Timestamp(0)).await.unwrap(),
        Decision::Claimed { .. }
    ));
    assert!(matches!(
        reader.begin(&pending, a, Timestamp(0)).await.unwrap(),
        Decision::InProgress { .. }
    ));

    server.stop();
    for (name, store) in [("the writer", &writer), ("the reader", &reader)] {
        match store.begin(&settled, a, Timestamp(0)).await {
            Ok(Decision::Replay { outcome, .. }) => {
                assert_eq!(outcome, Outcome::new(201, "made"), "{name}");
            }
            other => panic!("{name} replays from memory, got {other:?}"),
        }
        assert!(
            matches!(
                store.begin(&settled, b, Timestamp(0)).await,
                Ok(Decision::Conflict { .. })
            ),
            "{name} refuses another request under the key from memory"
        );
        let asked = store.begin(&pending, a, Timestamp(0)).await;
        assert!(
            asked.is_err(),
            "{name} keeps no pending record: it asks the stopped server, got {asked:?}"
        );
    }
    let asked = uncached.begin(&settled, a, Timestamp(0)).await;
    assert!(
        asked.is_err(),
        "a store that keeps no record asks the stopped server, got {asked:?}"
    );
}
