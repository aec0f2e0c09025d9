//! The layers after the key on PostgreSQL inside a caller's transaction, across replicas
//! (several `PgStore`s on one database): concurrent debits with a version check
//! (`transition_in` in an execute), one receipt number under two keys at once
//! (`claim_unique_in`), and the schemas before entities upgraded. (Moves, lists and
//! claims on their own, and callbacks in every order on random replicas, are the
//! conformance suite's, on every engine.)

use std::sync::Arc;

use idem_core::machine::EntityDecision;
use idem_core::protocol::Decision;
use idem_core::{Outcome, Verdict};
use idem_store::entity::{EntityId, Uniqueness};
use idem_store::postgres::tokio_postgres::Transaction;
use idem_store::postgres::{ConnectError, PgStore};
use idem_store::{ExecuteError, Executed, Receiver};

use super::machines::machine;
use super::{Server, client, client_of, fp, id, replicas, url_of};

const START: i64 = 10_000;
const DEBIT: i64 = 7;

#[derive(Debug)]
enum Debit {
    /// The account moved since it was read: read again and retry.
    Stale,
    Database(idem_store::Error),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_debits_over_replicas_with_a_version_check_lose_no_update() {
    let server = Server::start();
    let db = client(&server).await;
    db.batch_execute(&format!(
        "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL); \
         INSERT INTO balance VALUES ('alice', {START})"
    ))
    .await
    .unwrap();
    let fleet = replicas(&server, 3, 24).await;
    // The account flips between two states on every debit, so every debit is a move.
    let ledger = Arc::new(machine(
        &["even", "odd"],
        &[("even", "odd"), ("odd", "even")],
    ));
    let account = EntityId::new("bank", "account", "alice").unwrap();
    assert!(matches!(
        fleet[0]
            .transition(&ledger, &account, "even", None)
            .await
            .unwrap(),
        EntityDecision::Applied { .. }
    ));
    let debits: Vec<_> = (0..64)
        .map(|n| {
            let store = fleet[n % fleet.len()].clone();
            let (ledger, account) = (Arc::clone(&ledger), account.clone());
            let reader = server.url();
            tokio::spawn(async move {
                let mut db = client_of(&reader).await;
                let key = id(&format!("debit-{n}"));
                let mut stale = 0u32;
                loop {
                    // Read the balance and the version from one snapshot, outside any
                    // write: the naive read-modify-write that loses updates without the
                    // check.
                    let snapshot = db
                        .build_transaction()
                        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                        .read_only(true)
                        .start()
                        .await
                        .unwrap();
                    let balance: i64 = snapshot
                        .query_one("SELECT amount FROM balance WHERE account = 'alice'", &[])
                        .await
                        .unwrap()
                        .get(0);
                    let entity = store.entity_in(&snapshot, &account).await.unwrap().unwrap();
                    snapshot.commit().await.unwrap();
                    let next = if entity.state == "even" {
                        "odd"
                    } else {
                        "even"
                    };
                    let (store2, ledger, account2) =
                        (store.clone(), Arc::clone(&ledger), account.clone());
                    let done =
                        store
                            .execute(
                                &key,
                                fp(&format!("debit {n}")),
                                move |txn: &Transaction<'_>| {
                                    Box::pin(async move {
                                        match store2
                                            .transition_in(
                                                txn,
                                                &ledger,
                                                &account2,
                                                next,
                                                Some(entity.version),
                                            )
                                            .await
                                            .map_err(Debit::Database)?
                                        {
                                            EntityDecision::Applied { .. } => {}
                                            EntityDecision::VersionMismatch { .. }
                                            | EntityDecision::AlreadyThere { .. } => {
                                                return Err(Debit::Stale);
                                            }
                                            other => panic!("{other:?}"),
                                        }
                                        txn.execute(
                                    "UPDATE balance SET amount = $1 WHERE account = 'alice'",
                                    &[&(balance - DEBIT)],
                                )
                                .await
                                .map_err(|e| Debit::Database(idem_store::Error::Database {
                                    operation: "debit",
                                    source: e,
                                }))?;
                                        Ok((Verdict::Succeeded, Outcome::new(200, "debited"), ()))
                                    })
                                },
                            )
                            .await;
                    match done {
                        Ok(Executed::Ran { .. }) => return stale,
                        Err(ExecuteError::Work(Debit::Stale)) => stale += 1,
                        Ok(Executed::NotRun(Decision::InProgress { .. })) => stale += 1,
                        Err(ExecuteError::Work(Debit::Database(e))) => panic!("debit {n}: {e}"),
                        other => panic!("debit {n}: {other:?}"),
                    }
                }
            })
        })
        .collect();
    let mut retries = 0;
    for debit in debits {
        retries += debit.await.unwrap();
    }
    let balance: i64 = db
        .query_one("SELECT amount FROM balance WHERE account = 'alice'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(balance, START - 64 * DEBIT, "an update was lost");
    assert_eq!(
        fleet[1]
            .get_entity(&account)
            .await
            .unwrap()
            .unwrap()
            .version,
        1 + 64
    );
    println!("64 debits over 3 replicas, {retries} retried after a version mismatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_receipt_number_under_two_keys_at_once_from_two_replicas_has_one_holder() {
    let server = Server::start();
    let fleet = replicas(&server, 2, 4).await;
    for round in 0..50 {
        let receipt = format!("R-{round}");
        let sales: Vec<_> = (0..2)
            .map(|device| {
                let store = fleet[device].clone();
                let receipt = receipt.clone();
                tokio::spawn(async move {
                    let key = format!("sale-{round}-{device}");
                    let (store2, receipt2, key2) = (store.clone(), receipt.clone(), key.clone());
                    let sold = store
                        .execute(&id(&key), fp(&key), move |txn: &Transaction<'_>| {
                            Box::pin(async move {
                                match store2
                                    .claim_unique_in(txn, "shop", "receipt", &receipt2, &key2)
                                    .await?
                                {
                                    Uniqueness::Claimed => Ok::<_, idem_store::Error>((
                                        Verdict::Succeeded,
                                        Outcome::new(201, "sold"),
                                        true,
                                    )),
                                    Uniqueness::Taken { by } => Ok((
                                        Verdict::Failed,
                                        Outcome::new(409, format!("{receipt2} is {by}'s")),
                                        false,
                                    )),
                                }
                            })
                        })
                        .await;
                    match sold {
                        Ok(Executed::Ran { value, .. }) => (key, value),
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect();
        let mut holders = Vec::new();
        for sale in sales {
            let (key, claimed) = sale.await.unwrap();
            if claimed {
                holders.push(key);
            }
        }
        assert_eq!(holders.len(), 1, "round {round}: holders {holders:?}");
        assert_eq!(
            fleet[round % 2]
                .unique_holder("shop", "receipt", &receipt)
                .await
                .unwrap(),
            Some(holders[0].clone())
        );
    }
    // (That a claim outlives the sweep and ends when released is the conformance
    // suite's, on every engine.)
}

/// A database of each older schema version (1 before entities, 2 before intents, 3
/// before the claimant):
/// refused as older without the right to change it, upgraded by a connection that may,
/// its records kept, and every table of this version there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_schema_is_upgraded_and_keeps_its_records() {
    let server = Server::start();
    let db = client(&server).await;
    let goldens = [
        (1, include_str!("../../../testdata/postgres-schema-v1.sql")),
        (2, include_str!("../../../testdata/postgres-schema-v2.sql")),
        (3, include_str!("../../../testdata/postgres-schema-v3.sql")),
    ];
    for (found, golden) in goldens {
        let name = format!("v{found}");
        db.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = url_of(&server, &name);
        let old = client_of(&url).await;
        old.batch_execute(golden).await.unwrap();
        old.execute(
            "INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, \
               created_at, updated_at, lease_until) \
             VALUES ('shop', 'charge', 'kept', $1, nextval('idem_generation'), 0, 1, 1, 2)",
            &[&fp("a").0.as_slice()],
        )
        .await
        .unwrap();
        let refused = PgStore::builder()
            .create_schema(false)
            .connect(&url)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ConnectError::OlderSchema { found: f, supported: 4 } if f == found),
            "{refused:?}"
        );
        let store = PgStore::connect(&url).await.unwrap();
        let version: i64 = old
            .query_one(
                "SELECT value FROM idem_meta WHERE name = 'schema_version'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, 4);
        assert!(
            store.get(&id("kept")).await.unwrap().is_some(),
            "the record is kept"
        );
        let pay = EntityId::new("shop", "payment", "p-1").unwrap();
        let payment = machine(&["created", "paid"], &[("created", "paid")]);
        assert!(matches!(
            store
                .transition(&payment, &pay, "created", None)
                .await
                .unwrap(),
            EntityDecision::Applied { .. }
        ));
        // The intents' table is there: an export reads it.
        let mut out = Vec::new();
        let exported = store.export(&mut out).await.unwrap();
        assert_eq!((exported.records, exported.intents), (1, 0));
    }
}
