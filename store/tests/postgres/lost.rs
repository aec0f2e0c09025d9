//! A claim whose answer was lost (docs/design.md §16): the claim commits on the server,
//! and its connection dies before the answer reaches the engine. Here the server waits
//! for a synchronous standby that does not exist, so a commit is made locally and then
//! waits; the test ends that session as a failover would end it. The begin fails, its
//! caller is told nothing was executed, and the engine gives the claim back once the
//! database answers again: a retry then claims the key.

use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_core::{Config, Timestamp};
use idem_store::Receiver;

use super::{Server, client, fp, id, store};

/// Waits, at most 10 s, for a session of the server to wait for the standby with a
/// statement that contains `text`; its process id.
async fn waiting_for_the_standby(admin: &tokio_postgres::Client, text: &str) -> i32 {
    let start = Instant::now();
    loop {
        let rows = admin
            .query(
                "SELECT pid FROM pg_stat_activity \
                  WHERE wait_event = 'SyncRep' AND strpos(query, $1) > 0",
                &[&text],
            )
            .await
            .unwrap();
        if let Some(row) = rows.first() {
            return row.get(0);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no statement with {text:?} waits for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn set_standby(admin: &tokio_postgres::Client, names: &str) {
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ))
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    // The new setting reaches every session at its next statement; wait until a new one
    // sees it.
    let start = Instant::now();
    loop {
        let seen: String = admin
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .unwrap()
            .get(0);
        if seen == names {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "still {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn rows_of(admin: &tokio_postgres::Client, key: &str) -> i64 {
    admin
        .query_one("SELECT count(*) FROM idem_records WHERE key = $1", &[&key])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_was_lost_is_given_back_once_the_database_answers_again() {
    let server = Server::start();
    let store = store(&server, Config::default(), 4).await;
    let admin = client(&server).await;
    set_standby(&admin, "nobody").await;

    let key = id("lost-1");
    let begin = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move { store.begin(&key, fp("a"), Timestamp(0)).await }
    });
    // The claim is committed on the server and waits for the standby: end its session.
    let claim = waiting_for_the_standby(&admin, "INSERT INTO idem_records").await;
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&claim])
        .await
        .unwrap();
    let answered = begin.await.unwrap();
    assert!(answered.is_err(), "the answer was lost: {answered:?}");

    // The engine is giving the claim back: its delete waits for the standby too.
    waiting_for_the_standby(&admin, "DELETE FROM idem_records").await;
    set_standby(&admin, "").await;
    let start = Instant::now();
    while rows_of(&admin, "lost-1").await > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the lost claim is still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.idle().await;

    // A retry claims the key: nothing is stranded.
    let retry = store.begin(&key, fp("a"), Timestamp(0)).await.unwrap();
    assert!(matches!(retry, Decision::Claimed { .. }), "{retry:?}");
}
