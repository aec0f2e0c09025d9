//! The layers after the key on the file, inside a caller's transaction (docs/design.md
//! §8): concurrent deductions with a version check (`transition_in` in an execute), one
//! business value claimed under two keys (`claim_unique_in`), and the file's check of its
//! entity index. (Moves, lists and claims on their own, callbacks in every order, and
//! export and import are the conformance suite's, on every engine.)

use std::sync::Arc;

use crate::common::machines::machine;
use crate::common::{T0, fp, id};
use idem_core::machine::EntityDecision;
use idem_core::{Outcome, Timestamp, Verdict};
use idem_store::entity::EntityId;
use idem_store::entity::Uniqueness;
use idem_store::redb::{TableDefinition, WriteTransaction};
use idem_store::{ExecuteError, Executed, Store};

const BALANCE: TableDefinition<&str, u64> = TableDefinition::new("bank.balance");
const START: u64 = 10_000;
const DEBIT: u64 = 7;

#[derive(Debug)]
enum Debit {
    /// Someone moved the account since it was read: read again and retry.
    Stale,
}

#[test]
fn sixty_four_concurrent_debits_with_a_version_check_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path().join("idem.redb")).unwrap());
    // The account flips between two states on every debit, so every debit is a move
    // and bumps the version.
    let ledger = Arc::new(machine(
        &["even", "odd"],
        &[("even", "odd"), ("odd", "even")],
    ));
    let account = EntityId::new("bank", "account", "alice").unwrap();
    let open = store
        .execute(
            &id("bank", "open", "alice"),
            fp("open"),
            Timestamp(T0),
            |txn| {
                txn.open_table(BALANCE)?.insert("alice", START)?;
                Ok::<_, idem_store::redb::Error>((Verdict::Succeeded, Outcome::default(), ()))
            },
        )
        .unwrap();
    assert!(matches!(open, Executed::Ran { .. }));
    assert!(matches!(
        store
            .transition(&ledger, &account, "even", None, Timestamp(T0))
            .unwrap(),
        EntityDecision::Applied { .. }
    ));
    let retries: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|n| {
                let (store, ledger, account) = (&store, &ledger, &account);
                scope.spawn(move || {
                    let key = id("bank", "debit", &format!("d-{n}"));
                    let mut stale = 0;
                    loop {
                        // Read the balance and the version from one snapshot, outside
                        // any write: the naive read-modify-write that loses updates.
                        let (balance, entity) = store
                            .read(|txn| {
                                let balance = txn
                                    .open_table(BALANCE)
                                    .unwrap()
                                    .get("alice")
                                    .unwrap()
                                    .unwrap()
                                    .value();
                                (balance, store.entity_in(txn, account).unwrap().unwrap())
                            })
                            .unwrap();
                        let next = if entity.state == "even" {
                            "odd"
                        } else {
                            "even"
                        };
                        let work = |txn: &WriteTransaction| {
                            match store
                                .transition_in(
                                    txn,
                                    ledger,
                                    account,
                                    next,
                                    Some(entity.version),
                                    Timestamp(T0 + 1),
                                )
                                .unwrap()
                            {
                                EntityDecision::Applied { .. } => {}
                                // Moved meanwhile: the version differs, or (a repeated
                                // move is AlreadyThere before any version check) someone
                                // else made this very move.
                                EntityDecision::VersionMismatch { .. }
                                | EntityDecision::AlreadyThere { .. } => {
                                    return Err(Debit::Stale);
                                }
                                other => panic!("{other:?}"),
                            }
                            txn.open_table(BALANCE)
                                .unwrap()
                                .insert("alice", balance - DEBIT)
                                .unwrap();
                            Ok((Verdict::Succeeded, Outcome::new(200, "debited"), ()))
                        };
                        match store.execute(
                            &key,
                            fp(&format!("debit {n}")),
                            Timestamp(T0 + 1),
                            work,
                        ) {
                            Ok(Executed::Ran { .. }) => return stale,
                            Err(ExecuteError::Work(Debit::Stale)) => stale += 1,
                            other => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let balance = store
        .read(|txn| {
            txn.open_table(BALANCE)
                .unwrap()
                .get("alice")
                .unwrap()
                .unwrap()
                .value()
        })
        .unwrap();
    assert_eq!(balance, START - 64 * DEBIT, "an update was lost");
    assert_eq!(store.get_entity(&account).unwrap().unwrap().version, 1 + 64);
    println!("64 debits, {retries} retried after a version mismatch");
}

#[test]
fn one_business_value_under_two_keys_is_claimed_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("idem.redb")).unwrap();
    // Two different keys (two devices) for one receipt number.
    let sell = |key: &str| {
        store
            .execute(
                &id("shop", "sale", key),
                fp(key),
                Timestamp(T0),
                |txn| match store.claim_unique_in(txn, "shop", "receipt", "R-100", key)? {
                    Uniqueness::Claimed => {
                        Ok((Verdict::Succeeded, Outcome::new(201, "sold"), None))
                    }
                    Uniqueness::Taken { by } => Ok((
                        Verdict::Failed,
                        Outcome::new(409, format!("receipt R-100 is {by}'s")),
                        Some(by),
                    )),
                },
            )
            .map_err(|e: ExecuteError<idem_store::Error>| e.to_string())
            .unwrap()
    };
    assert!(matches!(sell("k1"), Executed::Ran { value: None, .. }));
    match sell("k2") {
        Executed::Ran { value, record } => {
            assert_eq!(value.as_deref(), Some("k1"));
            assert_eq!(record.state(), idem_core::State::Failed);
        }
        other => panic!("{other:?}"),
    }
    // A retry of k1 replays, and the value is k1's. (That a claim outlives the sweep
    // and ends when released is the conformance suite's, on every engine.)
    assert!(matches!(sell("k1"), Executed::NotRun(_)));
    assert_eq!(
        store
            .unique_holder("shop", "receipt", "R-100")
            .unwrap()
            .as_deref(),
        Some("k1")
    );
}

#[test]
fn check_finds_an_entity_missing_from_its_state_index() {
    const ENTITY_STATES: TableDefinition<&[u8], ()> = TableDefinition::new("idem.entity.state");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let payment = machine(&["created", "paid"], &[("created", "paid")]);
    {
        let store = Store::open(&path).unwrap();
        for key in ["p-1", "p-2"] {
            let id = EntityId::new("shop", "payment", key).unwrap();
            let applied = store.transition(&payment, &id, "paid", None, Timestamp(T0));
            assert!(matches!(applied, Ok(EntityDecision::Applied { .. })));
        }
        assert!(store.check().unwrap().is_ok());
    }
    {
        let db = idem_store::redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(ENTITY_STATES)
            .unwrap()
            .pop_first()
            .unwrap()
            .unwrap();
        txn.commit().unwrap();
    }
    let report = Store::open(&path).unwrap().check().unwrap();
    assert_eq!(
        report.problems,
        [
            "entity shop/payment/p-1: missing from the entity state index (paid)",
            "entity state index holds 1 entries for 2 entities"
        ],
        "{report:?}"
    );
}
