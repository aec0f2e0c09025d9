//! Store files of every schema, committed as `testdata/store-v1.redb` (schema 1),
//! `testdata/store-v2.redb` (schema 2), `testdata/store-v3.redb` (schema 3, the
//! same contents as schema 2's) and `testdata/store-v4.redb` (schema 4, the same
//! again, closed, so its journal is empty), must open in every later version:
//! read-only (in their own layout, without a byte written) and writable (upgraded to
//! this build's schema in one transaction), with every record, intent and business row
//! they hold answered the same before and after, and `check` passing. The files are
//! never regenerated: a change that breaks these tests breaks the files of every
//! terminal in the field.
//!
//! `write_the_golden_store_file`, `write_the_golden_store_file_of_schema_2`,
//! `write_the_golden_store_file_of_schema_3` and `write_the_golden_store_file_of_schema_4`
//! made them, each with the build of its schema (ignored; they refuse to overwrite the
//! files).

use std::convert::Infallible;
use std::path::{Path, PathBuf};

use crate::common::{fp, id};
use idem_core::protocol::Decision;
use idem_core::{
    Fingerprint, Generation, IntentState, LedgerConfig, Outcome, Record, Reply, State, Status,
    Timestamp, Verdict,
};
use idem_store::maintain::Stats;
use idem_store::maintain::SweepReport;
use idem_store::redb::{ReadableTable, TableDefinition, TableHandle};
use idem_store::{ListFilter, Store};

const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");

/// 2023-11-14T22:13:20Z, and every time of the file counts from it.
const T0: u64 = 1_700_000_000_000;
const DAY: u64 = 24 * 3_600_000;

fn ledger() -> LedgerConfig {
    LedgerConfig::with_seed(1)
}

/// The intents' keys come from these bytes and their creation times.
const RANDOM: [[u8; 16]; 3] = [[1; 16], [2; 16], [3; 16]];

#[test]
#[ignore = "writes testdata/store-v1.redb, once for schema version 1; the file is never rewritten"]
fn write_the_golden_store_file() {
    let path = golden_path(1);
    assert!(
        !path.exists(),
        "{} exists: a golden file is never rewritten",
        path.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("store-v1.redb");
    {
        let mut store = Store::open(&scratch).unwrap();
        let settle = |key: &str, verdict, outcome: Outcome, at| {
            let ran = store
                .execute(&id("shop-7", "sale", key), fp(key), Timestamp(at), |txn| {
                    txn.open_table(SALES)?.insert(key, key.as_bytes())?;
                    Ok::<_, idem_store::redb::Error>((verdict, outcome, ()))
                })
                .unwrap();
            assert!(matches!(ran, idem_store::Executed::Ran { .. }));
        };
        settle(
            "sale-1",
            Verdict::Succeeded,
            Outcome::new(201, "receipt 1"),
            T0,
        );
        settle(
            "sale-2",
            Verdict::Failed,
            Outcome::new(402, "declined"),
            T0 + 1_000,
        );
        let pending = id("shop-7", "charge", "charge-3");
        store
            .begin(&pending, fp("charge-3"), Timestamp(T0 + 2_000))
            .unwrap();
        let unknown = id("shop-7", "charge", "charge-4");
        let Decision::Claimed { generation, .. } = store
            .begin(&unknown, fp("charge-4"), Timestamp(T0 + 3_000))
            .unwrap()
        else {
            panic!("charge-4 is new")
        };
        store
            .mark_unknown(&unknown, generation, Timestamp(T0 + 4_000))
            .unwrap();
        let completed = id("shop-7", "charge", "charge-5");
        let Decision::Claimed { generation, .. } = store
            .begin(&completed, fp("charge-5"), Timestamp(T0 + 5_000))
            .unwrap()
        else {
            panic!("charge-5 is new")
        };
        store
            .complete(
                &completed,
                generation,
                Verdict::Succeeded,
                Outcome::new(200, vec![0, 1, 2, 255]),
                Timestamp(T0 + 6_000),
            )
            .unwrap();

        let outbox = store.outbox(ledger()).unwrap();
        let mut keys = Vec::new();
        for (n, random) in RANDOM.iter().enumerate() {
            let payload = format!("forward sale-{n}").into_bytes();
            let at = Timestamp(T0 + 7_000 + n as u64);
            let intent = outbox
                .enqueue(
                    "sale.forward",
                    payload.clone(),
                    Fingerprint::of_bytes(&payload),
                    at,
                    *random,
                )
                .unwrap();
            keys.push(intent.key);
        }
        // The first two are sent; the first one is answered.
        let sent = outbox.due(Timestamp(T0 + 8_000), 2).unwrap();
        assert_eq!(sent.len(), 2);
        let reply = Reply {
            status: 201,
            body: b"forwarded".to_vec(),
            retry_at: None,
        };
        outbox
            .record_reply(&keys[0], reply, Timestamp(T0 + 9_000))
            .unwrap();
        assert!(store.check().unwrap().is_ok());
        // Smaller in the repository; a compacted file is a file of today's format too.
        store.compact().unwrap();
    }
    std::fs::copy(&scratch, &path).unwrap();
    eprintln!(
        "wrote {} ({} bytes)",
        path.display(),
        std::fs::metadata(&path).unwrap().len()
    );
}

fn settled(key: &str, generation: u64, at: u64, verdict: Verdict, outcome: Outcome) -> Record {
    Record {
        fingerprint: fp(key),
        generation: Generation(generation),
        created_at: Timestamp(at),
        updated_at: Timestamp(at),
        status: Status::Settled {
            verdict,
            outcome,
            completed_at: Timestamp(at),
            expires_at: Timestamp(at + DAY),
        },
    }
}

/// What the golden file holds, written out by hand, in key order (the id bytes are
/// length-prefixed: `sale` before `charge`).
fn expected_records() -> Vec<(&'static str, &'static str, Record)> {
    vec![
        (
            "sale",
            "sale-1",
            settled(
                "sale-1",
                1,
                T0,
                Verdict::Succeeded,
                Outcome::new(201, "receipt 1"),
            ),
        ),
        (
            "sale",
            "sale-2",
            settled(
                "sale-2",
                2,
                T0 + 1_000,
                Verdict::Failed,
                Outcome::new(402, "declined"),
            ),
        ),
        (
            "charge",
            "charge-3",
            Record {
                fingerprint: fp("charge-3"),
                generation: Generation(3),
                created_at: Timestamp(T0 + 2_000),
                updated_at: Timestamp(T0 + 2_000),
                status: Status::Pending {
                    lease_until: Timestamp(T0 + 32_000),
                },
            },
        ),
        (
            "charge",
            "charge-4",
            Record {
                fingerprint: fp("charge-4"),
                generation: Generation(4),
                created_at: Timestamp(T0 + 3_000),
                updated_at: Timestamp(T0 + 4_000),
                status: Status::Unknown,
            },
        ),
        (
            "charge",
            "charge-5",
            Record {
                fingerprint: fp("charge-5"),
                generation: Generation(5),
                created_at: Timestamp(T0 + 5_000),
                updated_at: Timestamp(T0 + 6_000),
                status: Status::Settled {
                    verdict: Verdict::Succeeded,
                    outcome: Outcome::new(200, vec![0, 1, 2, 255]),
                    completed_at: Timestamp(T0 + 6_000),
                    expires_at: Timestamp(T0 + 6_000 + DAY),
                },
            },
        ),
    ]
}

/// A copy of the golden file in a fresh directory: opening it may write (a writable
/// open records that it is open), and the committed file must stay as it is.
fn golden_copy(dir: &Path) -> PathBuf {
    let path = dir.join("store-v1.redb");
    std::fs::copy(golden_path(1), &path).unwrap();
    path
}

/// Every answer a store gives about its records at `now`, to compare a file before
/// and after its upgrade.
#[derive(Debug, PartialEq)]
struct Answers {
    all: Vec<(idem_core::RecordId, Record)>,
    by_state: Vec<Vec<idem_core::RecordId>>,
    got: Vec<Option<Record>>,
    stats: Stats,
    dry_sweep: SweepReport,
    generation: Generation,
    clock_floor: Timestamp,
}

fn answers(store: &Store, now: Timestamp) -> Answers {
    let list = |state| {
        let mut found = Vec::new();
        let filter = ListFilter {
            state,
            ..ListFilter::default()
        };
        store
            .list(&filter, |id, record| {
                found.push((id, record));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        found
    };
    let all = list(None);
    let by_state = State::ALL
        .into_iter()
        .map(|state| list(Some(state)).into_iter().map(|(id, _)| id).collect())
        .collect();
    let got = all.iter().map(|(id, _)| store.get(id).unwrap()).collect();
    let mut stats = store.stats(now).unwrap();
    // The one figure that is not an answer about the records.
    stats.file_bytes = 0;
    Answers {
        all,
        by_state,
        got,
        stats,
        dry_sweep: store.sweep(now, 100, true).unwrap(),
        generation: store.generation().unwrap(),
        clock_floor: store.clock_floor().unwrap(),
    }
}

/// The names of the file's tables.
fn table_names(store: &Store) -> Vec<String> {
    store
        .read(|txn| {
            txn.list_tables()
                .unwrap()
                .map(|t| t.name().to_string())
                .collect()
        })
        .unwrap()
}

/// Opens a copy of the old file `golden` read-only, then writable (which upgrades it),
/// and shows the answers at `now` are the same: returns them with the upgraded store.
fn upgrades_with_the_same_answers(golden: &Path, dir: &Path, now: Timestamp) -> (Answers, Store) {
    let bytes = std::fs::read(golden).expect("the golden file is committed");
    let path = dir.join("old.redb");
    std::fs::write(&path, &bytes).unwrap();
    let store = Store::builder().read_only(true).open(&path).unwrap();
    let before = answers(&store, now);
    assert!(table_names(&store).contains(&"idem.expiry".to_string()));
    drop(store);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a read-only open wrote"
    );

    let store = Store::open(&path).unwrap();
    let names = table_names(&store);
    assert!(names.contains(&"idem.index".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n == "idem.expiry" || n.starts_with("idem.state.")),
        "the old indexes are deleted: {names:?}"
    );
    let report = store.check().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let after = answers(&store, now);
    assert_eq!(after, before);
    // A read-only open of the upgraded file reads the new layout the same.
    drop(store);
    let read_only = Store::builder().read_only(true).open(&path).unwrap();
    assert_eq!(answers(&read_only, now), before);
    drop(read_only);
    (before, Store::open(&path).unwrap())
}

fn reads_the_golden_contents(store: &Store) {
    let mut found = Vec::new();
    store
        .list(&ListFilter::default(), |id, record| {
            found.push((id.operation().to_string(), id.key().to_string(), record));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let expected: Vec<(String, String, Record)> = expected_records()
        .into_iter()
        .map(|(operation, key, record)| (operation.to_string(), key.to_string(), record))
        .collect();
    assert_eq!(found, expected);
    // Schema 1 had every state but Forgotten (tombstones came with schema 2).
    for state in State::ALL.into_iter().filter(|s| *s != State::Forgotten) {
        let n = found.iter().filter(|(_, _, r)| r.state() == state).count();
        assert!(n >= 1, "the golden file has no {state} record");
    }
    assert_eq!(store.generation().unwrap(), Generation(5));
    assert_eq!(store.clock_floor().unwrap(), Timestamp(T0 + 6_000));

    let outbox = store.outbox(ledger()).unwrap();
    let intents = outbox.intents(&Default::default()).unwrap();
    let states: Vec<(IntentState, u32, &[u8])> = intents
        .iter()
        .map(|i| (i.state, i.attempts, i.payload.as_slice()))
        .collect();
    assert_eq!(
        states,
        [
            (IntentState::Completed, 1, &b"forward sale-0"[..]),
            (IntentState::InFlight, 1, &b"forward sale-1"[..]),
            (IntentState::Queued, 0, &b"forward sale-2"[..]),
        ]
    );
    assert_eq!(
        intents[0].outcome,
        Some(Outcome::new(201, "forwarded")),
        "the completed intent keeps its reply"
    );
    for intent in &intents {
        assert_eq!(
            intent.deadline,
            Timestamp(intent.created_at.0 + 23 * 3_600_000)
        );
    }

    let sales: Vec<(String, Vec<u8>)> = store
        .read(|txn| {
            txn.open_table(SALES)
                .unwrap()
                .iter()
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value().to_string(), v.value().to_vec())
                })
                .collect()
        })
        .unwrap();
    assert_eq!(
        sales,
        [
            ("sale-1".to_string(), b"sale-1".to_vec()),
            ("sale-2".to_string(), b"sale-2".to_vec())
        ]
    );
}

#[test]
fn the_golden_store_file_of_schema_1_opens_and_reads() {
    let golden = std::fs::read(golden_path(1)).expect("testdata/store-v1.redb is committed");
    let dir = tempfile::tempdir().unwrap();
    let path = golden_copy(dir.path());

    // Read-only first: the file was closed cleanly, so it needs no recovery.
    let store = Store::builder().read_only(true).open(&path).unwrap();
    reads_the_golden_contents(&store);
    drop(store);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        golden,
        "a read-only open wrote"
    );

    let store = Store::open(&path).unwrap();
    let report = store.check().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(!report.redb_repaired);
    assert_eq!((report.records, report.intents), (5, 3));
    reads_the_golden_contents(&store);

    drop(store);
    let again = tempfile::tempdir().unwrap();
    let (answers, store) =
        upgrades_with_the_same_answers(&golden_path(1), again.path(), Timestamp(T0 + 2 * DAY));
    assert_eq!(answers.all.len(), 5);
    assert_eq!(answers.dry_sweep.tombstoned, 3);

    // It goes on: replays, generations after the file's, the outbox, a sweep.
    let sale = id("shop-7", "sale", "sale-1");
    let later = Timestamp(T0 + 60_000);
    match store.begin(&sale, fp("sale-1"), later).unwrap() {
        Decision::Replay { outcome, .. } => assert_eq!(outcome, Outcome::new(201, "receipt 1")),
        other => panic!("sale-1: {other:?}"),
    }
    let fresh = id("shop-7", "sale", "sale-6");
    let Decision::Claimed { generation, .. } = store.begin(&fresh, fp("sale-6"), later).unwrap()
    else {
        panic!("sale-6 is new")
    };
    assert_eq!(generation, Generation(6));
    let outbox = store.outbox(ledger()).unwrap();
    assert_eq!(
        outbox.restart().unwrap(),
        1,
        "the in-flight intent is queued again"
    );
    // The upgraded file keeps tombstones: the three settled records leave theirs, a
    // late retry is answered Forgotten, and 30 days on the tombstones go too.
    let report = store.sweep(Timestamp(T0 + 2 * DAY), 100, false).unwrap();
    assert_eq!((report.removed, report.tombstoned), (0, 3));
    assert!(matches!(
        store
            .begin(&sale, fp("sale-1"), Timestamp(T0 + 2 * DAY))
            .unwrap(),
        Decision::Forgotten {
            generation: Generation(1),
            verdict: Verdict::Succeeded,
            ..
        }
    ));
    let stats = store.stats(Timestamp(T0 + 2 * DAY)).unwrap();
    assert_eq!((stats.forgotten, stats.succeeded, stats.failed), (3, 0, 0));
    assert!(store.check().unwrap().is_ok());
    let report = store.sweep(Timestamp(T0 + 32 * DAY), 100, false).unwrap();
    assert_eq!((report.removed, report.tombstoned), (3, 0));
    let _ = store
        .execute(
            &id("shop-7", "sale", "sale-7"),
            fp("sale-7"),
            Timestamp(T0 + 32 * DAY),
            |_| Ok::<_, Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ())),
        )
        .unwrap();
    assert!(store.check().unwrap().is_ok());
}

/// The committed golden file of `schema`: `testdata/store-v<schema>.redb`.
fn golden_path(schema: u64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../testdata/store-v{schema}.redb"))
}

/// Writes the golden file of `schema` ([`fill_every_state`], compacted) with this
/// build, which must be of that schema; refuses to overwrite one.
fn write_golden(schema: u64) {
    let path = golden_path(schema);
    assert!(
        !path.exists(),
        "{} exists: a golden file is never rewritten",
        path.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("store.redb");
    {
        let mut store = Store::open(&scratch).unwrap();
        assert_eq!(
            schema_of(&store),
            schema,
            "this build writes another schema"
        );
        fill_every_state(&store);
        store.compact().unwrap();
    }
    std::fs::copy(&scratch, &path).unwrap();
    eprintln!(
        "wrote {} ({} bytes)",
        path.display(),
        std::fs::metadata(&path).unwrap().len()
    );
}

/// Schema 2's file, `testdata/store-v2.redb`: a record in every state, a tombstone
/// among them (schema 2's addition), in the layout of one index table per state, a
/// separate expiry index and the counters in `idem.meta`.
#[test]
#[ignore = "writes testdata/store-v2.redb, once for schema version 2; the file is never rewritten"]
fn write_the_golden_store_file_of_schema_2() {
    write_golden(2);
}

/// What the golden files of schema 2 and later hold: a record in every state, a
/// tombstone among them.
fn fill_every_state(store: &Store) {
    let settle = |key: &str, verdict, outcome: Outcome, at| {
        let ran = store
            .execute(&id("shop-7", "sale", key), fp(key), Timestamp(at), |txn| {
                txn.open_table(SALES)?.insert(key, key.as_bytes())?;
                Ok::<_, idem_store::redb::Error>((verdict, outcome, ()))
            })
            .unwrap();
        assert!(matches!(ran, idem_store::Executed::Ran { .. }));
    };
    // Settled two days before T0, a tombstone by T0's sweep.
    settle(
        "sale-0",
        Verdict::Succeeded,
        Outcome::new(201, "receipt 0"),
        T0 - 2 * DAY,
    );
    settle(
        "sale-1",
        Verdict::Succeeded,
        Outcome::new(201, "receipt 1"),
        T0,
    );
    settle(
        "sale-2",
        Verdict::Failed,
        Outcome::new(402, "declined"),
        T0 + 1_000,
    );
    let report = store.sweep(Timestamp(T0 + 1_000), 100, false).unwrap();
    assert_eq!((report.removed, report.tombstoned), (0, 1));
    let pending = id("shop-7", "charge", "charge-3");
    store
        .begin(&pending, fp("charge-3"), Timestamp(T0 + 2_000))
        .unwrap();
    let unknown = id("shop-7", "charge", "charge-4");
    let Decision::Claimed { generation, .. } = store
        .begin(&unknown, fp("charge-4"), Timestamp(T0 + 3_000))
        .unwrap()
    else {
        panic!("charge-4 is new")
    };
    store
        .mark_unknown(&unknown, generation, Timestamp(T0 + 4_000))
        .unwrap();
    let completed = id("shop-7", "charge", "charge-5");
    let Decision::Claimed { generation, .. } = store
        .begin(&completed, fp("charge-5"), Timestamp(T0 + 5_000))
        .unwrap()
    else {
        panic!("charge-5 is new")
    };
    store
        .complete(
            &completed,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, vec![0, 1, 2, 255]),
            Timestamp(T0 + 6_000),
        )
        .unwrap();
    let stats = store.stats(Timestamp(T0 + 6_000)).unwrap();
    assert_eq!(
        [
            stats.pending,
            stats.succeeded,
            stats.failed,
            stats.unknown,
            stats.forgotten
        ],
        [1, 2, 1, 1, 1]
    );
    assert!(store.check().unwrap().is_ok());
}

/// Schema 3's file, `testdata/store-v3.redb`: what schema 2's holds, in the layout of
/// one index table, `idem.index`.
#[test]
#[ignore = "writes testdata/store-v3.redb, once for schema version 3; the file is never rewritten"]
fn write_the_golden_store_file_of_schema_3() {
    write_golden(3);
}

/// Schema 4's file, `testdata/store-v4.redb`: what schema 3's holds (schema 4 has the
/// same tables, and may have a journal beside the file; a closed store's holds nothing,
/// so none is committed).
#[test]
#[ignore = "writes testdata/store-v4.redb, once for schema version 4; the file is never rewritten"]
fn write_the_golden_store_file_of_schema_4() {
    write_golden(4);
}

/// The schema version in the store's meta table.
fn schema_of(store: &Store) -> u64 {
    const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");
    store
        .read(|txn| {
            let meta = txn.open_table(META).unwrap();
            let bytes = meta.get(&b"schema"[..]).unwrap().unwrap();
            u64::from_be_bytes(bytes.value().try_into().unwrap())
        })
        .unwrap()
}

#[test]
fn the_golden_store_file_of_schema_2_opens_reads_and_upgrades() {
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp(T0 + 6_000);
    let (answers, store) = upgrades_with_the_same_answers(&golden_path(2), dir.path(), now);
    // What the generator wrote, by hand.
    let keys: Vec<(&str, State)> = answers
        .all
        .iter()
        .map(|(id, record)| (id.key(), record.state()))
        .collect();
    assert_eq!(
        keys,
        [
            ("sale-0", State::Forgotten),
            ("sale-1", State::Succeeded),
            ("sale-2", State::Failed),
            ("charge-3", State::Pending),
            ("charge-4", State::Unknown),
            ("charge-5", State::Succeeded),
        ]
    );
    assert_eq!(
        answers.by_state.iter().map(Vec::len).collect::<Vec<_>>(),
        [1, 2, 1, 1, 1]
    );
    let stats = &answers.stats;
    assert_eq!(
        [
            stats.pending,
            stats.succeeded,
            stats.failed,
            stats.unknown,
            stats.forgotten
        ],
        [1, 2, 1, 1, 1]
    );
    assert_eq!(stats.oldest_pending_age_ms, Some(4_000));
    assert_eq!(stats.oldest_unknown_age_ms, Some(2_000));
    assert_eq!(answers.generation, Generation(6));
    assert_eq!(answers.clock_floor, Timestamp(T0 + 6_000));
    match &answers.all[0].1.status {
        Status::Tombstone { verdict, .. } => assert_eq!(*verdict, Verdict::Succeeded),
        other => panic!("sale-0: {other:?}"),
    }

    // The upgraded store goes on: a replay, a tombstone's answer, a fresh key, sweeps.
    let later = Timestamp(T0 + 60_000);
    match store
        .begin(&id("shop-7", "sale", "sale-1"), fp("sale-1"), later)
        .unwrap()
    {
        Decision::Replay { outcome, .. } => assert_eq!(outcome, Outcome::new(201, "receipt 1")),
        other => panic!("sale-1: {other:?}"),
    }
    assert!(matches!(
        store
            .begin(&id("shop-7", "sale", "sale-0"), fp("sale-0"), later)
            .unwrap(),
        Decision::Forgotten { .. }
    ));
    let fresh = id("shop-7", "sale", "sale-6");
    let Decision::Claimed { generation, .. } = store.begin(&fresh, fp("sale-6"), later).unwrap()
    else {
        panic!("sale-6 is new")
    };
    assert_eq!(generation, Generation(7));
    let stats = store.stats(later).unwrap();
    assert_eq!((stats.pending, stats.records()), (2, 7));
    let report = store.sweep(Timestamp(T0 + 2 * DAY), 100, false).unwrap();
    assert_eq!((report.removed, report.tombstoned), (0, 3));
    let stats = store.stats(Timestamp(T0 + 2 * DAY)).unwrap();
    assert_eq!((stats.forgotten, stats.succeeded, stats.failed), (4, 0, 0));
    assert!(store.check().unwrap().is_ok());
    let report = store.sweep(Timestamp(T0 + 40 * DAY), 100, false).unwrap();
    assert_eq!((report.removed, report.tombstoned), (4, 0));
    let stats = store.stats(Timestamp(T0 + 40 * DAY)).unwrap();
    assert_eq!((stats.records(), stats.pending, stats.unknown), (3, 2, 1));
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn the_golden_store_file_of_schema_3_answers_as_schema_2s_did() {
    let now = Timestamp(T0 + 6_000);
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("v2.redb");
    std::fs::copy(golden_path(2), &v2).unwrap();
    let schema_2 = answers(&Store::builder().read_only(true).open(&v2).unwrap(), now);

    let golden = std::fs::read(golden_path(3)).expect("testdata/store-v3.redb is committed");
    let v3 = dir.path().join("v3.redb");
    std::fs::write(&v3, &golden).unwrap();
    let store = Store::builder().read_only(true).open(&v3).unwrap();
    assert_eq!(answers(&store, now), schema_2);
    drop(store);
    assert_eq!(
        std::fs::read(&v3).unwrap(),
        golden,
        "a read-only open wrote"
    );

    let store = Store::open(&v3).unwrap();
    let names = table_names(&store);
    assert!(names.contains(&"idem.index".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "idem.expiry"), "{names:?}");
    // Schema 4 has schema 3's tables: the upgrade records the version alone.
    assert_eq!(schema_of(&store), 4);
    let report = store.check().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(answers(&store, now), schema_2);
}

#[test]
fn the_golden_store_file_of_schema_4_answers_as_schema_2s_did() {
    let now = Timestamp(T0 + 6_000);
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("v2.redb");
    std::fs::copy(golden_path(2), &v2).unwrap();
    let schema_2 = answers(&Store::builder().read_only(true).open(&v2).unwrap(), now);

    let golden = std::fs::read(golden_path(4)).expect("testdata/store-v4.redb is committed");
    let v4 = dir.path().join("v4.redb");
    std::fs::write(&v4, &golden).unwrap();
    let store = Store::builder().read_only(true).open(&v4).unwrap();
    assert_eq!(schema_of(&store), 4);
    assert_eq!(answers(&store, now), schema_2);
    drop(store);
    assert_eq!(
        std::fs::read(&v4).unwrap(),
        golden,
        "a read-only open wrote"
    );
    // Writable, in both modes: the exclusive one commits through the journal.
    for exclusive in [false, true] {
        let builder = if exclusive {
            Store::builder().concurrency(idem_store::redb::ConcurrencyMode::ExclusiveWriter)
        } else {
            Store::builder()
        };
        let store = builder.open(&v4).unwrap();
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{:?}", report.problems);
        assert_eq!(answers(&store, now), schema_2);
    }
}

/// A schema 2 file with one record whose bytes were damaged still upgrades: the other
/// records are indexed and counted, the damaged one is kept as it is and `check` names
/// it (as it did before the upgrade), instead of the file no longer opening writable.
#[test]
fn a_damaged_record_does_not_stop_the_upgrade_and_check_names_it() {
    const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.records");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.redb");
    std::fs::copy(golden_path(2), &path).unwrap();
    {
        let db = idem_store::redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut records = txn.open_table(RECORDS).unwrap();
            let key = records
                .iter()
                .unwrap()
                .map(|entry| entry.unwrap().0.value().to_vec())
                .find(|key| key.windows(6).any(|w| w == b"sale-1"))
                .expect("the golden file holds sale-1");
            records.insert(key.as_slice(), &[0xff, 0x00][..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let report = store.check().unwrap();
    assert_eq!(report.records, 6);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("sale-1"),
        "{:?}",
        report.problems
    );
    // sale-1 was one of the two Succeeded records; charge-5 is the other.
    assert_eq!(store.stats(Timestamp(T0 + 6_000)).unwrap().succeeded, 1);
}
