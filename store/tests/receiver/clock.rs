//! The clock floor (docs/design.md §2, "Time"): a store never lets time go backwards for its
//! records. A write whose clock is behind the latest time a write used takes that time
//! instead, on every path (two-phase, atomic execute, group commit, sweep), and the
//! floor survives a restart.

use std::convert::Infallible;

use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::{Executed, Store};

const HOUR: u64 = 3_600_000;

fn config() -> Config {
    Config {
        success_retention_ms: 24 * HOUR,
        failure_retention_ms: 24 * HOUR,
        ..Config::default()
    }
}

fn open(path: &std::path::Path) -> Store {
    Store::builder().config(config()).open(path).unwrap()
}

fn ok() -> Result<(Verdict, Outcome, ()), Infallible> {
    Ok((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
}

#[test]
fn every_write_path_uses_the_floor_and_the_floor_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let later = Timestamp(T0 + HOUR);
    let back = Timestamp(T0);
    {
        let store = open(&path);
        let first = store
            .execute(&id("t", "o", "first"), fp("a"), later, |_| ok())
            .unwrap();
        assert!(matches!(first, Executed::Ran { .. }));
        assert_eq!(store.clock_floor().unwrap(), later);
        // Atomic execute, on its own and grouped, behind the floor.
        let Executed::Ran { record, .. } = store
            .execute(&id("t", "o", "alone"), fp("a"), back, |_| ok())
            .unwrap()
        else {
            panic!("a fresh key runs");
        };
        assert_eq!(record.created_at, later);
        let Executed::Ran { record, .. } = store
            .execute_grouped(&id("t", "o", "grouped"), fp("a"), back, |_| ok())
            .unwrap()
        else {
            panic!("a fresh key runs");
        };
        assert_eq!(record.expires_at(), Some(Timestamp(later.0 + 24 * HOUR)));
        // Two-phase: the lease counts from the floor too.
        let Decision::Claimed { lease_until, .. } =
            store.begin(&id("t", "o", "two"), fp("a"), back).unwrap()
        else {
            panic!("a fresh key is claimed");
        };
        assert_eq!(lease_until, Timestamp(later.0 + config().lease_ms));
        assert_eq!(store.stats(back).unwrap().clock_floor, later);
    }
    let store = open(&path);
    assert_eq!(store.clock_floor().unwrap(), later);
    let record = store
        .resolve(
            &id("t", "o", "missing"),
            idem_core::protocol::Resolution::NotExecuted,
            back,
        )
        .unwrap_err();
    assert!(record.to_string().contains("no record"), "{record}");
    let Executed::Ran { record, .. } = store
        .execute(&id("t", "o", "after"), fp("a"), back, |_| ok())
        .unwrap()
    else {
        panic!("a fresh key runs");
    };
    assert_eq!(record.created_at, later, "the floor outlives the process");
}

#[test]
fn reads_and_refusals_do_not_move_the_floor_and_neither_does_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("idem.redb"));
    let first = store
        .execute(&id("t", "o", "k"), fp("a"), Timestamp(T0), |_| ok())
        .unwrap();
    assert!(matches!(first, Executed::Ran { .. }));
    // A replay, a conflict and a stale input write nothing.
    let far = Timestamp(T0 + 1_000 * HOUR);
    store
        .begin(&id("t", "o", "k"), fp("a"), Timestamp(T0 + 1))
        .unwrap();
    store
        .begin(&id("t", "o", "k"), fp("b"), Timestamp(T0 + 2))
        .unwrap();
    assert!(
        store
            .complete(
                &id("t", "o", "k"),
                idem_core::Generation(1),
                Verdict::Failed,
                Outcome::default(),
                far
            )
            .is_err()
    );
    // A sweep at a clock far ahead deletes what expired by that clock (a forward jump
    // cannot be told from time that passed), but later writes keep their own time.
    assert_eq!(store.sweep(far, 100, false).unwrap().removed, 1);
    assert_eq!(store.clock_floor().unwrap(), Timestamp(T0));
    let Executed::Ran { record, .. } = store
        .execute(&id("t", "o", "next"), fp("a"), Timestamp(T0 + 5), |_| ok())
        .unwrap()
    else {
        panic!("a fresh key runs");
    };
    assert_eq!(record.created_at, Timestamp(T0 + 5));
}
