//! Duplicates that wait across the fleet (docs/design.md §16): 50 duplicates of a
//! running key, on another replica than the one that runs it, wait for its outcome and
//! all get the replay; while they wait, the store is read by one reader, not one per
//! waiter, counted from what the server ran (`pg_stat_statements`).

use std::sync::Arc;
use std::time::Duration;

use super::{Server, client, replicas};

#[path = "../common/waiting.rs"]
#[allow(unreachable_pub)] // shared with the file's tests
mod scenario;

/// How often the server ran a statement whose text starts with `prefix`.
async fn calls_of(db: &tokio_postgres::Client, prefix: &str) -> i64 {
    db.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
          WHERE starts_with(query, $1)",
        &[&prefix],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_running_key_wait_and_one_reader_serves_them() {
    let server = Server::start_with(&[("shared_preload_libraries", "pg_stat_statements")]);
    let db = client(&server).await;
    db.batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    let mut stores = replicas(&server, 2, 16).await.into_iter().map(Arc::new);
    let (runner, waiter) = (stores.next().unwrap(), stores.next().unwrap());
    db.batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();
    let runs = Duration::from_millis(1_500);
    let waits = scenario::duplicates_of_a_running_key(
        &runner,
        &waiter,
        "waited-1",
        runs,
        50,
        Duration::from_secs(10),
    )
    .await;
    scenario::assert_all_replayed(&waits);
    // The reads of the key's record while they waited: one reader with a growing pause
    // (20 ms to 500 ms) over 1.5 s reads about 10 times; a reader per waiter would have
    // read 500 times.
    let reads = calls_of(&db, "SELECT fingerprint").await;
    println!("{reads} reads of the key while 50 duplicates waited {runs:?}");
    assert!((1..=20).contains(&reads), "{reads} reads");

    // A wait shorter than the run: 409 once it ran out.
    let waits = scenario::duplicates_of_a_running_key(
        &runner,
        &waiter,
        "waited-2",
        Duration::from_millis(1_000),
        5,
        Duration::from_millis(200),
    )
    .await;
    scenario::assert_all_timed_out(&waits);
}
