//! The tower layer on a database (docs/design.md §16). Duplicates that wait across the
//! fleet: 50 duplicates of a running key, on another replica than the one that runs it,
//! wait for its outcome and all get the replay; while they wait, the store is read by one
//! reader, not one per waiter, counted from what the server ran (`pg_stat_statements`).
//! The watchdog: a handler three times slower than the lease keeps its key, on the
//! database's clock.

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

/// A keyed request whose handler runs three times the lease: the layer extends the lease
/// while it runs, so its key never reads Unknown (nor is taken over), it runs once and is
/// settled. Without the watchdog, a begin after the lease would turn the key Unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_three_times_slower_than_the_lease_keeps_its_key() {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::Full;
    use idem_core::protocol::Decision;
    use idem_core::{Fingerprint, RecordId, State, Timestamp};
    use idem_store::Receiver;
    use idem_store::http::{IdempotencyLayer, RequestBody, Settings, Tenant};
    use idem_store::postgres::PgStore;
    use tower::{Layer, ServiceExt};

    let server = Server::start();
    let config = idem_core::Config {
        lease_ms: 400,
        ..idem_core::Config::default()
    };
    let store = Arc::new(
        PgStore::builder()
            .config(config)
            .connect(&server.url())
            .await
            .unwrap(),
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let handler = tower::service_fn({
        let executions = Arc::clone(&executions);
        move |_: Request<RequestBody<Full<Bytes>>>| {
            executions.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(1_200)).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"{\"paid\":1}",
                ))))
            }
        }
    });
    let settings = Settings {
        tenant: Tenant::Fixed("shop".into()),
        ..Settings::default()
    };
    let service = IdempotencyLayer::new(Arc::clone(&store), settings).layer(handler);
    let request = Request::post("/orders")
        .header("idempotency-key", "\"slow-1\"")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let first = tokio::spawn(service.oneshot(request));
    let id = RecordId::new("shop", "POST /orders", "slow-1").unwrap();
    // The handler runs: the key is claimed.
    while executions.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut looked = 0;
    while !first.is_finished() {
        // A begin under the key, on the database's clock, as a request on another
        // replica would make: the claim still holds, never Unknown nor taken over.
        let seen = store
            .begin(&id, Fingerprint::of_bytes(b"another"), Timestamp(0))
            .await
            .unwrap();
        // Another body under the key: a conflict with the Pending claim while it holds.
        match seen {
            Decision::Conflict {
                state: State::Pending,
                ..
            } => looked += 1,
            // Settled meanwhile.
            Decision::Conflict {
                state: State::Succeeded,
                ..
            } => {}
            other => panic!("while the handler ran, a begin answered {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(looked > 10, "looked {looked} times");
    let answer = first.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(executions.load(Ordering::SeqCst), 1, "it ran once");
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state(), State::Succeeded);
}
