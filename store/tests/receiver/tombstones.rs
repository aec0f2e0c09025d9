//! Tombstones (docs/design.md §8) on the file's atomic path: a request whose outcome was
//! swept is answered Forgotten and its work does not run again; with tombstones off, it
//! runs again. (Tombstones through the seam are the conformance suite's.)

use std::cell::Cell;
use std::convert::Infallible;

use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Outcome, Timestamp, Verdict};
use idem_store::{Executed, Store};

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
