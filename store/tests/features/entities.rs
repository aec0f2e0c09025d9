//! The layers after the key (docs/design.md §8), with the source material's experiments: callbacks
//! in every order, concurrent deductions with a version check, and one business value
//! claimed under two keys.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::machines::{machine, orders};
use crate::common::{T0, fp, id};
use idem_core::machine::EntityDecision;
use idem_core::{Outcome, Timestamp, Verdict};
use idem_store::entity::EntityId;
use idem_store::entity::Uniqueness;
use idem_store::redb::{ConcurrencyMode, Durability, TableDefinition, WriteTransaction};
use idem_store::{ExecuteError, Executed, Store};

fn fast_store(dir: &tempfile::TempDir) -> Store {
    Store::builder()
        .durability(Durability::None)
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .open(dir.path().join("idem.redb"))
        .unwrap()
}

#[test]
fn callbacks_in_every_order_end_in_one_state_and_no_move_runs_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = fast_store(&dir);
    let payment = machine(
        &["created", "paid", "refunded"],
        &[("created", "paid"), ("paid", "refunded")],
    );
    // paid, refunded, a duplicate paid and a late created; each delivered twice.
    let mut events = vec![
        "paid", "refunded", "paid", "created", "paid", "refunded", "paid", "created",
    ];
    let mut all = Vec::new();
    orders(&mut events, 0, &mut all);
    assert_eq!(all.len(), 420, "8! / (4! 2! 2!) distinct orders");
    for (n, order) in all.iter().enumerate() {
        let pay = EntityId::new("shop", "payment", &format!("p-{n}")).unwrap();
        // The order placement creates the payment; its callbacks follow in any order.
        let created = store
            .transition(&payment, &pay, "created", None, Timestamp(T0))
            .unwrap();
        assert!(matches!(created, EntityDecision::Applied { .. }));
        // A provider redelivers what was refused as not yet possible, until a whole
        // round changes nothing.
        let mut queue: Vec<&str> = order.clone();
        let mut applied: BTreeMap<&str, u32> = BTreeMap::new();
        loop {
            let mut refused = Vec::new();
            let mut progress = false;
            for &to in &queue {
                match store
                    .transition(&payment, &pay, to, None, Timestamp(T0 + 1))
                    .unwrap()
                {
                    EntityDecision::Applied { .. } => {
                        *applied.entry(to).or_default() += 1;
                        progress = true;
                    }
                    EntityDecision::AlreadyThere { .. } => {}
                    EntityDecision::Illegal { .. } => refused.push(to),
                    other => panic!("{order:?}: {other:?}"),
                }
            }
            queue = refused;
            if !progress {
                break;
            }
        }
        let entity = store.get_entity(&pay).unwrap().unwrap();
        assert_eq!(
            (entity.state.as_str(), entity.version),
            ("refunded", 3),
            "order {order:?}"
        );
        assert_eq!(
            applied,
            BTreeMap::from([("paid", 1), ("refunded", 1)]),
            "order {order:?}: a move ran twice"
        );
    }
    let refunded = store
        .list_entities("payment", Some("refunded"), usize::MAX)
        .unwrap();
    assert_eq!(refunded.len(), 420);
    assert!(
        store
            .list_entities("payment", Some("paid"), 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.list_entities("payment", None, 7).unwrap().len(), 7);
}

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
    // A retry of k1 replays; the claim outlives a sweep far in the future.
    assert!(matches!(sell("k1"), Executed::NotRun(_)));
    store.sweep(Timestamp(u64::MAX), 100, false).unwrap();
    assert_eq!(
        store
            .unique_holder("shop", "receipt", "R-100")
            .unwrap()
            .as_deref(),
        Some("k1")
    );
    assert!(store.release_unique("shop", "receipt", "R-100").unwrap());
    assert_eq!(
        store.unique_holder("shop", "receipt", "R-100").unwrap(),
        None
    );
    let err = store.unique_holder("shop", "", "R-100").unwrap_err();
    assert_eq!(err.to_string(), "scope: empty, needs 1 to 255 bytes");
}

/// Restoring a terminal from an export keeps its entities and its claimed values: a
/// repeated callback after the restore is still AlreadyThere, a claimed receipt still
/// Taken.
#[test]
fn entities_and_claimed_values_go_through_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let source = fast_store(&dir);
    let payment = machine(
        &["created", "paid", "refunded"],
        &[("created", "paid"), ("paid", "refunded")],
    );
    let now = Timestamp(T0);
    for key in ["p-1", "p-2"] {
        let id = EntityId::new("shop", "payment", key).unwrap();
        let applied = source.transition(&payment, &id, "paid", None, now).unwrap();
        assert!(matches!(applied, EntityDecision::Applied { .. }));
    }
    let p1 = EntityId::new("shop", "payment", "p-1").unwrap();
    let refunded = source
        .transition(&payment, &p1, "refunded", Some(1), now)
        .unwrap();
    assert!(matches!(refunded, EntityDecision::Applied { .. }));
    source
        .execute(&id("shop", "sale", "k-1"), fp("k-1"), now, |txn| {
            let claimed = source.claim_unique_in(txn, "shop", "receipt", "R-77", "k-1")?;
            assert_eq!(claimed, Uniqueness::Claimed);
            Ok::<_, idem_store::Error>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
        })
        .unwrap()
        .outcome()
        .unwrap();

    let mut exported = Vec::new();
    let sent = source.export(&mut exported).unwrap();
    assert_eq!((sent.records, sent.entities, sent.unique), (1, 2, 1));
    let text = String::from_utf8(exported.clone()).unwrap();
    assert!(
        text.contains(r#"{"entity":{"tenant":"shop","kind":"payment","id":"p-1","state":"refunded","version":2,"updated_at":1700000000000}}"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"{"unique":{"tenant":"shop","scope":"receipt","value":"R-77","holder":"k-1"}}"#
        ),
        "{text}"
    );

    let other = tempfile::tempdir().unwrap();
    let target = fast_store(&other);
    assert_eq!(target.import(exported.as_slice()).unwrap(), sent);
    assert_eq!(
        target.list_entities("payment", None, 10).unwrap(),
        source.list_entities("payment", None, 10).unwrap()
    );
    assert_eq!(
        target
            .transition(&payment, &p1, "refunded", None, now)
            .unwrap(),
        EntityDecision::AlreadyThere {
            entity: source.get_entity(&p1).unwrap().unwrap()
        }
    );
    assert_eq!(
        target
            .unique_holder("shop", "receipt", "R-77")
            .unwrap()
            .as_deref(),
        Some("k-1")
    );
    let check = target.check().unwrap();
    assert!(check.is_ok(), "{:?}", check.problems);
    // Again: the same lines are accepted as they are; a different one is named.
    assert_eq!(target.import(exported.as_slice()).unwrap(), sent);
    let changed = text.replace(r#""holder":"k-1""#, r#""holder":"k-9""#);
    let err = target.import(changed.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("another holder"), "{err}");
    let bad = text.replace(r#""version":2"#, r#""version":0"#);
    let err = target.import(bad.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("version: 0"), "{err}");
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
