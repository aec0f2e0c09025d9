//! Time (docs/design.md §2 "Time", §12 "One clock"): a store never lets time go backwards
//! for its records. The rule every engine keeps is generic; how each keeps it is its own
//! test, named for its rule: the file's clock floor (the caller's clock, never below
//! the latest time a write used), the database's clock on PostgreSQL (the caller's clock
//! is not used at all).

use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, Status, Timestamp, Verdict};
use idem_store::Receiver;

use crate::engine::{File, T0};
use crate::{DAY, Engine, HOUR, assert_within, claim, fp, id};

/// Retention of a day.
fn config() -> Config {
    Config {
        success_retention_ms: DAY,
        failure_retention_ms: DAY,
        ..Config::default()
    }
}

/// A caller whose clock went back a day settles at the store's time, so its retention
/// is whole; a sweep at that clock keeps the outcome; a claim at it counts its lease
/// from the store's time. The store's clock floor never goes back.
pub(crate) async fn a_clock_behind_the_stores_time_shortens_no_lease_or_retention<E: Engine>() {
    let mut h = E::open(config()).await;
    assert_eq!(
        h.store().stats(h.now()).await.unwrap().clock_floor,
        Timestamp(0),
        "an empty store"
    );
    let key = id("k");
    let generation = claim(&h, &key).await;
    let claimed = h.store().get(&key).await.unwrap().unwrap();
    assert_eq!(
        h.store().stats(h.now()).await.unwrap().clock_floor,
        claimed.updated_at
    );
    // The caller's clock jumps back a day before the outcome is stored.
    let back = Timestamp(h.now().0 - DAY);
    let record = h
        .store()
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "r"),
            back,
        )
        .await
        .unwrap();
    let after = h.clock().await;
    assert_within(
        record.updated_at,
        claimed.updated_at,
        after,
        "a write behind the store's time",
    );
    assert_eq!(
        record.expires_at(),
        Some(record.updated_at.plus_millis(DAY))
    );
    assert_eq!(
        h.store().stats(back).await.unwrap().clock_floor,
        record.updated_at,
        "the floor never goes back"
    );
    // A sweep a day behind the time that really passed keeps the outcome.
    h.pass(23 * HOUR).await;
    let report = h
        .store()
        .sweep(Timestamp(h.now().0 - DAY), 100, false)
        .await
        .unwrap();
    assert_eq!((report.removed, report.tombstoned), (0, 0));
    assert!(matches!(
        h.store().begin(&key, fp("k"), h.now()).await.unwrap(),
        Decision::Replay { .. }
    ));
    // A claim at a clock behind dates nothing before what the store already wrote.
    let late = id("late");
    let decision = h
        .store()
        .begin(&late, fp("late"), Timestamp(h.now().0 - DAY))
        .await
        .unwrap();
    let Decision::Claimed { lease_until, .. } = decision else {
        panic!("{decision:?}")
    };
    let pending = h.store().get(&late).await.unwrap().unwrap();
    assert!(
        pending.created_at >= record.updated_at,
        "{} before {}",
        pending.created_at,
        record.updated_at
    );
    assert_eq!(
        lease_until,
        pending.created_at.plus_millis(Config::default().lease_ms)
    );
}

/// The file's rule: the caller's clock is believed when it is ahead (a forward jump
/// cannot be told from time that passed), and raised to the floor, the latest time a
/// write used, when it is behind; a sweep does not move the floor, and the floor
/// outlives a restart.
pub(crate) async fn clock_floor_a_clock_ahead_is_believed_one_behind_takes_the_floor() {
    let mut h = File::open(config()).await;
    let at = |ms: u64| Timestamp(T0 + ms);
    let key = id("k");
    let generation = claim(&h, &key).await;
    Receiver::complete(
        h.store(),
        &key,
        generation,
        Verdict::Succeeded,
        Outcome::new(200, "ok"),
        at(0),
    )
    .await
    .unwrap();
    assert_eq!(h.store().clock_floor().unwrap(), at(0));
    // A sweep at a clock far ahead deletes what expired by that clock, and leaves the
    // floor where the writes put it.
    let far = at(1_000 * HOUR);
    let report = Receiver::sweep(h.store(), far, 100, false).await.unwrap();
    assert_eq!(report.removed, 1);
    assert_eq!(h.store().clock_floor().unwrap(), at(0));
    // A write a little later keeps its own time.
    let next = id("next");
    Receiver::begin(h.store(), &next, fp("n"), at(5))
        .await
        .unwrap();
    assert_eq!(
        Receiver::get(h.store(), &next)
            .await
            .unwrap()
            .unwrap()
            .created_at,
        at(5)
    );
    // A write far ahead is believed, and raises the floor.
    let ahead = id("ahead");
    let decision = Receiver::begin(h.store(), &ahead, fp("a"), far)
        .await
        .unwrap();
    assert!(
        matches!(decision, Decision::Claimed { lease_until, .. }
            if lease_until == far.plus_millis(Config::default().lease_ms)),
        "{decision:?}"
    );
    assert_eq!(h.store().clock_floor().unwrap(), far);
    h.restart().await;
    assert_eq!(h.store().clock_floor().unwrap(), far);
    let behind = id("behind");
    Receiver::begin(h.store(), &behind, fp("b"), at(6))
        .await
        .unwrap();
    let record = Receiver::get(h.store(), &behind).await.unwrap().unwrap();
    assert_eq!(record.created_at, far, "the floor outlives the process");
}

/// The database's rule: leases, retention and the sweep count on the database's clock;
/// a replica whose clock is a year off, either way, writes the same times and sweeps
/// nothing early.
pub(crate) async fn database_clock_decides_whatever_the_callers_clock_says<E: Engine>() {
    let config = Config {
        lease_ms: 60_000,
        ..config()
    };
    let h = E::open(config).await;
    let year = 365 * DAY;
    let before = h.clock().await;
    let skewed = [Timestamp(before.0 - year), Timestamp(before.0 + year)];
    for (n, now) in skewed.into_iter().enumerate() {
        let k = id(&format!("skew-{n}"));
        let from = h.clock().await;
        let decision = h.store().begin(&k, fp("a"), now).await.unwrap();
        let to = h.clock().await;
        let Decision::Claimed {
            lease_until,
            generation,
        } = decision
        else {
            panic!("{decision:?}")
        };
        assert_within(
            lease_until,
            from.plus_millis(60_000),
            to.plus_millis(60_000),
            "lease_until: the database's time plus the lease",
        );
        let from = h.clock().await;
        let settled = h
            .store()
            .complete(
                &k,
                generation,
                Verdict::Succeeded,
                Outcome::new(200, ""),
                now,
            )
            .await
            .unwrap();
        let to = h.clock().await;
        let Status::Settled {
            completed_at,
            expires_at,
            ..
        } = settled.status
        else {
            panic!()
        };
        assert_within(completed_at, from, to, "completed_at");
        assert_eq!(expires_at, completed_at.plus_millis(DAY));
    }
    // A sweep whose caller thinks two years passed deletes nothing.
    let report = h
        .store()
        .sweep(Timestamp(before.0 + 2 * year), 100, false)
        .await
        .unwrap();
    assert_eq!((report.removed, report.tombstoned), (0, 0));
    assert_eq!(h.store().stats(h.now()).await.unwrap().succeeded, 2);
}
