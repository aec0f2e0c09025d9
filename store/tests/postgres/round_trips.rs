//! Round trips, counted from what the server ran (`pg_stat_statements`): a fresh key's
//! begin 1 and complete 1, a replay 1 and 0 from a replica's replay cache, a takeover
//! at most 3; a move of an entity 1, and an execute with a move inside 7 statements.

use idem_core::protocol::Decision;
use idem_core::{Config, LeaseExpiry, Outcome, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::postgres::PgStore;

use super::{Server, client, fp, id};

/// Statements the server ran since the last reset, other than the counting's own.
async fn statements_since(db: &tokio_postgres::Client) -> i64 {
    let row = db
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
              WHERE query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .await
        .unwrap();
    let count = row.get(0);
    db.batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_input_costs_the_statements_it_should() {
    let server = Server::start_with(&[("shared_preload_libraries", "pg_stat_statements")]);
    let db = client(&server).await;
    db.batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    let config = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        ..Config::default()
    };
    let url = server.url();
    let connect = |cache: usize| {
        PgStore::builder()
            .config(config.clone())
            .pool_size(1)
            .replay_cache(cache)
            .connect(&url)
    };
    let cached = connect(1_000).await.unwrap();
    let uncached = connect(0).await.unwrap();
    let now = Timestamp(0);
    statements_since(&db).await;

    let k = id("rt-1");
    let Decision::Claimed { generation, .. } = cached.begin(&k, fp("a"), now).await.unwrap() else {
        panic!()
    };
    assert_eq!(statements_since(&db).await, 1, "a fresh key's begin");
    cached
        .complete(
            &k,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            now,
        )
        .await
        .unwrap();
    assert_eq!(statements_since(&db).await, 1, "complete");
    assert!(matches!(
        uncached.begin(&k, fp("a"), now).await.unwrap(),
        Decision::Replay { .. }
    ));
    assert_eq!(
        statements_since(&db).await,
        1,
        "a replay read from the database"
    );
    assert!(matches!(
        cached.begin(&k, fp("a"), now).await.unwrap(),
        Decision::Replay { .. }
    ));
    assert_eq!(
        statements_since(&db).await,
        0,
        "a replay from the replica's cache"
    );

    let k2 = id("rt-2");
    let Decision::Claimed { generation, .. } = cached.begin(&k2, fp("a"), now).await.unwrap()
    else {
        panic!()
    };
    db.execute(
        "UPDATE idem_records SET lease_until = idem_now() - 1 WHERE key = 'rt-2'",
        &[],
    )
    .await
    .unwrap();
    statements_since(&db).await;
    let Decision::Claimed {
        generation: taken, ..
    } = uncached.begin(&k2, fp("a"), now).await.unwrap()
    else {
        panic!("a takeover")
    };
    assert!(taken > generation);
    let takeover = statements_since(&db).await;
    println!("a takeover ran {takeover} statements");
    assert!(takeover <= 3, "a takeover ran {takeover} statements");

    // A move of an entity this replica last moved: one statement. Inside an execute:
    // BEGIN, the lock timeout with the claim, its reset with the move, the settle,
    // COMMIT (seven statements in five round trips).
    let flip = idem_store::entity::Machine::new(idem_store::entity::MachineSpec {
        states: vec!["even".into(), "odd".into()],
        initial: "even".into(),
        moves: vec![("even".into(), "odd".into()), ("odd".into(), "even".into())],
    })
    .unwrap();
    let account = idem_store::entity::EntityId::new("shop", "account", "a-1").unwrap();
    let created = cached
        .transition(&flip, &account, "even", None)
        .await
        .unwrap();
    assert!(matches!(
        created,
        idem_store::entity::EntityDecision::Applied { .. }
    ));
    statements_since(&db).await;
    let moved = cached
        .transition(&flip, &account, "odd", Some(1))
        .await
        .unwrap();
    assert!(matches!(
        moved,
        idem_store::entity::EntityDecision::Applied { .. }
    ));
    assert_eq!(statements_since(&db).await, 1, "a move");
    let executed = cached
        .execute(&id("rt-3"), fp("a"), |txn| {
            let (store, flip, account) = (cached.clone(), flip.clone(), account.clone());
            Box::pin(async move {
                let moved = store
                    .transition_in(txn, &flip, &account, "even", Some(2))
                    .await?;
                assert!(matches!(
                    moved,
                    idem_store::entity::EntityDecision::Applied { .. }
                ));
                Ok::<_, idem_store::Error>((Verdict::Succeeded, Outcome::new(200, "moved"), ()))
            })
        })
        .await
        .unwrap();
    assert!(matches!(executed, idem_store::Executed::Ran { .. }));
    let ran: Vec<String> = db
        .query(
            "SELECT query FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' \
              ORDER BY query",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        statements_since(&db).await,
        7,
        "an execute with a move inside: {ran:#?}"
    );
}
