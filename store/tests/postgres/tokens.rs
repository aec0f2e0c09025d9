//! One-time tokens on PostgreSQL inside a caller's transaction, across replicas
//! (`consume_execute`): consumable again when the business write failed, and run by
//! exactly one of a hundred consumers. (Issue, the two-phase consume, intents, refusals
//! and the sweep are the conformance suite's, on every engine.)

use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_core::{Outcome, RecordId, Verdict};
use idem_store::postgres::tokio_postgres::Transaction;
use idem_store::token::Consumed;
use idem_store::{ExecuteError, Executed};
use tokio::sync::Barrier;

use super::{Server, fp, replicas};

fn random(n: u8) -> [u8; 16] {
    [n; 16]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_consumers_of_one_token_across_replicas_run_it_once() {
    let server = Server::start();
    let fleet = replicas(&server, 3, 34).await;
    let issued = fleet[0]
        .issue_token("shop", "redeem", 60_000, None, random(7))
        .await
        .unwrap();
    let id = RecordId::new("shop", "redeem", issued.token().as_str()).unwrap();

    // A consume whose business write fails leaves the token consumable.
    let failed = fleet[1]
        .consume_execute(&id, fp("redeem"), |_txn: &Transaction<'_>| {
            Box::pin(async { Err::<(Verdict, Outcome, ()), _>("the voucher service is down") })
        })
        .await;
    assert!(matches!(failed, Err(ExecuteError::Work(_))), "{failed:?}");

    let barrier = Arc::new(Barrier::new(100));
    let consumers: Vec<_> = (0..100)
        .map(|n| {
            let (store, barrier, id) = (fleet[n % 3].clone(), Arc::clone(&barrier), id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .consume_execute(&id, fp("redeem"), |_txn: &Transaction<'_>| {
                        Box::pin(async {
                            Ok::<_, String>((Verdict::Succeeded, Outcome::new(200, "redeemed"), ()))
                        })
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ran = 0;
    for consumer in consumers {
        match consumer.await.unwrap() {
            Consumed::Admitted(Executed::Ran { .. }) => ran += 1,
            Consumed::Admitted(Executed::NotRun(
                Decision::Replay { .. } | Decision::InProgress { .. },
            )) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ran, 1, "exactly one consumer ran the token");
}
