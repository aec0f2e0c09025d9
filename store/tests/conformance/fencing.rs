//! Fencing (docs/design.md §2): an input with a generation that is not the current
//! Pending one is refused as Stale, names both generations and changes nothing; a late
//! executor never overwrites a newer claim or a settled outcome.

use idem_core::protocol::Decision;
use idem_core::{Config, Generation, LeaseExpiry, Outcome, Record, Refusal, State, Verdict};
use idem_store::{Error, Receiver};

use crate::{DAY, Engine, HOUR, claim, claimed, fp, id, settle};

/// A store under Takeover where `k-1`'s first claim was taken over: (first, second).
async fn taken_over<E: Engine>() -> (E, Generation, Generation) {
    let config = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        ..Config::default()
    };
    let mut h = E::open(config).await;
    let key = id("k-1");
    let first = claim(&h, &key).await;
    h.pass(Config::default().lease_ms).await;
    let second = claimed(h.store().begin(&key, fp("k-1"), h.now()).await.unwrap());
    assert!(second > first, "{second} after {first}");
    (h, first, second)
}

/// Asserts `refused` is Stale for `given` over `current` in `state`.
#[track_caller]
fn assert_stale<T: std::fmt::Debug>(
    refused: Result<T, Error>,
    given: Generation,
    current: Generation,
    state: State,
) {
    let stale = Refusal::Stale {
        given,
        current,
        state,
    };
    assert!(
        matches!(&refused, Err(Error::Refused(r)) if *r == stale),
        "expected {stale:?}, got {refused:?}"
    );
}

/// The current record of `k-1`.
async fn current<E: Engine>(h: &E) -> Option<Record> {
    h.store().get(&id("k-1")).await.unwrap()
}

pub(crate) async fn a_stale_generation_cannot_heartbeat<E: Engine>() {
    let (h, first, second) = taken_over::<E>().await;
    let before = current(&h).await;
    let refused = h.store().heartbeat(&id("k-1"), first, h.now()).await;
    assert_stale(refused, first, second, State::Pending);
    assert_eq!(current(&h).await, before);
}

pub(crate) async fn a_stale_generation_cannot_complete<E: Engine>() {
    let (h, first, second) = taken_over::<E>().await;
    let before = current(&h).await;
    let refused = h
        .store()
        .complete(
            &id("k-1"),
            first,
            Verdict::Succeeded,
            Outcome::new(200, "late"),
            h.now(),
        )
        .await;
    assert_stale(refused, first, second, State::Pending);
    assert_eq!(current(&h).await, before);
    // The current holder settles, and its outcome is the one replayed.
    h.store()
        .complete(
            &id("k-1"),
            second,
            Verdict::Succeeded,
            Outcome::new(201, "current"),
            h.now(),
        )
        .await
        .unwrap();
    assert!(matches!(
        h.store().begin(&id("k-1"), fp("k-1"), h.now()).await.unwrap(),
        Decision::Replay { outcome, .. } if outcome == Outcome::new(201, "current")
    ));
}

pub(crate) async fn a_stale_generation_cannot_release<E: Engine>() {
    let (h, first, second) = taken_over::<E>().await;
    let before = current(&h).await;
    let refused = h.store().release(&id("k-1"), first, h.now()).await;
    assert_stale(refused, first, second, State::Pending);
    assert_eq!(current(&h).await, before, "the new claim is not deleted");
}

pub(crate) async fn a_stale_generation_cannot_mark_unknown<E: Engine>() {
    let (h, first, second) = taken_over::<E>().await;
    let before = current(&h).await;
    let refused = h.store().mark_unknown(&id("k-1"), first, h.now()).await;
    assert_stale(refused, first, second, State::Pending);
    assert_eq!(current(&h).await, before);
}

/// Once settled, the generation that settled can neither settle again, nor release,
/// renew or mark the key; the outcome replayed stays the first one.
pub(crate) async fn a_late_executor_cannot_change_a_settled_outcome<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    let settled = settle(&h, &key, Verdict::Succeeded, Outcome::new(201, "first")).await;
    let g = settled.generation;
    let store = h.store();
    let now = h.now();
    assert_stale(
        store
            .complete(&key, g, Verdict::Failed, Outcome::new(500, "late"), now)
            .await,
        g,
        g,
        State::Succeeded,
    );
    assert_stale(store.release(&key, g, now).await, g, g, State::Succeeded);
    assert_stale(store.heartbeat(&key, g, now).await, g, g, State::Succeeded);
    assert_stale(
        store.mark_unknown(&key, g, now).await,
        g,
        g,
        State::Succeeded,
    );
    assert_eq!(store.get(&key).await.unwrap(), Some(settled));
    assert!(matches!(
        store.begin(&key, fp("k-1"), now).await.unwrap(),
        Decision::Replay { verdict: Verdict::Succeeded, outcome, .. }
            if outcome == Outcome::new(201, "first")
    ));
}

/// A Stale refusal says which generation acted and which holds the key; it writes
/// nothing and spends no generation.
pub(crate) async fn a_stale_refusal_names_both_generations_and_writes_nothing<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    assert_eq!(generation, Generation(1));
    let before = h.store().get(&key).await.unwrap();
    let refused = h
        .store()
        .complete(
            &key,
            Generation(99),
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            h.now(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "generation 99 is stale: the record is pending with generation 1; only the current pending generation may act"
    );
    assert_eq!(h.store().get(&key).await.unwrap(), before);
    assert_eq!(
        h.store().stats(h.now()).await.unwrap().generation,
        Generation(1)
    );
}

/// A key swept away and claimed again gets a generation above every earlier one (the
/// counter never goes back, whatever sweep deleted), so the executor of the old claim
/// stays fenced.
pub(crate) async fn a_generation_from_before_a_sweep_stays_fenced<E: Engine>() {
    let config = Config {
        success_retention_ms: HOUR,
        tombstone_retention_ms: DAY,
        ..Config::default()
    };
    let mut h = E::open(config).await;
    let mut first = Vec::new();
    for n in 0..7 {
        let key = id(&format!("sweep-{n}"));
        let settled = settle(&h, &key, Verdict::Succeeded, Outcome::new(200, "ok")).await;
        first.push((key, settled.generation));
    }
    h.pass(HOUR).await;
    assert_eq!(
        h.store()
            .sweep(h.now(), 100, false)
            .await
            .unwrap()
            .tombstoned,
        7
    );
    h.pass(DAY).await;
    let report = h.store().sweep(h.now(), 100, false).await.unwrap();
    assert_eq!((report.removed, report.tombstoned), (7, 0));
    let highest = first.iter().map(|(_, g)| *g).max().unwrap();
    let (k0, g0) = &first[0];
    let generation = claimed(h.store().begin(k0, fp("a"), h.now()).await.unwrap());
    assert!(generation > highest, "{generation} after {highest}");
    assert_stale(
        h.store()
            .complete(
                k0,
                *g0,
                Verdict::Succeeded,
                Outcome::new(200, "late"),
                h.now(),
            )
            .await,
        *g0,
        generation,
        State::Pending,
    );
}
