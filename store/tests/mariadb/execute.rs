//! Atomic execute on MariaDB: the claim, the business write and the settled record in one
//! transaction; a duplicate answered, never run; a failed work leaves nothing; a key held
//! by an open execute answered in progress after the lock timeout; the inbox.

use std::sync::Arc;
use std::time::Duration;

use idem_core::protocol::Decision;
use idem_core::{Generation, Outcome, State, Verdict};
use idem_store::inbox::Handled;
use idem_store::mysql::MySqlStore;
use idem_store::mysql::mysql_async::Transaction;
use idem_store::mysql::mysql_async::prelude::Queryable;
use idem_store::{Executed, Fingerprint, Receiver, RecordId, Timestamp};
use tokio::sync::{Barrier, Notify};

use crate::server::Server;
use crate::{fresh_database, shared_server};

fn id(key: &str) -> RecordId {
    RecordId::new("shop", "credit", key).unwrap()
}

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

async fn credit(
    txn: &mut Transaction<'_>,
    amount: i64,
) -> Result<(Verdict, Outcome, i64), mysql_async::Error> {
    txn.exec_drop(
        "UPDATE balance SET amount = amount + ? WHERE account = 'alice'",
        (amount,),
    )
    .await?;
    let balance: Option<i64> = txn
        .query_first("SELECT amount FROM balance WHERE account = 'alice'")
        .await?;
    let balance = balance.unwrap_or_default();
    Ok((
        Verdict::Succeeded,
        Outcome::new(200, format!("balance {balance}")),
        balance,
    ))
}

/// A database with alice's balance at 0 beside idem's tables: its name.
fn with_balance(server: &Server) -> String {
    let db = fresh_database(server);
    server.sql(&format!(
        "CREATE TABLE {db}.balance (account VARCHAR(32) PRIMARY KEY, amount BIGINT NOT NULL) ENGINE = InnoDB; \
         INSERT INTO {db}.balance VALUES ('alice', 0)"
    ));
    db
}

fn balance(server: &Server, db: &str) -> String {
    server.sql(&format!(
        "SELECT amount FROM {db}.balance WHERE account = 'alice'"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_executes_of_one_key_credit_once() {
    let server = shared_server();
    let db = with_balance(&server);
    let store = MySqlStore::builder()
        .pool_size(64)
        .lock_timeout(Duration::from_secs(5))
        .connect(&server.url_of(&db))
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
    assert_eq!(balance(&server, &db), "5\n", "credited once");
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
    assert_eq!(balance(&server, &db), "5\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_work_leaves_nothing_and_an_open_execute_is_answered_in_progress() {
    let server = shared_server();
    let db = with_balance(&server);
    let store = MySqlStore::connect(&server.url_of(&db)).await.unwrap();
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
    assert_eq!(balance(&server, &db), "0\n");
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
    // A two-phase begin meeting the open claim is answered in progress as well, after
    // the lock timeout (1 s), not after its bounded retries.
    let asked = std::time::Instant::now();
    let begun = store.begin(&key, fp("a"), Timestamp(0)).await.unwrap();
    assert!(
        matches!(
            begun,
            Decision::InProgress {
                generation: Generation(0),
                ..
            }
        ),
        "{begun:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    release.notify_one();
    assert!(matches!(
        first.await.unwrap(),
        Executed::Ran { value: 1, .. }
    ));
    assert_eq!(balance(&server, &db), "1\n");
    assert!(matches!(
        store.begin(&key, fp("a"), Timestamp(0)).await.unwrap(),
        Decision::Replay { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_delivered_three_times_is_handled_once() {
    let server = shared_server();
    let db = with_balance(&server);
    let store = MySqlStore::connect(&server.url_of(&db)).await.unwrap();
    let inbox = store.inbox("billing").unwrap();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let outcome = inbox
            .handle("payments", "msg-1", fp("pay 3"), |txn| {
                Box::pin(async move {
                    let (_, outcome, balance) = credit(txn, 3).await?;
                    Ok::<_, mysql_async::Error>((outcome, balance))
                })
            })
            .await
            .unwrap();
        answers.push(outcome);
    }
    assert_eq!(balance(&server, &db), "3\n", "handled once");
    assert!(
        matches!(&answers[0], Handled::Ran { value: 3, outcome } if outcome.body == b"balance 3"),
        "{answers:?}"
    );
    for answer in &answers[1..] {
        assert!(
            matches!(answer, Handled::Duplicate(outcome) if outcome.body == b"balance 3"),
            "{answers:?}"
        );
    }
}
