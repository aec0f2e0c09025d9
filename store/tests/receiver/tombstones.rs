//! Tombstones (docs/design.md §8): what outlives retention. A request whose outcome was swept is
//! answered Forgotten and does not execute again, until the tombstone's own time ends;
//! with tombstones off, it executes again.

use std::cell::Cell;
use std::convert::Infallible;
use std::ops::ControlFlow;

use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Outcome, Record, State, Status, Timestamp, Verdict};
use idem_store::{Executed, ListFilter, Store};

const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;

fn config(tombstone_retention_ms: u64) -> Config {
    Config {
        success_retention_ms: HOUR,
        failure_retention_ms: HOUR,
        tombstone_retention_ms,
        ..Config::default()
    }
}

fn open(path: &std::path::Path, tombstone_retention_ms: u64) -> Store {
    Store::builder()
        .config(config(tombstone_retention_ms))
        .open(path)
        .unwrap()
}

/// Runs the credit under `key` at `at` through `execute`, counting executions.
fn credit(store: &Store, key: &str, at: u64, runs: &Cell<u32>) -> Executed<()> {
    store
        .execute(&id("shop-7", "credit", key), fp(key), Timestamp(at), |_| {
            runs.set(runs.get() + 1);
            Ok::<_, Infallible>((Verdict::Succeeded, Outcome::new(201, "credited"), ()))
        })
        .unwrap()
}

#[test]
fn a_retry_after_retention_is_forgotten_with_tombstones_and_runs_again_without() {
    for tombstones in [DAY, 0] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("t.redb"), tombstones);
        let runs = Cell::new(0);
        assert!(matches!(
            credit(&store, "sale-1", T0, &runs),
            Executed::Ran { .. }
        ));
        let report = store.sweep(Timestamp(T0 + 2 * HOUR), 100, false).unwrap();
        let late = credit(&store, "sale-1", T0 + 3 * HOUR, &runs);
        if tombstones > 0 {
            assert_eq!((report.tombstoned, report.removed), (1, 0));
            assert_eq!(
                late,
                Executed::NotRun(Decision::Forgotten {
                    generation: Generation(1),
                    verdict: Verdict::Succeeded,
                    completed_at: Timestamp(T0),
                })
            );
            assert_eq!(runs.get(), 1, "a forgotten request does not run again");
        } else {
            assert_eq!((report.tombstoned, report.removed), (0, 1));
            assert!(matches!(late, Executed::Ran { .. }));
            assert_eq!(runs.get(), 2, "without tombstones a late retry runs again");
        }
    }
}

#[test]
fn the_answer_does_not_depend_on_whether_sweep_ran() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("t.redb"), DAY);
    let runs = Cell::new(0);
    assert!(matches!(
        credit(&store, "sale-1", T0, &runs),
        Executed::Ran { .. }
    ));
    // Replayed from the cache while live, then forgotten past retention without a sweep.
    assert!(matches!(
        credit(&store, "sale-1", T0 + HOUR - 1, &runs),
        Executed::NotRun(Decision::Replay { .. })
    ));
    assert!(matches!(
        credit(&store, "sale-1", T0 + HOUR, &runs),
        Executed::NotRun(Decision::Forgotten { .. })
    ));
    let sale = id("shop-7", "credit", "sale-1");
    assert!(matches!(
        store
            .begin(&sale, fp("other"), Timestamp(T0 + HOUR))
            .unwrap(),
        Decision::Conflict {
            state: State::Forgotten,
            ..
        }
    ));
    store.sweep(Timestamp(T0 + HOUR), 10, false).unwrap();
    assert!(matches!(
        store
            .begin(&sale, fp("sale-1"), Timestamp(T0 + HOUR))
            .unwrap(),
        Decision::Forgotten { .. }
    ));
    // The tombstone's day ends: the key is free again, with a newer generation.
    assert!(matches!(
        store
            .begin(&sale, fp("sale-1"), Timestamp(T0 + HOUR + DAY))
            .unwrap(),
        Decision::Claimed {
            generation: Generation(2),
            ..
        }
    ));
    assert_eq!(runs.get(), 1);
}

#[test]
fn a_tombstone_keeps_what_identifies_the_request_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    {
        let store = open(&path, DAY);
        assert!(matches!(
            credit(&store, "sale-1", T0, &Cell::new(0)),
            Executed::Ran { .. }
        ));
        store.sweep(Timestamp(T0 + HOUR), 10, false).unwrap();
    }
    let store = Store::builder().read_only(true).open(&path).unwrap();
    let expected = Record {
        fingerprint: fp("sale-1"),
        generation: Generation(1),
        created_at: Timestamp(T0),
        updated_at: Timestamp(T0 + HOUR),
        status: Status::Tombstone {
            verdict: Verdict::Succeeded,
            completed_at: Timestamp(T0),
            expires_at: Timestamp(T0 + HOUR + DAY),
        },
    };
    assert_eq!(
        store.get(&id("shop-7", "credit", "sale-1")).unwrap(),
        Some(expected.clone())
    );
    let mut listed = Vec::new();
    let filter = ListFilter {
        state: Some(State::Forgotten),
        ..ListFilter::default()
    };
    store
        .list(&filter, |_, record| {
            listed.push(record);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(listed, [expected]);
    let stats = store.stats(Timestamp(T0 + HOUR)).unwrap();
    assert_eq!((stats.forgotten, stats.succeeded, stats.expired), (1, 0, 0));
    assert_eq!(stats.count(State::Forgotten), 1);
}

#[test]
fn sweep_turns_records_into_tombstones_then_removes_them_in_bounded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("t.redb"), DAY);
    // More than one of the store's sweep transactions (256 records each).
    let n = 300;
    let runs = Cell::new(0);
    for i in 0..n {
        assert!(matches!(
            credit(&store, &format!("sale-{i}"), T0 + i as u64, &runs),
            Executed::Ran { .. }
        ));
    }
    let after_retention = Timestamp(T0 + 2 * HOUR);
    let dry = store.sweep(after_retention, usize::MAX, true).unwrap();
    assert_eq!((dry.tombstoned, dry.removed), (n as u64, 0));
    let first = store.sweep(after_retention, 100, false).unwrap();
    assert_eq!((first.tombstoned, first.remaining_expired), (100, true));
    let rest = store.sweep(after_retention, usize::MAX, false).unwrap();
    assert_eq!(
        (rest.tombstoned, rest.removed, rest.remaining_expired),
        ((n - 100) as u64, 0, false)
    );
    assert!(store.check().unwrap().is_ok());

    let after_tombstones = Timestamp(T0 + 2 * HOUR + DAY);
    let dry = store.sweep(after_tombstones, usize::MAX, true).unwrap();
    assert_eq!((dry.tombstoned, dry.removed), (0, n as u64));
    let commits = store.commit_counts().commits;
    let gone = store.sweep(after_tombstones, usize::MAX, false).unwrap();
    assert_eq!((gone.tombstoned, gone.removed), (0, n as u64));
    assert!(
        store.commit_counts().commits - commits >= 2,
        "{n} records swept in bounded batches, more than one transaction"
    );
    assert_eq!(store.stats(after_tombstones).unwrap().records(), 0);
    assert!(store.check().unwrap().is_ok());
    // Free again: a new request under an old key runs.
    assert!(matches!(
        credit(&store, "sale-0", after_tombstones.0, &runs),
        Executed::Ran { .. }
    ));
}

#[test]
fn a_late_sweep_past_both_times_deletes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("t.redb"), DAY);
    assert!(matches!(
        credit(&store, "sale-1", T0, &Cell::new(0)),
        Executed::Ran { .. }
    ));
    let report = store.sweep(Timestamp(T0 + 2 * DAY), 10, false).unwrap();
    assert_eq!((report.tombstoned, report.removed), (0, 1));
    assert_eq!(store.stats(Timestamp(T0 + 2 * DAY)).unwrap().records(), 0);
}

#[test]
fn tombstones_go_through_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("a.redb"), DAY);
    assert!(matches!(
        credit(&store, "sale-1", T0, &Cell::new(0)),
        Executed::Ran { .. }
    ));
    assert!(matches!(
        credit(&store, "sale-2", T0 + 2 * HOUR, &Cell::new(0)),
        Executed::Ran { .. }
    ));
    store.sweep(Timestamp(T0 + 2 * HOUR), 10, false).unwrap();
    let mut exported = Vec::new();
    store.export(&mut exported).unwrap();
    let text = String::from_utf8(exported.clone()).unwrap();
    assert!(
        text.contains(r#""state":"forgotten""#) && text.contains(r#""verdict":"succeeded""#),
        "{text}"
    );

    let copy = open(&dir.path().join("b.redb"), DAY);
    copy.import(exported.as_slice()).unwrap();
    for key in ["sale-1", "sale-2"] {
        let sale = id("shop-7", "credit", key);
        assert_eq!(copy.get(&sale).unwrap(), store.get(&sale).unwrap(), "{key}");
    }
    let runs = Cell::new(0);
    assert!(matches!(
        credit(&copy, "sale-1", T0 + 3 * HOUR, &runs),
        Executed::NotRun(Decision::Forgotten { .. })
    ));
    assert_eq!(runs.get(), 0);
    assert!(copy.check().unwrap().is_ok());
}
