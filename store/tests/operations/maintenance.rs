//! Sweep, stats, list, check and compact on a real file. (Export and import through the
//! seam, on every engine, are the conformance suite's.)

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::common::{Rng, T0, fp, id, seed};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Generation, Outcome, Record, RecordId, State, Status, Timestamp, Verdict};
use idem_store::maintain::record_json;
use idem_store::redb::{self, ReadableTable, TableDefinition};
use idem_store::{Error, ListFilter, Store};

fn at(ms: u64) -> Timestamp {
    Timestamp(T0 + ms)
}

fn settled(generation: u64, created: u64, expires: u64, body: &str) -> Record {
    Record {
        fingerprint: fp(body),
        generation: Generation(generation),
        created_at: at(created),
        updated_at: at(created),
        status: Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(200, body),
            completed_at: at(created),
            expires_at: at(expires),
        },
    }
}

/// JSON lines of `records`, for a fast bulk load through import.
fn lines(records: &[(RecordId, Record)]) -> String {
    records
        .iter()
        .map(|(id, record)| format!("{}\n", record_json(id, record)))
        .collect()
}

fn all_records(store: &Store, filter: &ListFilter) -> Vec<(RecordId, Record)> {
    let mut out = Vec::new();
    store
        .list(filter, |id, record| {
            out.push((id, record));
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

/// A store that deletes outright what sweep takes: no tombstones (`tombstones.rs` has
/// those).
fn without_tombstones(path: &std::path::Path) -> Store {
    Store::builder()
        .config(idem_core::Config {
            tombstone_retention_ms: 0,
            ..idem_core::Config::default()
        })
        .open(path)
        .unwrap()
}

#[test]
fn sweep_deletes_expired_settled_records_oldest_first_in_batches() {
    let seed = seed("sweep_oldest_first");
    let dir = tempfile::tempdir().unwrap();
    let store = without_tombstones(&dir.path().join("idem.redb"));
    let mut expiries: Vec<u64> = (0..700).collect();
    Rng::new(seed).shuffle(&mut expiries);
    let mut records: Vec<(RecordId, Record)> = expiries
        .iter()
        .enumerate()
        .map(|(n, &expires)| {
            let key = id("shop", "credit", &format!("sale-{n}"));
            (key, settled(n as u64 + 1, 0, expires, &format!("body {n}")))
        })
        .collect();
    store.import(lines(&records).as_bytes()).unwrap();
    // Pending and Unknown records, much older than anything settled: never swept.
    for n in 0..5 {
        let key = id("shop", "charge", &format!("held-{n}"));
        let Decision::Claimed { generation, .. } =
            store.begin(&key, fp("x"), Timestamp(1)).unwrap()
        else {
            panic!("not claimed")
        };
        if n % 2 == 0 {
            store.mark_unknown(&key, generation, Timestamp(2)).unwrap();
        }
    }
    let now = at(500);
    assert_eq!(store.stats(now).unwrap().expired, 501);

    let dry = store.sweep(now, 1_000, true).unwrap();
    assert_eq!((dry.removed, dry.remaining_expired), (501, false));
    let dry = store.sweep(now, 100, true).unwrap();
    assert_eq!((dry.removed, dry.remaining_expired), (100, true));
    assert_eq!(store.stats(now).unwrap().succeeded, 700);

    let first = store.sweep(now, 10, false).unwrap();
    assert_eq!((first.removed, first.remaining_expired), (10, true));
    records.sort_by_key(|(_, r)| r.expires_at());
    for (n, (key, _)) in records.iter().enumerate() {
        assert_eq!(store.get(key).unwrap().is_none(), n < 10, "seed {seed}");
    }

    let commits = store.commit_counts().commits;
    let rest = store.sweep(now, usize::MAX, false).unwrap();
    assert_eq!((rest.removed, rest.remaining_expired), (491, false));
    assert!(
        store.commit_counts().commits - commits >= 2,
        "491 records swept in bounded batches, more than one transaction"
    );
    let stats = store.stats(now).unwrap();
    assert_eq!(
        (stats.succeeded, stats.pending, stats.unknown, stats.expired),
        (199, 2, 3, 0)
    );
    for (n, (key, record)) in records.iter().enumerate() {
        assert_eq!(
            store.get(key).unwrap().as_ref(),
            (n > 500).then_some(record),
            "seed {seed}"
        );
    }

    let end = store.sweep(at(1_000_000_000), usize::MAX, false).unwrap();
    assert_eq!(end.removed, 199);
    let stats = store.stats(at(1_000_000_000)).unwrap();
    assert_eq!((stats.records(), stats.pending, stats.unknown), (5, 2, 3));
    assert_eq!(store.sweep(now, 0, false).unwrap().removed, 0);
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn stats_count_states_and_age_the_oldest_pending_and_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let store = Store::open(&path).unwrap();
    let empty = store.stats(at(0)).unwrap();
    assert_eq!(empty.records(), 0);
    assert_eq!(
        (empty.oldest_pending_age_ms, empty.oldest_unknown_age_ms),
        (None, None)
    );

    let claim = |key: &str, when: u64| match store.begin(&id("t", "o", key), fp(key), at(when)) {
        Ok(Decision::Claimed { generation, .. }) => generation,
        other => panic!("{other:?}"),
    };
    // In time order: the store never lets a write's time go back (the clock floor).
    let s1 = claim("s1", 0);
    store
        .complete(
            &id("t", "o", "s1"),
            s1,
            Verdict::Failed,
            Outcome::new(500, "x"),
            at(10),
        )
        .unwrap();
    let u1 = claim("u1", 500);
    store
        .mark_unknown(&id("t", "o", "u1"), u1, at(600))
        .unwrap();
    claim("p1", 1_000); // lease ends at 31_000
    claim("p2", 40_000); // lease ends at 70_000

    let stats = store.stats(at(50_000)).unwrap();
    assert_eq!(
        (stats.pending, stats.succeeded, stats.failed, stats.unknown),
        (2, 0, 1, 1)
    );
    assert_eq!(stats.count(State::Pending), 2);
    assert_eq!(stats.pending_lease_expired, 1);
    assert_eq!(stats.oldest_pending_age_ms, Some(49_000));
    // Unknown since its mark at 600, not since its claim at 500.
    assert_eq!(stats.oldest_unknown_age_ms, Some(49_400));
    assert_eq!(stats.expired, 0);
    assert_eq!(stats.generation, Generation(4));
    assert_eq!(stats.file_bytes, std::fs::metadata(&path).unwrap().len());
    assert!(stats.file_bytes > 0);
}

#[test]
fn list_filters_by_state_tenant_and_operation_with_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("idem.redb")).unwrap();
    let mut records = Vec::new();
    let mut generation = 0;
    for tenant in ["a", "b"] {
        for operation in ["x", "y"] {
            for n in 0..3u64 {
                generation += 1;
                let key = id(tenant, operation, &format!("k{n}"));
                // Created later for lower n, so state order differs from key order.
                let mut record = settled(generation, 100 - n - generation, 1_000, "ok");
                if n == 1 {
                    record.status = Status::Unknown;
                }
                records.push((key, record));
            }
        }
    }
    store.import(lines(&records).as_bytes()).unwrap();
    let keys = |filter: ListFilter| -> Vec<String> {
        all_records(&store, &filter)
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect()
    };

    assert_eq!(keys(ListFilter::default()).len(), 12);
    assert_eq!(
        keys(ListFilter {
            tenant: Some("a".into()),
            operation: Some("y".into()),
            ..ListFilter::default()
        }),
        ["a/y/k0", "a/y/k1", "a/y/k2"]
    );
    assert_eq!(
        keys(ListFilter {
            operation: Some("x".into()),
            limit: Some(4),
            ..ListFilter::default()
        }),
        ["a/x/k0", "a/x/k1", "a/x/k2", "b/x/k0"]
    );
    // By state: Pending and Unknown oldest created first; settled records soonest
    // expiring first, here all at 1,000, so in key order.
    assert_eq!(
        keys(ListFilter {
            state: Some(State::Unknown),
            ..ListFilter::default()
        }),
        ["b/y/k1", "b/x/k1", "a/y/k1", "a/x/k1"]
    );
    assert_eq!(
        keys(ListFilter {
            state: Some(State::Succeeded),
            tenant: Some("b".into()),
            limit: Some(2),
            ..ListFilter::default()
        }),
        ["b/x/k0", "b/x/k2"]
    );
    assert!(
        keys(ListFilter {
            state: Some(State::Pending),
            ..ListFilter::default()
        })
        .is_empty()
    );
    assert!(
        keys(ListFilter {
            tenant: Some("c".into()),
            ..ListFilter::default()
        })
        .is_empty()
    );

    let mut visited = 0;
    store
        .list(&ListFilter::default(), |_, _| {
            visited += 1;
            if visited == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(visited, 2);

    let err = store
        .list(
            &ListFilter {
                tenant: Some(String::new()),
                ..ListFilter::default()
            },
            |_, _| ControlFlow::Continue(()),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Id(_)));
    assert_eq!(err.to_string(), "tenant: empty, needs 1 to 255 bytes");
}

/// A store with every state, binary outcomes, and a counter above every record's
/// generation (released claims).
fn varied_store(store: &Store) {
    let claim = |key: &RecordId| match store.begin(key, fp(&key.to_string()), at(1)) {
        Ok(Decision::Claimed { generation, .. }) => generation,
        other => panic!("{other:?}"),
    };
    for n in 0..6 {
        let key = id("shop", "pay", &format!("k{n}"));
        let generation = claim(&key);
        let body: Vec<u8> = (0..=255u8).rev().chain([n]).collect();
        match n {
            0 => {}
            1 => {
                store.mark_unknown(&key, generation, at(2)).unwrap();
            }
            2 => {
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Failed,
                        Outcome::new(-1, body),
                        at(3),
                    )
                    .unwrap();
            }
            3 => {
                store.mark_unknown(&key, generation, at(2)).unwrap();
                store
                    .resolve(&key, Resolution::Succeeded(Outcome::new(0, body)), at(4))
                    .unwrap();
            }
            _ => {
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(201, body),
                        at(5),
                    )
                    .unwrap();
            }
        }
    }
    let released = id("shop", "pay", "released");
    let generation = claim(&released);
    store.release(&released, generation, at(6)).unwrap();
}

#[test]
fn check_finds_index_entries_that_disagree_with_records() {
    // Schema 3 keeps the Succeeded records' entries (kind byte 4, by expiry) and the
    // counters (kind byte 5) in one table.
    const INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.index");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    {
        let store = Store::open(&path).unwrap();
        varied_store(&store);
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.records, 6);
        assert!(!report.redb_repaired);
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut index = txn.open_table(INDEX).unwrap();
            let first = index
                .range(&[4u8][..]..&[5u8][..])
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .0
                .value()
                .to_vec();
            assert!(index.remove(first.as_slice()).unwrap().is_some());
            index
                .insert(&b"\x05generation"[..], &3u64.to_be_bytes()[..])
                .unwrap();
            index
                .insert(&b"\x05count.failed"[..], &99u64.to_be_bytes()[..])
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let report = store.check().unwrap();
    assert!(!report.is_ok());
    let problems: BTreeMap<&str, usize> = [
        "missing from the succeeded index",
        "succeeded index holds ",
        "is outside 1..=3 (the counter)",
        "index count of failed records is 99, but ",
    ]
    .into_iter()
    .map(|needle| {
        (
            needle,
            report
                .problems
                .iter()
                .filter(|p| p.contains(needle))
                .count(),
        )
    })
    .collect();
    assert_eq!(
        problems["missing from the succeeded index"], 1,
        "{report:?}"
    );
    assert_eq!(problems["succeeded index holds "], 1, "{report:?}");
    assert_eq!(problems["is outside 1..=3 (the counter)"], 3, "{report:?}");
    assert_eq!(
        problems["index count of failed records is 99, but "], 1,
        "{report:?}"
    );
}

#[test]
fn compact_shrinks_the_file_and_the_store_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let mut store = without_tombstones(&path);
    let records: Vec<(RecordId, Record)> = (0..3_000)
        .map(|n| {
            let key = id("shop", "credit", &format!("sale-{n}"));
            (key, settled(n + 1, 0, 10, &"x".repeat(200)))
        })
        .collect();
    store.import(lines(&records).as_bytes()).unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        store.sweep(at(10), usize::MAX, false).unwrap().removed,
        3_000
    );
    while store.compact().unwrap() {}
    let compacted = std::fs::metadata(&path).unwrap().len();
    assert!(compacted < full / 2, "{compacted} of {full}");
    let key = id("shop", "credit", "after");
    assert!(matches!(
        store.begin(&key, fp("a"), at(20)).unwrap(),
        Decision::Claimed {
            generation: Generation(3_001),
            ..
        }
    ));
    assert!(store.check().unwrap().is_ok());
}
