//! Round trips counted by the server (`Questions`: the statements clients sent): a fresh
//! key's begin is one statement, a heartbeat and a complete of a claim this replica holds
//! one each; a replay read from the database one, none from the replica's cache.

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::server::Server;

/// The server's count of statements sent by clients.
fn questions(server: &Server) -> u64 {
    let line = server.sql("SHOW GLOBAL STATUS LIKE 'Questions'");
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Questions: {line:?}"))
}

/// How many statements `calls` sent, less those of the client that reads the count
/// (measured around no calls).
async fn counted<F: Future<Output = ()>>(server: &Server, calls: F) -> u64 {
    let reading = {
        let before = questions(server);
        questions(server) - before
    };
    let before = questions(server);
    calls.await;
    questions(server) - before - reading
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_input_of_a_fresh_key_is_one_statement_and_a_cached_replay_none() {
    const KEYS: u64 = 20;
    let server = Server::start();
    server.sql("CREATE DATABASE shop");
    for cache in [0, 10_000] {
        let store = MySqlStore::builder()
            .pool_size(1)
            .replay_cache(cache)
            .connect(&server.url_of("shop"))
            .await
            .unwrap();
        let id = |n: u64| RecordId::new("shop", "charge", &format!("c{cache}-{n}")).unwrap();
        let fp = Fingerprint::of_bytes(b"order");
        // The pool's connection opened, its statements prepared.
        let warm = RecordId::new("shop", "charge", &format!("warm-{cache}")).unwrap();
        let Decision::Claimed { generation, .. } =
            store.begin(&warm, fp, Timestamp(0)).await.unwrap()
        else {
            panic!("not claimed")
        };
        store
            .heartbeat(&warm, generation, Timestamp(0))
            .await
            .unwrap();
        store
            .mark_unknown(&warm, generation, Timestamp(0))
            .await
            .unwrap();
        let mut generations = Vec::new();
        let begins = counted(&server, async {
            for n in 0..KEYS {
                match store.begin(&id(n), fp, Timestamp(0)).await.unwrap() {
                    Decision::Claimed { generation, .. } => generations.push(generation),
                    other => panic!("{other:?}"),
                }
            }
        })
        .await;
        let heartbeats = counted(&server, async {
            for (n, generation) in (0..KEYS).zip(&generations) {
                store
                    .heartbeat(&id(n), *generation, Timestamp(0))
                    .await
                    .unwrap();
            }
        })
        .await;
        let completes = counted(&server, async {
            for (n, generation) in (0..KEYS).zip(&generations) {
                let outcome = Outcome::new(201, format!("order {n}"));
                let record = store
                    .complete(
                        &id(n),
                        *generation,
                        Verdict::Succeeded,
                        outcome,
                        Timestamp(0),
                    )
                    .await
                    .unwrap();
                // What the one statement wrote is what the database holds.
                assert_eq!(store.get(&id(n)).await.unwrap(), Some(record));
            }
        })
        .await
            - KEYS;
        let replays = counted(&server, async {
            for n in 0..KEYS {
                let decision = store.begin(&id(n), fp, Timestamp(0)).await.unwrap();
                assert!(matches!(decision, Decision::Replay { .. }), "{decision:?}");
            }
        })
        .await;
        println!(
            "cache {cache}: {KEYS} keys: begins {begins}, heartbeats {heartbeats}, completes \
             {completes}, replays {replays} statements"
        );
        assert_eq!((begins, heartbeats, completes), (KEYS, KEYS, KEYS));
        assert_eq!(replays, if cache == 0 { KEYS } else { 0 });
    }
}
