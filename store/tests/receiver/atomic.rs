//! Atomic execute: the claim, the caller's writes and the settled record commit
//! together or not at all, and many threads racing on keys credit each one exactly once.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::common::{Rng, T0, fp, id, seed};
use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, State, Status, Timestamp, Verdict};
use idem_store::redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use idem_store::{Error, ExecuteError, Executed, ListFilter, Store};

const BALANCE: TableDefinition<&str, u64> = TableDefinition::new("test.balance");

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("idem.redb")).unwrap()
}

/// Credits `account` by `amount`; the outcome names the new balance.
fn credit(
    txn: &WriteTransaction,
    account: &str,
    amount: u64,
) -> Result<(Verdict, Outcome, u64), idem_store::redb::Error> {
    let mut table = txn.open_table(BALANCE)?;
    let balance = table.get(account)?.map_or(0, |v| v.value()) + amount;
    table.insert(account, balance)?;
    Ok((
        Verdict::Succeeded,
        Outcome::new(200, format!("{account} credited {amount}")),
        balance,
    ))
}

fn balances(store: &Store) -> BTreeMap<String, u64> {
    store
        .read(|txn| {
            let Ok(table) = txn.open_table(BALANCE) else {
                return BTreeMap::new();
            };
            table
                .iter()
                .unwrap()
                .map(|entry| {
                    let (k, v) = entry.unwrap();
                    (k.value().to_string(), v.value())
                })
                .collect()
        })
        .unwrap()
}

fn never_runs(_: &WriteTransaction) -> Result<(Verdict, Outcome, ()), ()> {
    panic!("the work must not run")
}

fn outcome_body<T>(executed: &Executed<T>) -> Vec<u8> {
    let (verdict, outcome) = executed.outcome().expect("a settled outcome");
    assert_eq!(verdict, Verdict::Succeeded);
    outcome.body.clone()
}

#[test]
fn a_hundred_threads_on_one_key_credit_it_once_and_see_one_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir));
    let key = id("shop", "credit", "sale-1");
    let results: Vec<Executed<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..100)
            .map(|_| {
                scope.spawn(|| {
                    store
                        .execute(&key, fp("alice+100"), Timestamp(T0), |txn| {
                            credit(txn, "alice", 100)
                        })
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ran = results
        .iter()
        .filter(|r| matches!(r, Executed::Ran { .. }))
        .count();
    assert_eq!(ran, 1);
    let bodies: Vec<Vec<u8>> = results.iter().map(outcome_body).collect();
    assert!(
        bodies.iter().all(|b| b == b"alice credited 100"),
        "{bodies:?}"
    );
    assert_eq!(balances(&store)["alice"], 100);
    assert_eq!(store.stats(Timestamp(T0)).unwrap().pending, 0);
}

#[test]
fn a_hundred_threads_on_a_hundred_keys_credit_every_key_once() {
    let seed = seed("a_hundred_threads_on_a_hundred_keys");
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let ran: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..100u64)
            .map(|thread| {
                let store = &store;
                scope.spawn(move || {
                    let mut keys: Vec<u64> = (0..100).collect();
                    Rng::new(seed ^ thread).shuffle(&mut keys);
                    let mut ran = Vec::new();
                    for k in keys {
                        let key = id("shop", "credit", &format!("sale-{k}"));
                        let account = format!("acct-{k}");
                        let done = store
                            .execute(&key, fp(&account), Timestamp(T0), |txn| {
                                credit(txn, &account, 1)
                            })
                            .unwrap();
                        assert_eq!(
                            outcome_body(&done),
                            format!("{account} credited 1").into_bytes()
                        );
                        if matches!(done, Executed::Ran { .. }) {
                            ran.push(k);
                        }
                    }
                    ran
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = ran.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>(), "seed {seed}");
    let balances = balances(&store);
    assert_eq!(balances.len(), 100);
    assert!(balances.values().all(|&b| b == 1), "seed {seed}");
    let stats = store.stats(Timestamp(T0)).unwrap();
    assert_eq!((stats.succeeded, stats.pending), (100, 0));
    assert_eq!(stats.generation.0, 100);
}

#[test]
fn an_error_from_the_work_rolls_everything_back_and_leaves_the_key_claimable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let key = id("shop", "credit", "sale-1");
    let failed = store.execute(&key, fp("a"), Timestamp(T0), |txn| {
        credit(txn, "alice", 5).unwrap();
        Err::<(Verdict, Outcome, ()), _>("card declined after the write")
    });
    assert!(matches!(
        failed,
        Err(ExecuteError::Work("card declined after the write"))
    ));
    assert_eq!(store.get(&key).unwrap(), None);
    assert!(balances(&store).is_empty());
    assert_eq!(store.generation().unwrap().0, 0);

    let done = store
        .execute(&key, fp("a"), Timestamp(T0), |txn| credit(txn, "alice", 5))
        .unwrap();
    assert!(matches!(done, Executed::Ran { value: 5, .. }));
    assert_eq!(balances(&store)["alice"], 5);
}

#[test]
fn a_panic_in_the_work_rolls_back_and_the_store_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let key = id("shop", "credit", "sale-1");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = store.execute(&key, fp("a"), Timestamp(T0), |txn| {
            credit(txn, "alice", 5).unwrap();
            panic!("bug in the work");
            #[allow(unreachable_code)]
            Ok::<_, ()>((Verdict::Succeeded, Outcome::default(), ()))
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(store.get(&key).unwrap(), None);
    assert!(balances(&store).is_empty());
    let done = store
        .execute(&key, fp("a"), Timestamp(T0), |txn| credit(txn, "alice", 5))
        .unwrap();
    assert!(matches!(done, Executed::Ran { .. }));
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn an_oversized_outcome_rolls_back_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .config(Config {
            max_outcome_bytes: 8,
            ..Config::default()
        })
        .open(dir.path().join("idem.redb"))
        .unwrap();
    let key = id("shop", "credit", "sale-1");
    let err = store
        .execute(&key, fp("a"), Timestamp(T0), |txn| credit(txn, "alice", 5))
        .unwrap_err();
    assert_eq!(err.to_string(), "outcome: 16 bytes, at most 8");
    assert!(matches!(err, ExecuteError::Store(Error::Refused(_))));
    assert!(balances(&store).is_empty());
    assert_eq!(store.get(&key).unwrap(), None);
}

#[test]
fn execute_never_leaves_a_pending_record_and_answers_other_states() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let key = id("shop", "credit", "sale-1");
    let done = store
        .execute(&key, fp("a"), Timestamp(T0), |txn| credit(txn, "alice", 1))
        .unwrap();
    let Executed::Ran { record, value: 1 } = done else {
        panic!("{done:?}")
    };
    assert_eq!(record.state(), State::Succeeded);
    assert_eq!(record.created_at, record.updated_at);
    assert!(matches!(record.status, Status::Settled { .. }));
    assert_eq!(store.get(&key).unwrap(), Some(record));
    let mut pending = 0;
    store
        .list(
            &ListFilter {
                state: Some(State::Pending),
                ..ListFilter::default()
            },
            |_, _| {
                pending += 1;
                ControlFlow::Continue(())
            },
        )
        .unwrap();
    assert_eq!(pending, 0);

    // A different request under the live key is a conflict; the work does not run.
    let conflict = store
        .execute(&key, fp("b"), Timestamp(T0 + 1), never_runs)
        .unwrap();
    assert!(matches!(
        conflict,
        Executed::NotRun(Decision::Conflict {
            state: State::Succeeded,
            ..
        })
    ));

    // A key held by a two-phase executor answers InProgress, then (lease run out)
    // NeedsReconciliation, which is committed.
    let held = id("shop", "credit", "held");
    store.begin(&held, fp("a"), Timestamp(T0)).unwrap();
    let busy = store
        .execute(&held, fp("a"), Timestamp(T0 + 1), never_runs)
        .unwrap();
    assert!(matches!(
        busy,
        Executed::NotRun(Decision::InProgress { .. })
    ));
    let late = Timestamp(T0 + Config::default().lease_ms);
    let unknown = store.execute(&held, fp("a"), late, never_runs).unwrap();
    assert!(matches!(
        unknown,
        Executed::NotRun(Decision::NeedsReconciliation { .. })
    ));
    assert_eq!(store.get(&held).unwrap().unwrap().state(), State::Unknown);
    assert_eq!(balances(&store)["alice"], 1);
}

#[test]
fn the_application_may_keep_its_own_tables_in_the_file_before_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    {
        let db = idem_store::redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(BALANCE)
            .unwrap()
            .insert("alice", 10)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let key = id("shop", "credit", "sale-1");
    let done = store
        .execute(&key, fp("a"), Timestamp(T0), |txn| credit(txn, "alice", 5))
        .unwrap();
    assert!(matches!(done, Executed::Ran { value: 15, .. }));
    assert_eq!(balances(&store)["alice"], 15);
    assert!(store.check().unwrap().is_ok());
    drop(store);
    // Reading the file with redb alone still works.
    let db = idem_store::redb::Database::create(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(BALANCE).unwrap();
    assert_eq!(table.get("alice").unwrap().unwrap().value(), 15);
}
