//! Reconciliation (docs/design.md §11): claims whose executor went silent are found and,
//! under the default policy, turned Unknown (`recover_abandoned`); a checker is shown the
//! Unknown records, oldest first, and each answer settles its record only if it is still
//! the one it saw.

use std::convert::Infallible;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, LeaseExpiry, Outcome, Record, RecordId, State, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::maintain::{Abandoned, Check, ReconcileError, ReconcileReport};

use crate::{Engine, MINUTE, assert_within, claim, claimed, fp, id, settle, state_of, unknown};

/// Four Unknown records, `a` to `d`, claimed and made Unknown in key order a minute
/// apart: oldest first is key order by every measure.
async fn four_unknown<E: Engine>(h: &mut E) -> Vec<RecordId> {
    let keys: Vec<RecordId> = ["a", "b", "c", "d"].iter().map(|k| id(k)).collect();
    for key in &keys {
        unknown(h, key).await;
        h.pass(MINUTE).await;
    }
    keys
}

/// The sum of a report's outcomes: every record examined lands in one.
fn accounted(report: &ReconcileReport) -> u64 {
    report.succeeded
        + report.failed
        + report.not_executed
        + report.undecided
        + report.changed_meanwhile
}

/// Each answer of the checker settles its record: succeeded and failed replay their
/// outcome, not executed frees the key, cannot tell leaves it Unknown.
pub(crate) async fn a_checker_settles_what_it_can_tell_oldest_first<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let keys = four_unknown(&mut h).await;
    let mut seen = Vec::new();
    let report = h
        .store()
        .reconcile(h.now(), 10, |key: &RecordId, record: &Record| {
            assert_eq!(record.state(), State::Unknown);
            seen.push(key.key().to_string());
            Ok::<_, String>(match key.key() {
                "a" => Check::Succeeded(Outcome::new(201, "receipt a")),
                "b" => Check::Failed(Outcome::new(402, "declined")),
                "c" => Check::NotExecuted,
                _ => Check::CannotTell,
            })
        })
        .await
        .unwrap();
    assert_eq!(seen, ["a", "b", "c", "d"], "oldest first");
    assert_eq!(
        report,
        ReconcileReport {
            examined: 4,
            succeeded: 1,
            failed: 1,
            not_executed: 1,
            undecided: 1,
            changed_meanwhile: 0,
            remaining: false,
        }
    );
    // a and b replay their outcome; c runs again under a new generation; d waits.
    match h.store().begin(&keys[0], fp("a"), h.now()).await.unwrap() {
        Decision::Replay {
            verdict, outcome, ..
        } => assert_eq!(
            (verdict, outcome),
            (Verdict::Succeeded, Outcome::new(201, "receipt a"))
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        h.store().begin(&keys[1], fp("b"), h.now()).await.unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            ..
        }
    ));
    claimed(h.store().begin(&keys[2], fp("c"), h.now()).await.unwrap());
    assert_eq!(state_of(&h, &keys[3]).await, Some(State::Unknown));
    assert_eq!(h.store().stats(h.now()).await.unwrap().unknown, 1);
    assert_eq!(
        h.store().unknown_keys().await.unwrap(),
        1,
        "counted alone too"
    );
}

/// A limit shows the checker that many records, the oldest, and says more remain.
pub(crate) async fn a_limit_leaves_the_rest_and_says_so<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let keys = four_unknown(&mut h).await;
    let report = h
        .store()
        .reconcile(h.now(), 3, |key: &RecordId, _: &Record| {
            Ok::<_, Infallible>(match key.key() {
                "a" => Check::Succeeded(Outcome::new(200, "found")),
                "b" => Check::NotExecuted,
                _ => Check::CannotTell,
            })
        })
        .await
        .unwrap();
    assert_eq!(
        (
            report.examined,
            report.succeeded,
            report.not_executed,
            report.undecided,
            report.remaining
        ),
        (3, 1, 1, 1, true)
    );
    assert_eq!(state_of(&h, &keys[0]).await, Some(State::Succeeded));
    assert_eq!(state_of(&h, &keys[1]).await, None);
    assert_eq!(h.store().stats(h.now()).await.unwrap().unknown, 2);
    assert_eq!(
        h.store().unknown_keys().await.unwrap(),
        2,
        "counted alone too"
    );
    let report = h
        .store()
        .reconcile(h.now(), 3, |_: &RecordId, _: &Record| {
            Ok::<_, Infallible>(Check::NotExecuted)
        })
        .await
        .unwrap();
    assert_eq!(
        (report.examined, report.not_executed, report.remaining),
        (2, 2, false)
    );
    assert_eq!(h.store().stats(h.now()).await.unwrap().unknown, 0);
}

/// An answer is applied only to the record the checker saw: when someone resolved it
/// meanwhile and a new claim of the key went Unknown again, it is left alone.
pub(crate) async fn an_answer_is_not_applied_to_a_record_that_changed_meanwhile<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let keys = four_unknown(&mut h).await;
    let (store, now) = (h.store(), h.now());
    let report = store
        .reconcile(now, 1, |key: &RecordId, _: &Record| {
            // Someone resolves it while the checker asks the provider, and a retry claims
            // the key again and goes silent: a new Unknown generation.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    store
                        .resolve(key, Resolution::NotExecuted, now)
                        .await
                        .unwrap();
                    let generation = claimed(store.begin(key, fp(key.key()), now).await.unwrap());
                    store.mark_unknown(key, generation, now).await.unwrap();
                })
            });
            Ok::<_, String>(Check::Succeeded(Outcome::new(
                200,
                "for the old generation",
            )))
        })
        .await
        .unwrap();
    assert_eq!(
        (report.examined, report.changed_meanwhile, report.succeeded),
        (1, 1, 0)
    );
    assert_eq!(state_of(&h, &keys[0]).await, Some(State::Unknown));
}

/// A checker that fails stops the run: the record it failed on and those after it are
/// unchanged, those before it stay reconciled, and the error's report says what was
/// done before it (`ReconcileError::Checker`: "the ones before it were reconciled as
/// `report` says"), so its counts add up to `examined`.
pub(crate) async fn a_failing_checker_stops_the_run_and_reports_what_was_done_before_it<
    E: Engine,
>() {
    let mut h = E::open(Config::default()).await;
    let keys = four_unknown(&mut h).await;
    let err = h
        .store()
        .reconcile(h.now(), 10, |key: &RecordId, _: &Record| match key.key() {
            "a" => Ok(Check::NotExecuted),
            _ => Err("the provider is down"),
        })
        .await
        .unwrap_err();
    match err {
        ReconcileError::Checker { id, report, source } => {
            assert_eq!(id, keys[1]);
            assert_eq!(source, "the provider is down");
            assert_eq!(
                report,
                ReconcileReport {
                    examined: 1,
                    not_executed: 1,
                    ..ReconcileReport::default()
                },
                "the report counts the records before the one the checker failed on"
            );
            assert_eq!(accounted(&report), report.examined);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(state_of(&h, &keys[0]).await, None);
    for key in &keys[1..] {
        assert_eq!(state_of(&h, key).await, Some(State::Unknown), "{key}");
    }
}

/// "Oldest first" is the order of the claims (`created_at`, then the id): the order
/// `list` gives Unknown records, and the one the file's state index keeps. A record's
/// claim time never changes while it waits, so runs with a limit drain the queue in
/// turn; a record claimed long ago that went Unknown late is reached before records
/// claimed after it. `stats`, by contrast, ages the oldest Unknown from when it became
/// Unknown: how long a reconciler has been awaited.
pub(crate) async fn the_oldest_claim_is_reconciled_first<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    // Claimed in key order, then made Unknown in the reverse order, a minute apart.
    let mut claims = Vec::new();
    for key in ["first", "second", "third"] {
        claims.push((id(key), claim(&h, &id(key)).await));
        h.pass(MINUTE).await;
    }
    let mut waited_longest = None;
    for (key, generation) in claims.iter().rev() {
        let marked = h
            .store()
            .mark_unknown(key, *generation, h.now())
            .await
            .unwrap();
        waited_longest.get_or_insert(marked.updated_at);
        h.pass(MINUTE).await;
    }
    let waited_longest = waited_longest.unwrap();
    let before = h.clock().await;
    let stats = h.store().stats(h.now()).await.unwrap();
    let after = h.clock().await;
    assert_within(
        Timestamp(stats.oldest_unknown_age_ms.unwrap()),
        Timestamp(before.0 - waited_longest.0),
        Timestamp(after.0 - waited_longest.0),
        "stats age the oldest Unknown from when it became Unknown",
    );
    let mut seen = Vec::new();
    h.store()
        .reconcile(h.now(), 10, |key: &RecordId, _: &Record| {
            seen.push(key.key().to_owned());
            Ok::<_, Infallible>(Check::CannotTell)
        })
        .await
        .unwrap();
    assert_eq!(
        seen,
        ["first", "second", "third"],
        "oldest first: in the order of the claims, not the order the records became Unknown"
    );
    let report = h
        .store()
        .reconcile(h.now(), 1, |_: &RecordId, _: &Record| {
            Ok::<_, Infallible>(Check::NotExecuted)
        })
        .await
        .unwrap();
    assert_eq!((report.not_executed, report.remaining), (1, true));
    assert_eq!(state_of(&h, &id("first")).await, None);
}

/// The lease of the recovery tests' claims.
const LEASE: u64 = MINUTE;

/// Claims leased for [`LEASE`], and what becomes of one whose lease ran out.
fn leased(on_lease_expiry: LeaseExpiry) -> Config {
    Config {
        lease_ms: LEASE,
        on_lease_expiry,
        ..Config::default()
    }
}

/// Looks for silent claims at the harness's time, at most `limit`.
async fn recover<E: Engine>(h: &E, limit: usize) -> Abandoned {
    h.store().recover_abandoned(h.now(), limit).await.unwrap()
}

/// Under the default policy, a claim whose lease ran out turns Unknown (its executor may
/// have acted): Unknown since the recovery, not since the claim. A live claim and a
/// settled record are left alone, and a second run finds nothing.
pub(crate) async fn a_silent_claim_turns_unknown_and_a_live_one_stays<E: Engine>() {
    let mut h = E::open(leased(LeaseExpiry::Unknown)).await;
    let (silent, live, settled) = (id("silent"), id("live"), id("settled"));
    claim(&h, &silent).await;
    settle(&h, &settled, Verdict::Succeeded, Outcome::new(200, "ok")).await;
    h.pass(LEASE).await;
    claim(&h, &live).await;
    h.pass(1).await;
    let before = h.clock().await;
    let found = recover(&h, 100).await;
    let after = h.clock().await;
    assert_eq!(
        found,
        Abandoned {
            turned_unknown: vec![silent.clone()],
            left_for_takeover: vec![],
        }
    );
    assert_eq!(state_of(&h, &silent).await, Some(State::Unknown));
    assert_eq!(state_of(&h, &live).await, Some(State::Pending));
    assert_eq!(state_of(&h, &settled).await, Some(State::Succeeded));
    let marked = h.store().get(&silent).await.unwrap().unwrap().updated_at;
    assert_within(marked, before, after, "Unknown since the recovery");
    h.pass(10).await;
    let before = h.clock().await;
    let stats = h.store().stats(h.now()).await.unwrap();
    let after = h.clock().await;
    assert_within(
        Timestamp(stats.oldest_unknown_age_ms.unwrap()),
        Timestamp(before.0 - marked.0),
        Timestamp(after.0 - marked.0),
        "aged from the recovery, not from the claim",
    );
    assert_eq!(recover(&h, 100).await, Abandoned::default(), "nothing left");
}

/// Under the Takeover policy, a silent claim is only reported and left Pending, as it
/// was: the next begin on its key takes it over.
pub(crate) async fn under_takeover_a_silent_claim_is_left_for_the_next_begin<E: Engine>() {
    let mut h = E::open(leased(LeaseExpiry::Takeover)).await;
    let silent = id("silent");
    let generation = claim(&h, &silent).await;
    let claimed_record = h.store().get(&silent).await.unwrap();
    h.pass(LEASE).await;
    assert_eq!(
        recover(&h, 100).await,
        Abandoned {
            turned_unknown: vec![],
            left_for_takeover: vec![silent.clone()],
        }
    );
    assert_eq!(
        h.store().get(&silent).await.unwrap(),
        claimed_record,
        "as it was"
    );
    let taken = claimed(
        h.store()
            .begin(&silent, fp("silent"), h.now())
            .await
            .unwrap(),
    );
    assert!(taken > generation, "{taken} after {generation}");
}

/// A claim whose holder renewed its lease before the recovery is left alone, and its
/// holder settles it; a claim beside it whose lease ran out turns Unknown.
pub(crate) async fn a_claim_renewed_before_the_recovery_is_left_alone<E: Engine>() {
    let mut h = E::open(leased(LeaseExpiry::Unknown)).await;
    let (silent, renewed) = (id("silent"), id("renewed"));
    claim(&h, &silent).await;
    let generation = claim(&h, &renewed).await;
    h.pass(LEASE / 2).await;
    h.store()
        .heartbeat(&renewed, generation, h.now())
        .await
        .unwrap();
    h.pass(LEASE / 2).await;
    assert_eq!(
        recover(&h, 100).await.turned_unknown,
        std::slice::from_ref(&silent)
    );
    assert_eq!(state_of(&h, &renewed).await, Some(State::Pending));
    let settled = h
        .store()
        .complete(
            &renewed,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "ok"),
            h.now(),
        )
        .await
        .unwrap();
    assert_eq!(settled.state(), State::Succeeded);
}

/// A run turns at most `limit` silent claims Unknown, the longest silent first (here
/// also the oldest claims); the next run takes the rest.
pub(crate) async fn a_recovery_takes_at_most_its_limit_and_the_next_run_the_rest<E: Engine>() {
    let mut h = E::open(leased(LeaseExpiry::Unknown)).await;
    let keys: Vec<RecordId> = ["a", "b", "c"].iter().map(|k| id(k)).collect();
    for key in &keys {
        claim(&h, key).await;
        h.pass(1).await;
    }
    h.pass(LEASE).await;
    assert_eq!(recover(&h, 2).await.turned_unknown, keys[..2]);
    assert_eq!(state_of(&h, &keys[2]).await, Some(State::Pending));
    assert_eq!(recover(&h, 2).await.turned_unknown, keys[2..]);
    assert_eq!(recover(&h, 2).await, Abandoned::default());
    for key in &keys {
        assert_eq!(state_of(&h, key).await, Some(State::Unknown), "{key}");
    }
}

/// A run with a limit of 0 looks at no claim: it changes nothing, as a sweep or a
/// reconcile with a limit of 0 does.
pub(crate) async fn a_recovery_with_a_limit_of_zero_changes_nothing<E: Engine>() {
    let mut h = E::open(leased(LeaseExpiry::Unknown)).await;
    let silent = id("silent");
    claim(&h, &silent).await;
    h.pass(LEASE).await;
    assert_eq!(recover(&h, 0).await, Abandoned::default());
    assert_eq!(state_of(&h, &silent).await, Some(State::Pending));
}
