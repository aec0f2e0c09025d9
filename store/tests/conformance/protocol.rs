//! The protocol's inputs and answers (docs/design.md §2): claim, replay, conflict, in
//! progress, heartbeat, release, mark unknown, resolve, lease expiry, give up, and a
//! begin whose caller left.

use std::time::Duration;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, LeaseExpiry, Outcome, Refusal, State, Status, Terms, Verdict};
use idem_store::{Error, GiveUp, ListFilter, Receiver};

use crate::{DAY, Engine, assert_within, claim, claimed, fp, id, settle, state_of, unknown};

/// A body with every byte value, and a NUL and 0xff among text.
pub(crate) fn every_byte() -> Vec<u8> {
    (0..=255u8).chain(*b"receipt \x00\xff").collect()
}

/// A fresh key is claimed with a lease; a second begin while the lease runs is told who
/// holds it and until when, and writes nothing.
pub(crate) async fn a_fresh_key_is_claimed_and_a_second_begin_is_in_progress<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let lease = Config::default().lease_ms;
    let key = id("k-1");
    let before = h.clock().await;
    let decision = h.store().begin(&key, fp("a"), h.now()).await.unwrap();
    let after = h.clock().await;
    let Decision::Claimed {
        generation,
        lease_until,
    } = decision
    else {
        panic!("a fresh key is claimed: {decision:?}")
    };
    assert_eq!(
        generation,
        Generation(1),
        "a fresh store's first generation"
    );
    let pending = h.store().get(&key).await.unwrap().unwrap();
    assert_eq!(pending.status, Status::Pending { lease_until });
    assert_eq!(
        (pending.generation, pending.fingerprint),
        (generation, fp("a"))
    );
    assert_eq!(pending.created_at, pending.updated_at);
    assert_within(pending.created_at, before, after, "created_at");
    assert_eq!(lease_until, pending.created_at.plus_millis(lease));

    h.pass(lease / 2).await;
    assert_eq!(
        h.store().begin(&key, fp("a"), h.now()).await.unwrap(),
        Decision::InProgress {
            generation,
            lease_until
        }
    );
    assert_eq!(
        h.store().get(&key).await.unwrap(),
        Some(pending),
        "no write"
    );
}

/// A settled key replays its outcome byte for byte, as often as asked and after a
/// restart, with the time it settled.
pub(crate) async fn a_settled_key_replays_its_outcome_byte_for_byte<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    let before = h.clock().await;
    let settled = h
        .store()
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, every_byte()),
            h.now(),
        )
        .await
        .unwrap();
    let after = h.clock().await;
    assert_eq!(settled.state(), State::Succeeded);
    assert_eq!(settled.generation, generation);
    let Status::Settled {
        completed_at,
        expires_at,
        ..
    } = settled.status.clone()
    else {
        panic!("{settled:?}")
    };
    assert_within(completed_at, before, after, "completed_at");
    assert_eq!(settled.updated_at, completed_at);
    assert_eq!(
        expires_at,
        completed_at.plus_millis(Config::default().success_retention_ms)
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(settled.clone()));
    let replay = Decision::Replay {
        verdict: Verdict::Succeeded,
        outcome: Outcome::new(201, every_byte()),
        completed_at,
    };
    // The first from the store, the others perhaps from a cache: the same bytes.
    for _ in 0..3 {
        assert_eq!(
            h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
            replay
        );
    }
    h.restart().await;
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        replay
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(settled));
}

/// A failed outcome is replayed like a success, as failed, for the failure retention.
pub(crate) async fn a_failed_outcome_replays_as_failed<E: Engine>() {
    let config = Config {
        failure_retention_ms: DAY / 2,
        ..Config::default()
    };
    let h = E::open(config).await;
    let key = id("k-1");
    let failed = settle(
        &h,
        &key,
        Verdict::Failed,
        Outcome::new(402, b"declined \x00".to_vec()),
    )
    .await;
    assert_eq!(failed.state(), State::Failed);
    let Status::Settled {
        completed_at,
        expires_at,
        ..
    } = failed.status
    else {
        panic!()
    };
    assert_eq!(expires_at, completed_at.plus_millis(DAY / 2));
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            outcome: Outcome::new(402, b"declined \x00".to_vec()),
            completed_at
        }
    );
}

/// A key reused with another fingerprint is a conflict in every state that holds one,
/// naming the state and the stored fingerprint; nothing is written.
pub(crate) async fn a_different_fingerprint_is_a_conflict_in_every_live_state<E: Engine>() {
    let config = Config {
        success_retention_ms: DAY,
        failure_retention_ms: DAY,
        ..Config::default()
    };
    let mut h = E::open(config).await;
    let pending = id("pending");
    claim(&h, &pending).await;
    let succeeded = id("succeeded");
    settle(&h, &succeeded, Verdict::Succeeded, Outcome::new(200, "ok")).await;
    let failed = id("failed");
    settle(&h, &failed, Verdict::Failed, Outcome::new(500, "no")).await;
    let unknown_key = id("unknown");
    unknown(&h, &unknown_key).await;
    let expected = [
        (&pending, State::Pending),
        (&succeeded, State::Succeeded),
        (&failed, State::Failed),
        (&unknown_key, State::Unknown),
    ];
    let before = h.store().list(&ListFilter::default()).await.unwrap();
    for (key, state) in expected {
        assert_eq!(
            h.store().begin(key, fp("other"), h.now()).await.unwrap(),
            Decision::Conflict {
                state,
                stored_fingerprint: fp(key.key())
            },
            "{key}"
        );
    }
    assert_eq!(
        h.store().list(&ListFilter::default()).await.unwrap(),
        before
    );
    // Past retention, the outcome is forgotten and the key still is not free.
    h.pass(DAY).await;
    for key in [&succeeded, &failed] {
        assert_eq!(
            h.store().begin(key, fp("other"), h.now()).await.unwrap(),
            Decision::Conflict {
                state: State::Forgotten,
                stored_fingerprint: fp(key.key())
            },
            "{key}"
        );
    }
}

/// A heartbeat renews the lease from its own time; the renewed lease holds past the
/// first one's end.
pub(crate) async fn a_heartbeat_extends_the_lease<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let lease = Config::default().lease_ms;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    let first = h.store().get(&key).await.unwrap().unwrap();
    h.pass(20_000).await;
    let before = h.clock().await;
    let renewed = h
        .store()
        .heartbeat(&key, generation, h.now())
        .await
        .unwrap();
    let after = h.clock().await;
    assert_eq!(renewed.state(), State::Pending);
    assert_eq!(
        (renewed.generation, renewed.created_at, renewed.fingerprint),
        (generation, first.created_at, first.fingerprint)
    );
    assert_within(renewed.updated_at, before, after, "the heartbeat's time");
    assert_eq!(
        renewed.lease_until(),
        Some(renewed.updated_at.plus_millis(lease))
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(renewed.clone()));
    // Past the first lease's end, within the renewed one.
    h.pass(20_000).await;
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::InProgress {
            generation,
            lease_until: renewed.lease_until().unwrap()
        }
    );
}

/// A caller's terms (an HTTP route's) give a claim its lease, a heartbeat its extension
/// and an outcome its retention, in place of the store's; a call without them has the
/// store's.
pub(crate) async fn a_callers_terms_set_the_lease_and_the_retention<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let (store_lease, store_retention) = (
        Config::default().lease_ms,
        Config::default().success_retention_ms,
    );
    let terms = Terms {
        lease_ms: Some(3 * store_lease),
        retention_ms: Some(2 * 3_600_000),
    };
    let key = id("k-1");
    let decision = h
        .store()
        .begin_with(&key, fp("k-1"), h.now(), terms)
        .await
        .unwrap();
    let Decision::Claimed {
        generation,
        lease_until,
    } = decision
    else {
        panic!("a fresh key is claimed: {decision:?}")
    };
    let pending = h.store().get(&key).await.unwrap().unwrap();
    assert_eq!(
        pending.lease_until(),
        Some(pending.updated_at.plus_millis(3 * store_lease))
    );
    assert_eq!(pending.lease_until(), Some(lease_until));
    // Past the store's lease, within the terms': still held.
    h.pass(2 * store_lease).await;
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::InProgress {
            generation,
            lease_until
        }
    );
    let renewed = h
        .store()
        .heartbeat_with(&key, generation, h.now(), terms)
        .await
        .unwrap();
    assert_eq!(
        renewed.lease_until(),
        Some(renewed.updated_at.plus_millis(3 * store_lease))
    );
    let plain = h
        .store()
        .heartbeat(&key, generation, h.now())
        .await
        .unwrap();
    assert_eq!(
        plain.lease_until(),
        Some(plain.updated_at.plus_millis(store_lease))
    );
    let settled = h
        .store()
        .complete_with(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "made"),
            h.now(),
            terms,
        )
        .await
        .unwrap();
    assert_eq!(
        settled.expires_at(),
        Some(settled.updated_at.plus_millis(2 * 3_600_000))
    );
    let other = settle(&h, &id("k-2"), Verdict::Succeeded, Outcome::new(200, "ok")).await;
    assert_eq!(
        other.expires_at(),
        Some(other.updated_at.plus_millis(store_retention))
    );
    // Past the terms' retention, the first is forgotten; the other is still replayed.
    h.pass(2 * 3_600_000).await;
    assert!(matches!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::Forgotten { .. }
    ));
    assert!(matches!(
        h.store()
            .begin(&id("k-2"), fp("k-2"), h.now())
            .await
            .unwrap(),
        Decision::Replay { .. }
    ));
}

/// Release deletes the claim (nothing was executed): a retry claims the key again,
/// under a newer generation.
pub(crate) async fn release_deletes_the_claim_and_a_retry_claims_a_newer_generation<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    h.store().release(&key, generation, h.now()).await.unwrap();
    assert_eq!(h.store().get(&key).await.unwrap(), None);
    let again = claim(&h, &key).await;
    assert!(again > generation, "{again} after {generation}");
    assert_eq!(state_of(&h, &key).await, Some(State::Pending));
}

/// A claim marked Unknown answers NeedsReconciliation to every retry, at any time later,
/// and its holder can no longer act on it.
pub(crate) async fn mark_unknown_needs_reconciliation_until_resolved<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    let before = h.clock().await;
    let marked = h
        .store()
        .mark_unknown(&key, generation, h.now())
        .await
        .unwrap();
    let after = h.clock().await;
    assert_eq!(marked.status, Status::Unknown);
    assert_eq!(marked.generation, generation);
    assert_within(marked.updated_at, before, after, "the mark's time");
    assert_eq!(h.store().get(&key).await.unwrap(), Some(marked.clone()));
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::NeedsReconciliation { generation }
    );
    let stale = Refusal::Stale {
        given: generation,
        current: generation,
        state: State::Unknown,
    };
    let refused = h.store().release(&key, generation, h.now()).await;
    assert!(
        matches!(&refused, Err(Error::Refused(r)) if *r == stale),
        "{refused:?}"
    );
    let refused = h
        .store()
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, ""),
            h.now(),
        )
        .await;
    assert!(
        matches!(&refused, Err(Error::Refused(r)) if *r == stale),
        "{refused:?}"
    );
    // Unknown never expires by time.
    h.pass(400 * DAY).await;
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::NeedsReconciliation { generation }
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(marked));
}

/// resolve(NotExecuted) deletes an Unknown record: a retry claims a fresh generation,
/// and a second resolve finds nothing.
pub(crate) async fn resolve_not_executed_deletes_and_the_key_is_claimed_again<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = unknown(&h, &key).await;
    assert_eq!(
        h.store()
            .resolve(&key, Resolution::NotExecuted, h.now())
            .await
            .unwrap(),
        None
    );
    assert_eq!(h.store().get(&key).await.unwrap(), None);
    let refused = h
        .store()
        .resolve(&key, Resolution::NotExecuted, h.now())
        .await;
    assert!(
        matches!(refused, Err(Error::Refused(Refusal::NotFound))),
        "{refused:?}"
    );
    let again = claim(&h, &key).await;
    assert!(again > generation, "{again} after {generation}");
}

/// resolve(Succeeded) settles an Unknown record as complete would; retries replay it.
pub(crate) async fn resolve_succeeded_settles_and_replays<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = unknown(&h, &key).await;
    let before = h.clock().await;
    let resolved = h
        .store()
        .resolve(
            &key,
            Resolution::Succeeded(Outcome::new(201, every_byte())),
            h.now(),
        )
        .await
        .unwrap()
        .expect("a settled record");
    let after = h.clock().await;
    assert_eq!(resolved.state(), State::Succeeded);
    assert_eq!(resolved.generation, generation);
    let Status::Settled {
        completed_at,
        expires_at,
        ..
    } = resolved.status.clone()
    else {
        panic!()
    };
    assert_within(completed_at, before, after, "completed_at");
    assert_eq!(
        expires_at,
        completed_at.plus_millis(Config::default().success_retention_ms)
    );
    assert_eq!(h.store().get(&key).await.unwrap(), Some(resolved));
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::Replay {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(201, every_byte()),
            completed_at
        }
    );
}

/// resolve(Failed) settles an Unknown record as failed; retries replay the failure.
pub(crate) async fn resolve_failed_settles_and_replays<E: Engine>() {
    let h = E::open(Config::default()).await;
    let key = id("k-1");
    unknown(&h, &key).await;
    let resolved = h
        .store()
        .resolve(
            &key,
            Resolution::Failed(Outcome::new(402, "declined")),
            h.now(),
        )
        .await
        .unwrap()
        .expect("a settled record");
    assert_eq!(resolved.state(), State::Failed);
    let Status::Settled { completed_at, .. } = resolved.status else {
        panic!()
    };
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            outcome: Outcome::new(402, "declined"),
            completed_at
        }
    );
}

/// resolve applies to Unknown records only: a pending, settled or absent key is refused
/// and stays as it was.
pub(crate) async fn resolve_refuses_a_record_that_is_not_unknown<E: Engine>() {
    let h = E::open(Config::default()).await;
    let pending = id("pending");
    claim(&h, &pending).await;
    let failed = id("failed");
    settle(&h, &failed, Verdict::Failed, Outcome::new(402, "declined")).await;
    let succeeded = id("succeeded");
    settle(&h, &succeeded, Verdict::Succeeded, Outcome::new(200, "ok")).await;
    let before = h.store().list(&ListFilter::default()).await.unwrap();
    for (key, state) in [
        (&pending, State::Pending),
        (&failed, State::Failed),
        (&succeeded, State::Succeeded),
    ] {
        for resolution in [
            Resolution::NotExecuted,
            Resolution::Succeeded(Outcome::new(200, "late")),
            Resolution::Failed(Outcome::new(500, "late")),
        ] {
            let refused = h.store().resolve(key, resolution, h.now()).await;
            assert!(
                matches!(
                    refused,
                    Err(Error::Refused(Refusal::WrongState { state: s, expected: State::Unknown }))
                        if s == state
                ),
                "{key}: {refused:?}"
            );
        }
    }
    assert_eq!(
        h.store().list(&ListFilter::default()).await.unwrap(),
        before
    );
    let refused = h
        .store()
        .resolve(&id("nobody"), Resolution::NotExecuted, h.now())
        .await;
    let Err(error) = refused else {
        panic!("{refused:?}")
    };
    assert!(
        matches!(error, Error::Refused(Refusal::NotFound)),
        "{error:?}"
    );
    assert!(error.to_string().contains("no record"), "{error}");
}

/// Every input that names a generation is refused on a key without a record, and
/// creates none.
pub(crate) async fn inputs_on_an_absent_key_are_not_found<E: Engine>() {
    let h = E::open(Config::default()).await;
    let nobody = id("nobody");
    let store = h.store();
    let now = h.now();
    let g = Generation(1);
    let not_found = |what: &str, refused: Result<(), Error>| {
        assert!(
            matches!(refused, Err(Error::Refused(Refusal::NotFound))),
            "{what}: {refused:?}"
        );
    };
    not_found(
        "heartbeat",
        store.heartbeat(&nobody, g, now).await.map(drop),
    );
    not_found(
        "complete",
        store
            .complete(&nobody, g, Verdict::Succeeded, Outcome::new(200, ""), now)
            .await
            .map(drop),
    );
    not_found("release", store.release(&nobody, g, now).await);
    not_found(
        "mark_unknown",
        store.mark_unknown(&nobody, g, now).await.map(drop),
    );
    not_found(
        "resolve",
        store
            .resolve(&nobody, Resolution::NotExecuted, now)
            .await
            .map(drop),
    );
    assert!(store.list(&ListFilter::default()).await.unwrap().is_empty());
}

/// An outcome above the configured size is refused, naming the sizes; the claim stays
/// as it was, and no generation is spent.
pub(crate) async fn an_outcome_over_the_limit_is_refused_and_writes_nothing<E: Engine>() {
    let config = Config {
        max_outcome_bytes: 4,
        ..Config::default()
    };
    let h = E::open(config).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    let before = h.store().get(&key).await.unwrap();
    let refused = h
        .store()
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "too long"),
            h.now(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Refused(Refusal::OutcomeTooLarge(_))),
        "{refused:?}"
    );
    assert_eq!(refused.to_string(), "outcome: 8 bytes, at most 4");
    assert_eq!(h.store().get(&key).await.unwrap(), before);
    // resolve is held to the same limit.
    let unknown_key = id("k-2");
    unknown(&h, &unknown_key).await;
    let refused = h
        .store()
        .resolve(
            &unknown_key,
            Resolution::Failed(Outcome::new(500, "too long")),
            h.now(),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), "outcome: 8 bytes, at most 4");
    assert_eq!(state_of(&h, &unknown_key).await, Some(State::Unknown));
    assert_eq!(
        h.store().stats(h.now()).await.unwrap().generation,
        Generation(2)
    );
}

/// Generations rise across the whole store and across restarts; a released claim's
/// generation is never handed out again.
pub(crate) async fn generations_rise_across_the_store_and_a_restart<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let mut last = Generation(0);
    for round in 0..4 {
        if round > 0 {
            h.restart().await;
        }
        assert_eq!(h.store().stats(h.now()).await.unwrap().generation, last);
        for n in 0..5 {
            let key = id(&format!("r{round}-{n}"));
            let generation = claim(&h, &key).await;
            assert!(generation > last, "{generation} after {last}");
            last = generation;
            if n % 2 == 0 {
                h.store().release(&key, generation, h.now()).await.unwrap();
            }
        }
    }
    assert_eq!(last, Generation(20));
}

/// Under the default policy, a begin after the lease ran out turns the claim Unknown
/// (the executor may have acted), and the late executor is fenced.
pub(crate) async fn an_expired_lease_turns_unknown_by_default<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let key = id("k-1");
    let generation = claim(&h, &key).await;
    h.pass(Config::default().lease_ms).await;
    assert_eq!(
        h.store().begin(&key, fp("k-1"), h.now()).await.unwrap(),
        Decision::NeedsReconciliation { generation }
    );
    assert_eq!(state_of(&h, &key).await, Some(State::Unknown));
    let refused = h
        .store()
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::default(),
            h.now(),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::Refused(Refusal::Stale {
                state: State::Unknown,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(state_of(&h, &key).await, Some(State::Unknown));
}

/// Under Takeover, a begin after the lease ran out claims the key under a newer
/// generation; the old holder is fenced, the new one holds the key.
pub(crate) async fn an_expired_lease_is_taken_over_under_takeover<E: Engine>() {
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
    let refused = h.store().heartbeat(&key, first, h.now()).await;
    assert!(
        matches!(
            refused,
            Err(Error::Refused(Refusal::Stale { given, current, state: State::Pending }))
                if given == first && current == second
        ),
        "{refused:?}"
    );
    let refused = h
        .store()
        .complete(
            &key,
            first,
            Verdict::Succeeded,
            Outcome::new(200, ""),
            h.now(),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::Refused(Refusal::Stale { .. }))),
        "{refused:?}"
    );
    let renewed = h.store().heartbeat(&key, second, h.now()).await.unwrap();
    assert_eq!(renewed.generation, second);
}

/// A claim given up without waiting is released or marked Unknown once the engine's
/// background work is done; a server waits for `idle` and then closes the store.
pub(crate) async fn give_up_releases_or_marks_unknown_in_the_background<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let released = id("released");
    let marked = id("marked");
    let g1 = claim(&h, &released).await;
    let g2 = claim(&h, &marked).await;
    h.store().give_up(&released, g1, GiveUp::Release, h.now());
    h.store().give_up(&marked, g2, GiveUp::MarkUnknown, h.now());
    tokio::time::timeout(Duration::from_secs(10), h.store().idle())
        .await
        .expect("the background work ends");
    h.restart().await;
    assert_eq!(h.store().get(&released).await.unwrap(), None);
    let record = h.store().get(&marked).await.unwrap().unwrap();
    assert_eq!((record.state(), record.generation), (State::Unknown, g2));
}

/// A begin whose future is dropped before its answer is taken (an HTTP client that hung
/// up) gives its claim back: no key stays claimed by nobody.
pub(crate) async fn a_begin_dropped_before_its_answer_gives_its_claim_back<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let (mut dropped, mut received) = (0, 0);
    for n in 0..100u64 {
        let key = id(&format!("dropped-{n}"));
        // Dropped after a few hundred microseconds at most: before the claim was sent,
        // while it ran, or after it committed.
        let waited = tokio::time::timeout(
            Duration::from_micros((n * 37) % 1_500),
            h.store().begin(&key, fp("a"), h.now()),
        )
        .await;
        match waited {
            Ok(Ok(Decision::Claimed { generation, .. })) => {
                received += 1;
                h.store().release(&key, generation, h.now()).await.unwrap();
            }
            Ok(other) => panic!("{key}: {other:?}"),
            Err(_) => dropped += 1,
        }
    }
    println!("{dropped} begins dropped, {received} answered");
    assert!(dropped > 0, "no begin was dropped: the run shows nothing");
    // The claims nobody received are released in the background; the store is idle
    // once they are, and closed, none is left undone.
    tokio::time::timeout(Duration::from_secs(10), h.store().idle())
        .await
        .expect("the background work ends");
    h.restart().await;
    let left = h.store().list(&ListFilter::default()).await.unwrap();
    assert!(
        left.is_empty(),
        "claims nobody received are still there: {:?}",
        left.iter()
            .map(|(id, r)| (id.key().to_owned(), r.state()))
            .collect::<Vec<_>>()
    );
}
