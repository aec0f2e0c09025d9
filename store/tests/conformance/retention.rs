//! Retention and tombstones (docs/design.md §2, §8): a settled outcome is replayed until
//! its retention ends; then a retry is answered Forgotten, whether or not a sweep ran,
//! until the tombstone's own time ends; with tombstones off it claims the key again.

use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Outcome, State, Status, Verdict};
use idem_store::{ListFilter, Receiver};

use crate::{DAY, Engine, HOUR, MINUTE, assert_next_generation, claimed, fp, id, settle};

/// Retention of an hour, tombstones for a day (or `tombstones` ms).
fn config(tombstones: u64) -> Config {
    Config {
        success_retention_ms: HOUR,
        failure_retention_ms: HOUR,
        tombstone_retention_ms: tombstones,
        ..Config::default()
    }
}

/// The outcome is replayed within its retention; past it, a retry is answered Forgotten
/// (not executed again) before any sweep, a different request is a conflict, and the
/// sweep that makes the tombstone changes no answer.
pub(crate) async fn past_retention_a_retry_is_forgotten_without_a_sweep<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    let key = id("sale-1");
    let settled = settle(&h, &key, Verdict::Succeeded, Outcome::new(201, "credited")).await;
    let Status::Settled { completed_at, .. } = settled.status else {
        panic!()
    };
    h.pass(HOUR - MINUTE).await;
    assert!(matches!(
        h.store().begin(&key, fp("sale-1"), h.now()).await.unwrap(),
        Decision::Replay { .. }
    ));
    h.pass(MINUTE).await;
    let forgotten = Decision::Forgotten {
        generation: settled.generation,
        verdict: Verdict::Succeeded,
        completed_at,
    };
    assert_eq!(
        h.store().begin(&key, fp("sale-1"), h.now()).await.unwrap(),
        forgotten
    );
    assert!(matches!(
        h.store().begin(&key, fp("other"), h.now()).await.unwrap(),
        Decision::Conflict {
            state: State::Forgotten,
            ..
        }
    ));
    assert_eq!(
        h.store()
            .sweep(h.now(), 10, false)
            .await
            .unwrap()
            .tombstoned,
        1
    );
    assert_eq!(
        h.store().begin(&key, fp("sale-1"), h.now()).await.unwrap(),
        forgotten
    );
}

/// When the tombstone's time ends too, the key is free: a retry claims it under a newer
/// generation, with or without a sweep in between.
pub(crate) async fn past_the_tombstones_time_the_key_is_claimed_again<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    let swept = id("swept");
    let unswept = id("unswept");
    let first = settle(&h, &swept, Verdict::Succeeded, Outcome::new(201, "x"))
        .await
        .generation;
    assert_eq!(first, Generation(1));
    settle(&h, &unswept, Verdict::Failed, Outcome::new(500, "x")).await;
    h.pass(HOUR).await;
    assert_eq!(
        h.store().sweep(h.now(), 1, false).await.unwrap().tombstoned,
        1
    );
    h.pass(DAY).await;
    let again = claimed(h.store().begin(&swept, fp("b"), h.now()).await.unwrap());
    assert_next_generation::<E>(again, Generation(2));
    let last = claimed(h.store().begin(&unswept, fp("b"), h.now()).await.unwrap());
    assert_next_generation::<E>(last, again);
}

/// With tombstones off, sweep deletes a settled record past retention and a late retry
/// runs again; without a sweep, the retry claims the expired record's key all the same.
pub(crate) async fn without_tombstones_a_retry_after_retention_claims_again<E: Engine>() {
    let mut h = E::open(config(0)).await;
    let swept = id("swept");
    let unswept = id("unswept");
    let g1 = settle(&h, &swept, Verdict::Succeeded, Outcome::new(201, "x"))
        .await
        .generation;
    let g2 = settle(&h, &unswept, Verdict::Succeeded, Outcome::new(201, "x"))
        .await
        .generation;
    h.pass(2 * HOUR).await;
    let report = h.store().sweep(h.now(), 1, false).await.unwrap();
    assert_eq!((report.tombstoned, report.removed), (0, 1));
    let mut claims = Vec::new();
    for key in [&swept, &unswept] {
        claims.push(claimed(
            h.store().begin(key, fp(key.key()), h.now()).await.unwrap(),
        ));
    }
    assert!(claims.iter().all(|g| *g > g1.max(g2)), "{claims:?}");
}

/// A failed outcome and a succeeded one keep their own retentions.
pub(crate) async fn failed_outcomes_keep_their_own_retention<E: Engine>() {
    let config = Config {
        success_retention_ms: 2 * HOUR,
        failure_retention_ms: HOUR,
        tombstone_retention_ms: DAY,
        ..Config::default()
    };
    let mut h = E::open(config).await;
    let succeeded = id("succeeded");
    let failed = id("failed");
    let s = settle(&h, &succeeded, Verdict::Succeeded, Outcome::new(200, "ok")).await;
    let f = settle(&h, &failed, Verdict::Failed, Outcome::new(500, "no")).await;
    assert_eq!(s.expires_at(), Some(s.updated_at.plus_millis(2 * HOUR)));
    assert_eq!(f.expires_at(), Some(f.updated_at.plus_millis(HOUR)));
    h.pass(HOUR).await;
    assert!(matches!(
        h.store()
            .begin(&failed, fp("failed"), h.now())
            .await
            .unwrap(),
        Decision::Forgotten {
            verdict: Verdict::Failed,
            ..
        }
    ));
    assert!(matches!(
        h.store()
            .begin(&succeeded, fp("succeeded"), h.now())
            .await
            .unwrap(),
        Decision::Replay { .. }
    ));
    let report = h.store().sweep(h.now(), 10, false).await.unwrap();
    assert_eq!((report.tombstoned, report.removed), (1, 0));
    h.pass(HOUR).await;
    assert!(matches!(
        h.store()
            .begin(&succeeded, fp("succeeded"), h.now())
            .await
            .unwrap(),
        Decision::Forgotten {
            verdict: Verdict::Succeeded,
            ..
        }
    ));
}

/// A tombstone keeps the fingerprint, the generation, the verdict and when it settled;
/// its time counts from the end of retention, whenever the sweep ran. It is read, listed
/// and counted as Forgotten, and it outlives a restart.
pub(crate) async fn a_tombstone_keeps_what_identifies_the_request_and_survives_a_restart<
    E: Engine,
>() {
    let mut h = E::open(config(DAY)).await;
    let key = id("sale-1");
    let settled = settle(&h, &key, Verdict::Succeeded, Outcome::new(201, "credited")).await;
    let expected = settled.tombstone(DAY).expect("a tombstone");
    assert_eq!(expected.updated_at, settled.expires_at().unwrap());
    h.pass(HOUR + MINUTE).await;
    assert_eq!(
        h.store()
            .sweep(h.now(), 10, false)
            .await
            .unwrap()
            .tombstoned,
        1
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(expected.clone()));
    h.restart().await;
    assert_eq!(h.store().get(&key).await.unwrap(), Some(expected.clone()));
    let filter = ListFilter {
        state: Some(State::Forgotten),
        ..ListFilter::default()
    };
    assert_eq!(
        h.store().list(&filter).await.unwrap(),
        [(key.clone(), expected)]
    );
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!((stats.forgotten, stats.succeeded, stats.expired), (1, 0, 0));
    assert_eq!(stats.count(State::Forgotten), 1);
}
