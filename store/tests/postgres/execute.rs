//! Atomic execute on PostgreSQL: the claim, the business write and the settled record in
//! one transaction; a duplicate answered, never run; a failed work leaves nothing; a key
//! held by an open execute answered in progress after the lock timeout.

use std::sync::Arc;
use std::time::Duration;

use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Outcome, State, Verdict};
use idem_store::Executed;
use idem_store::Receiver;
use idem_store::postgres::PgStore;
use idem_store::postgres::tokio_postgres::Transaction;
use tokio::sync::{Barrier, Notify};

use super::{Server, client, fp, id};

async fn credit<'t>(
    txn: &'t Transaction<'t>,
    amount: i64,
) -> Result<(Verdict, Outcome, i64), tokio_postgres::Error> {
    let row = txn
        .query_one(
            "UPDATE balance SET amount = amount + $1 WHERE account = 'alice' RETURNING amount",
            &[&amount],
        )
        .await?;
    let balance: i64 = row.get(0);
    Ok((
        Verdict::Succeeded,
        Outcome::new(200, format!("balance {balance}")),
        balance,
    ))
}

/// A server with alice's balance at 0, and a client of it.
async fn with_balance() -> (Server, tokio_postgres::Client) {
    let server = Server::start();
    let db = client(&server).await;
    db.batch_execute(
        "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL); \
         INSERT INTO balance VALUES ('alice', 0)",
    )
    .await
    .unwrap();
    (server, db)
}

async fn balance(db: &tokio_postgres::Client) -> i64 {
    db.query_one("SELECT amount FROM balance WHERE account = 'alice'", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_executes_of_one_key_credit_once() {
    let (server, db) = with_balance().await;
    let store = PgStore::builder()
        .pool_size(64)
        .lock_timeout(Duration::from_secs(5))
        .connect(&server.url())
        .await
        .unwrap();
    let key = id("credit-1");
    let barrier = Arc::new(Barrier::new(64));
    let callers: Vec<_> = (0..64)
        .map(|_| {
            let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .execute(&key, fp("alice+5"), |txn| Box::pin(credit(txn, 5)))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ran = 0;
    for caller in callers {
        match caller.await.unwrap() {
            Executed::Ran { value, record } => {
                ran += 1;
                assert_eq!(value, 5);
                assert_eq!(record.state(), State::Succeeded);
            }
            Executed::NotRun(Decision::Replay { outcome, .. }) => {
                assert_eq!(outcome.body, b"balance 5");
            }
            Executed::NotRun(Decision::InProgress { generation, .. }) => {
                assert_eq!(generation, Generation(0), "held by an open execute");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ran, 1, "exactly one execute ran");
    assert_eq!(balance(&db).await, 5, "credited once");
    let retry = store
        .execute(&key, fp("alice+5"), |txn| Box::pin(credit(txn, 5)))
        .await
        .unwrap();
    assert!(matches!(retry, Executed::NotRun(Decision::Replay { .. })));
    let other = store
        .execute(&key, fp("alice+7"), |txn| Box::pin(credit(txn, 7)))
        .await
        .unwrap();
    assert!(matches!(other, Executed::NotRun(Decision::Conflict { .. })));
    assert_eq!(balance(&db).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_work_leaves_nothing_and_an_open_execute_is_answered_in_progress() {
    let (server, db) = with_balance().await;
    let store = PgStore::builder()
        .config(Config::default())
        .lock_timeout(Duration::from_millis(200))
        .connect(&server.url())
        .await
        .unwrap();
    let key = id("credit-2");

    // The work writes, then fails: its write and the claim roll back together.
    let failed = store
        .execute(&key, fp("a"), |txn| {
            Box::pin(async move {
                credit(txn, 100).await.map_err(|e| e.to_string())?;
                Err::<(Verdict, Outcome, i64), _>("the card was declined".to_owned())
            })
        })
        .await;
    assert!(matches!(failed, Err(idem_store::ExecuteError::Work(_))));
    assert_eq!(balance(&db).await, 0);
    assert_eq!(store.get(&key).await.unwrap(), None, "no record");

    // An execute holding the key in its open transaction: a duplicate is answered in
    // progress after the lock timeout, and does not run.
    let holding = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let first = {
        let (store, key, holding, release) =
            (store.clone(), key.clone(), holding.clone(), release.clone());
        tokio::spawn(async move {
            store
                .execute(&key, fp("a"), move |txn| {
                    Box::pin(async move {
                        let credited = credit(txn, 1).await;
                        holding.notify_one();
                        release.notified().await;
                        credited
                    })
                })
                .await
                .unwrap()
        })
    };
    holding.notified().await;
    let duplicate = store
        .execute(&key, fp("a"), |txn| Box::pin(credit(txn, 1)))
        .await
        .unwrap();
    assert!(
        matches!(
            duplicate,
            Executed::NotRun(Decision::InProgress {
                generation: Generation(0),
                ..
            })
        ),
        "{duplicate:?}"
    );
    release.notify_one();
    assert!(matches!(
        first.await.unwrap(),
        Executed::Ran { value: 1, .. }
    ));
    assert_eq!(balance(&db).await, 1);
    assert!(matches!(
        store
            .begin(&key, fp("a"), idem_core::Timestamp(0))
            .await
            .unwrap(),
        Decision::Replay { .. }
    ));
}
