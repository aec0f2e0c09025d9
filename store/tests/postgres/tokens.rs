//! One-time tokens on PostgreSQL, across replicas: issued once per intent however many
//! issue at once, consumed by exactly one of a hundred consumers, consumable again when
//! the business write failed, refused when never issued or expired, swept.

use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_core::{Outcome, RecordId, Verdict};
use idem_store::postgres::tokio_postgres::Transaction;
use idem_store::token::{Consumed, Issue, TokenRefusal};
use idem_store::{ExecuteError, Executed};
use tokio::sync::Barrier;

use super::{Server, client, fp, replicas};

fn random(n: u8) -> [u8; 16] {
    [n; 16]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issuing_for_one_intent_at_once_from_replicas_answers_one_token() {
    let server = Server::start();
    let fleet = replicas(&server, 3, 8).await;
    let barrier = Arc::new(Barrier::new(16));
    let issues: Vec<_> = (0..16u8)
        .map(|n| {
            let (store, barrier) = (fleet[usize::from(n) % 3].clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .issue_token("shop", "redeem", 60_000, Some("order-991"), random(n + 1))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut tokens = Vec::new();
    let mut new = 0;
    for issue in issues {
        let issued = issue.await.unwrap();
        if matches!(issued, Issue::New { .. }) {
            new += 1;
        }
        tokens.push(issued.token().clone());
    }
    tokens.dedup();
    assert_eq!(tokens.len(), 1, "one token for one intent: {tokens:?}");
    assert_eq!(new, 1, "one issue wrote it, the others answered it");
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
    // A retry after it is replayed, not refused as used.
    assert!(matches!(
        fleet[2].consume(&id, fp("redeem")).await.unwrap(),
        Consumed::Admitted(Decision::Replay { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_issued_or_expired_are_refused_and_expired_ones_are_swept() {
    let server = Server::start();
    let store = replicas(&server, 1, 2).await.remove(0);
    let never = RecordId::new("shop", "redeem", "AAAAAAAAAAAAAAAAAAAAAA").unwrap();
    assert!(matches!(
        store.consume(&never, fp("x")).await.unwrap(),
        Consumed::Refused(TokenRefusal::NotIssued)
    ));
    let issued = store
        .issue_token("shop", "redeem", 60_000, Some("order-1"), random(3))
        .await
        .unwrap();
    let id = RecordId::new("shop", "redeem", issued.token().as_str()).unwrap();
    assert_eq!(
        store.get_token(&id).await.unwrap().as_ref(),
        Some(issued.entry())
    );
    // Its ttl passes unused.
    let db = client(&server).await;
    db.execute("UPDATE idem_tokens SET expires_at = idem_now() - 1", &[])
        .await
        .unwrap();
    assert!(matches!(
        store.consume(&id, fp("x")).await.unwrap(),
        Consumed::Refused(TokenRefusal::Expired { .. })
    ));
    // Issuing again for the intent makes a new token: the old one expired.
    let again = store
        .issue_token("shop", "redeem", 60_000, Some("order-1"), random(4))
        .await
        .unwrap();
    assert!(matches!(again, Issue::New { .. }));
    assert_ne!(again.token(), issued.token());
    let report = store.sweep_tokens(100).await.unwrap();
    assert_eq!((report.removed, report.remaining_expired), (1, false));
    assert_eq!(store.get_token(&id).await.unwrap(), None);
    assert!(matches!(
        store.consume(&id, fp("x")).await.unwrap(),
        Consumed::Refused(TokenRefusal::NotIssued)
    ));
    // The new token of the intent is untouched by the sweep, and answered again.
    let answered = store
        .issue_token("shop", "redeem", 60_000, Some("order-1"), random(5))
        .await
        .unwrap();
    assert_eq!(answered.token(), again.token());
    // A repeated random is refused, nothing written.
    let taken = store
        .issue_token("shop", "redeem", 60_000, None, random(4))
        .await
        .unwrap_err();
    assert!(matches!(taken, idem_store::Error::TokenTaken), "{taken:?}");
}
