//! Unit tests of the sender ledger: transitions, replies, backoff, deadline, restart.
//!
//! The helpers here are shared with `tests_format`.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::Outcome;

pub(super) const CREATED: Timestamp = Timestamp(1_000);
/// `CREATED + 100_000 − 10_000`.
pub(super) const DEADLINE: Timestamp = Timestamp(91_000);

pub(super) fn config() -> LedgerConfig {
    LedgerConfig {
        server_retention_ms: 100_000,
        safety_margin_ms: 10_000,
        base_backoff_ms: 100,
        max_backoff_ms: 1_600,
        ..LedgerConfig::with_seed(42)
    }
}

pub(super) fn ledger() -> Ledger {
    Ledger::new(config()).unwrap()
}

pub(super) fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"pay 10 EUR")
}

/// Begins an intent at `CREATED` and returns its key.
pub(super) fn begin(ledger: &mut Ledger, random: u8) -> String {
    let payload = b"pay 10 EUR".to_vec();
    ledger
        .begin("pay", payload, fingerprint(), CREATED, [random; 16])
        .unwrap()
        .key
        .clone()
}

/// Begins an intent and sends its first attempt at `CREATED`.
pub(super) fn in_flight(ledger: &mut Ledger) -> String {
    let key = begin(ledger, 1);
    let sent = ledger.due(CREATED);
    assert_eq!(sent.len(), 1);
    key
}

pub(super) fn reply(status: u16) -> Reply {
    Reply {
        status,
        body: b"body".to_vec(),
        retry_at: None,
    }
}

pub(super) fn state(ledger: &Ledger, key: &str) -> IntentState {
    ledger.get(key).unwrap().state
}

#[test]
fn begin_validates_the_operation_and_refuses_a_reused_key() {
    let mut ledger = ledger();
    let err = ledger
        .begin("", vec![], fingerprint(), CREATED, [1; 16])
        .unwrap_err();
    assert_eq!(err.to_string(), "operation: empty, needs 1 to 255 bytes");
    let err = ledger
        .begin("p\nay", vec![], fingerprint(), CREATED, [1; 16])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "operation: control character at byte 1, control characters are not allowed"
    );
    let long = "o".repeat(256);
    assert!(matches!(
        ledger.begin(&long, vec![], fingerprint(), CREATED, [1; 16]),
        Err(LedgerError::Operation(_))
    ));

    let key = begin(&mut ledger, 1);
    let intent = ledger.get(&key).unwrap();
    assert_eq!(
        (
            intent.state,
            intent.attempts,
            intent.next_attempt_at,
            intent.deadline
        ),
        (IntentState::Queued, 0, CREATED, DEADLINE)
    );
    let err = ledger
        .begin("pay", vec![], fingerprint(), CREATED, [1; 16])
        .unwrap_err();
    assert_eq!(err, LedgerError::DuplicateKey { key: key.clone() });
    assert!(
        err.to_string()
            .ends_with("already names an intent, every begin needs 16 fresh random bytes")
    );
    let later = ledger.begin(
        "pay",
        vec![],
        fingerprint(),
        CREATED.plus_millis(1),
        [1; 16],
    );
    assert_ne!(later.unwrap().key, key);
    assert_eq!(ledger.len(), 2);
}

#[test]
fn reply_classes_follow_the_idempotency_key_draft() {
    use ReplyClass::*;
    let cases = [
        (200, Completed),
        (201, Completed),
        (204, Completed),
        (299, Completed),
        (409, InProgress),
        (422, Conflict),
        (408, Retry),
        (425, Retry),
        (429, Retry),
        (500, Retry),
        (503, Retry),
        (599, Retry),
        (400, Failed),
        (401, Failed),
        (403, Failed),
        (404, Failed),
        (410, Gone),
        (499, Failed),
        (300, Failed),
        (303, Failed),
        (308, Failed),
        (0, Retry),
        (100, Retry),
        (199, Retry),
        (600, Retry),
        (u16::MAX, Retry),
    ];
    for (status, class) in cases {
        assert_eq!(ReplyClass::of(status), class, "status {status}");
    }
}

#[test]
fn definitive_replies_settle_with_their_outcome() {
    for (status, settled) in [
        (200, IntentState::Completed),
        (201, IntentState::Completed),
        (422, IntentState::Conflict),
        (404, IntentState::Failed),
        (303, IntentState::Failed),
    ] {
        let mut ledger = ledger();
        let key = in_flight(&mut ledger);
        let effect = ledger.on_reply(&key, reply(status), CREATED).unwrap();
        assert_eq!(effect, Effect::Finished(settled), "status {status}");
        let intent = ledger.get(&key).unwrap();
        assert_eq!(intent.state, settled);
        assert_eq!(
            intent.outcome,
            Some(Outcome::new(i32::from(status), *b"body"))
        );
        assert_eq!(intent.last_status, Some(status));
        assert_eq!(ledger.next_wakeup(), None);
    }
}

#[test]
fn retryable_replies_and_transport_errors_requeue_within_the_backoff() {
    let now = CREATED.plus_millis(5);
    for status in [408, 425, 429, 500, 503, 0, 102, 600, 409] {
        let mut ledger = ledger();
        let key = in_flight(&mut ledger);
        let Effect::Requeued { at } = ledger.on_reply(&key, reply(status), now).unwrap() else {
            panic!("status {status} should requeue");
        };
        assert!(
            at >= now && at.millis_since(now) <= 100,
            "status {status}: {at}"
        );
        let intent = ledger.get(&key).unwrap();
        assert_eq!(
            (intent.state, intent.next_attempt_at),
            (IntentState::Queued, at)
        );
        assert_eq!(
            (intent.last_status, intent.outcome.clone()),
            (Some(status), None)
        );
    }
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    ledger.on_reply(&key, reply(503), now).unwrap();
    ledger.due(now.plus_millis(100)).into_iter().for_each(drop);
    let Effect::Requeued { at } = ledger.on_transport_error(&key, now).unwrap() else {
        panic!("a transport error should requeue");
    };
    assert!(
        at.millis_since(now) <= 200,
        "second retry waits at most 2 × base"
    );
    assert_eq!(ledger.get(&key).unwrap().last_status, None);
}

#[test]
fn in_progress_honours_the_lease_end_capped_by_the_deadline() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    let lease_end = CREATED.plus_millis(30_000);
    let busy = Reply {
        status: 409,
        body: vec![],
        retry_at: Some(lease_end),
    };
    assert_eq!(
        ledger.on_reply(&key, busy, CREATED).unwrap(),
        Effect::Requeued { at: lease_end }
    );
    assert_eq!(ledger.next_wakeup(), Some(lease_end));
    assert!(
        ledger.due(Timestamp(lease_end.0 - 1)).is_empty(),
        "not before the lease end"
    );
    assert_eq!(ledger.due(lease_end).len(), 1);

    // A lease end past the deadline is cut to the deadline, where the intent expires.
    let late = Reply {
        status: 409,
        body: vec![],
        retry_at: Some(DEADLINE.plus_millis(1)),
    };
    assert_eq!(
        ledger.on_reply(&key, late, lease_end).unwrap(),
        Effect::Requeued { at: DEADLINE }
    );
}

#[test]
fn a_lease_end_already_past_backs_off_instead_of_sending_at_once() {
    // The receiver's clock floor ahead of ours, or a lease that ran out in transit: a
    // 409 (or a Retry-After) naming a time at or before now. Honouring it would resend
    // at once, be told 409 again, and loop; the normal backoff applies instead.
    for retry_at in [Timestamp(0), CREATED] {
        for status in [409, 503] {
            let mut with_past = ledger();
            let key = in_flight(&mut with_past);
            let mut without = ledger();
            in_flight(&mut without);
            let past = Reply {
                status,
                body: vec![],
                retry_at: Some(retry_at),
            };
            let effect = with_past.on_reply(&key, past, CREATED).unwrap();
            let backoff = without.on_reply(&key, reply(status), CREATED).unwrap();
            assert_eq!(effect, backoff, "status {status}, retry at {retry_at}");
            let Effect::Requeued { at } = effect else {
                panic!("{effect:?}");
            };
            assert!(at > CREATED, "status {status}: due again at once");
            assert!(with_past.due(CREATED).is_empty(), "no resend at once");
        }
    }
    // A lease end one ms ahead is still honoured.
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    let soon = Reply {
        status: 409,
        body: vec![],
        retry_at: Some(CREATED.plus_millis(1)),
    };
    assert_eq!(
        ledger.on_reply(&key, soon, CREATED).unwrap(),
        Effect::Requeued {
            at: CREATED.plus_millis(1)
        }
    );
}

/// An intent that expired with no reply: sent once, then a transport error at the
/// deadline.
fn expired(ledger: &mut Ledger) -> String {
    let key = in_flight(ledger);
    assert_eq!(
        ledger.on_transport_error(&key, DEADLINE).unwrap(),
        Effect::Finished(IntentState::Expired)
    );
    key
}

#[test]
fn an_expired_intent_is_forgotten_only_once_resolved() {
    let mut ledger = ledger();
    let key = expired(&mut ledger);
    let err = ledger.forget(&key).unwrap_err();
    assert_eq!(err, LedgerError::Unresolved { key: key.clone() });
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "key {key}: intent has no definitive answer (expired, or unknown at the receiver), its effect may or may not have happened; resolve it first (as completed, failed or not executed, with a reason)"
        )
    );
    assert!(ledger.get(&key).unwrap().needs_resolution());

    // A reason is required, one line, bounded; nothing changes on a refusal.
    let before = ledger.clone();
    for (reason, message) in [
        (
            "",
            "reason: 0 bytes, empty, say why (who confirmed it, where)",
        ),
        (
            "  ",
            "reason: 2 bytes, empty, say why (who confirmed it, where)",
        ),
        (
            "a\nb",
            "reason: 3 bytes, contains a control character (a line break, a tab), keep it to one line",
        ),
    ] {
        let err = ledger
            .resolve(&key, ResolvedAs::Completed, reason, DEADLINE)
            .unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let long = "x".repeat(MAX_REASON_LEN + 1);
    let err = ledger
        .resolve(&key, ResolvedAs::Completed, &long, DEADLINE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "reason: 1025 bytes, too long, at most 1024 bytes"
    );
    assert_eq!(ledger, before);
    assert!(
        ledger
            .resolve(&key, ResolvedAs::Completed, &long[1..], DEADLINE)
            .is_ok(),
        "1024 bytes is the limit"
    );
    let resolved = ledger.get(&key).unwrap();
    assert_eq!(resolved.state, IntentState::Expired, "it stays expired");
    assert_eq!(
        resolved
            .resolution
            .as_ref()
            .map(|r| (r.resolved_as, r.resolved_at)),
        Some((ResolvedAs::Completed, DEADLINE))
    );
    assert!(resolved.is_settled());

    // A resolution is final, and only an expired intent takes one.
    let err = ledger
        .resolve(&key, ResolvedAs::NotExecuted, "second look", DEADLINE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "key {key}: intent is resolved already (as completed), a resolution is final"
        )
    );
    let live = begin(&mut ledger, 9);
    let err = ledger
        .resolve(&live, ResolvedAs::Failed, "why", DEADLINE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "key {live}: intent is queued, only an expired or unknown intent is resolved (the others get their answer from the receiver)"
        )
    );
    assert!(matches!(
        ledger.resolve("nope", ResolvedAs::Failed, "why", DEADLINE),
        Err(LedgerError::UnknownKey { .. })
    ));

    let forgotten = ledger.forget(&key).unwrap();
    assert_eq!(
        forgotten.resolution.unwrap().resolved_as,
        ResolvedAs::Completed
    );
    assert!(ledger.get(&key).is_none());
}

#[test]
fn put_takes_the_resolution_of_an_expired_intent_and_nothing_else() {
    let mut ledger = ledger();
    let key = expired(&mut ledger);
    let mut other = ledger.clone();
    let resolved = other
        .resolve(
            &key,
            ResolvedAs::NotExecuted,
            "not on the statement",
            DEADLINE,
        )
        .unwrap()
        .clone();
    // A late copy without the resolution does not undo it.
    let unresolved = ledger.get(&key).unwrap().clone();
    assert!(ledger.put(resolved.clone()));
    assert_eq!(ledger.get(&key), Some(&resolved));
    assert!(!ledger.put(unresolved));
    assert_eq!(ledger.get(&key), Some(&resolved));
    // Nor does another resolution replace the first.
    let mut twice = resolved.clone();
    twice.resolution.as_mut().unwrap().resolved_as = ResolvedAs::Completed;
    assert!(!ledger.put(twice));
    assert_eq!(ledger.get(&key), Some(&resolved));
    // A completed intent takes no resolution either.
    let done = begin(&mut ledger, 2);
    assert_eq!(ledger.due(CREATED).len(), 1);
    ledger.on_reply(&done, reply(200), CREATED).unwrap();
    let mut forged = ledger.get(&done).unwrap().clone();
    forged.resolution = resolved.resolution.clone();
    assert!(!ledger.put(forged));
    assert_eq!(ledger.get(&done).unwrap().resolution, None);
}

#[test]
fn backoff_window_doubles_and_is_capped_without_overflow() {
    let config = config();
    let caps: Vec<u64> = (0..8).map(|n| backoff_cap(n, &config)).collect();
    assert_eq!(caps, [100, 100, 200, 400, 800, 1_600, 1_600, 1_600]);
    assert_eq!(backoff_cap(u32::MAX, &config), 1_600);
    let huge = LedgerConfig {
        base_backoff_ms: u64::MAX / 2,
        max_backoff_ms: u64::MAX,
        ..config
    };
    assert_eq!(backoff_cap(3, &huge), u64::MAX);
    assert_eq!(backoff_cap(64, &huge), u64::MAX);
}

#[test]
fn jitter_is_splitmix64_and_covers_its_window() {
    // SplitMix64 reference outputs for seed 0.
    let mut rng = BackoffRng::new(0);
    assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let mut rng = BackoffRng::new(7);
    let draws: Vec<u64> = (0..200).map(|_| rng.up_to(10)).collect();
    assert!(draws.iter().all(|&d| d <= 10));
    assert!(
        draws.contains(&0) && draws.contains(&10),
        "both ends of the window are reachable"
    );
    assert_eq!(rng.up_to(0), 0);
    let _ = rng.up_to(u64::MAX);
}

#[test]
fn retries_back_off_stay_before_the_deadline_then_expire() {
    let mut ledger = ledger();
    let key = begin(&mut ledger, 1);
    let mut now = CREATED;
    let mut sends = 0u32;
    loop {
        let sent = ledger.due(now);
        let intent = ledger.get(&key).unwrap();
        if intent.state == IntentState::Expired {
            assert!(sent.is_empty() && now >= DEADLINE);
            break;
        }
        if let [attempt] = sent.as_slice() {
            sends += 1;
            assert!(now < DEADLINE, "sent at {now}, deadline {DEADLINE}");
            assert_eq!(
                (attempt.key.as_str(), attempt.attempt),
                (key.as_str(), sends)
            );
            assert_eq!(attempt.payload, b"pay 10 EUR");
            match ledger.on_transport_error(&key, now).unwrap() {
                Effect::Requeued { at } => {
                    assert!(at.millis_since(now) <= backoff_cap(sends, ledger.config()));
                    assert!(at <= DEADLINE);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        now = ledger.next_wakeup().expect("a queued intent has a wake-up");
    }
    assert!(
        sends > 50,
        "about 90 s of retries at most 1.6 s apart, got {sends}"
    );
    assert_eq!(ledger.get(&key).unwrap().attempts, sends);
    assert_eq!(ledger.next_wakeup(), None);
    assert!(ledger.due(Timestamp(u64::MAX)).is_empty());
}

#[test]
fn deadline_guard_expires_queued_and_late_retries() {
    let mut ledger = ledger();
    let never_sent = begin(&mut ledger, 1);
    assert!(ledger.due(DEADLINE).is_empty());
    assert_eq!(state(&ledger, &never_sent), IntentState::Expired);
    assert_eq!(ledger.get(&never_sent).unwrap().attempts, 0);

    let key = begin(&mut ledger, 2);
    assert_eq!(
        ledger.due(Timestamp(DEADLINE.0 - 1)).len(),
        1,
        "the last moment may send"
    );
    let effect = ledger.on_reply(&key, reply(503), DEADLINE).unwrap();
    assert_eq!(effect, Effect::Finished(IntentState::Expired));
    assert_eq!(ledger.get(&key).unwrap().outcome, None);
}

#[test]
fn the_test_knob_turns_the_deadline_guard_off() {
    let unguarded = LedgerConfig {
        unguarded_deadline: true,
        ..config()
    };
    let mut ledger = Ledger::new(unguarded).unwrap();
    let key = begin(&mut ledger, 1);
    let after = DEADLINE.plus_millis(5_000);
    assert_eq!(ledger.due(after).len(), 1, "sent after the deadline");
    let busy = Reply {
        status: 409,
        body: vec![],
        retry_at: Some(after.plus_millis(9_000)),
    };
    let effect = ledger.on_reply(&key, busy, after).unwrap();
    assert_eq!(
        effect,
        Effect::Requeued {
            at: after.plus_millis(9_000)
        }
    );
    assert_eq!(ledger.next_wakeup(), Some(after.plus_millis(9_000)));
    assert!(!config().unguarded_deadline && !LedgerConfig::with_seed(1).unguarded_deadline);
}

#[test]
fn restart_requeues_in_flight_with_the_same_key() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    let queued = begin(&mut ledger, 2);
    let before = ledger.get(&key).unwrap().clone();
    ledger.restart();
    let after = ledger.get(&key).unwrap();
    assert_eq!(after.state, IntentState::Queued);
    assert_eq!(
        after,
        &Intent {
            state: IntentState::Queued,
            ..before
        }
    );
    assert_eq!(ledger.next_wakeup(), Some(CREATED), "due at once");
    let resent = ledger.due(CREATED.plus_millis(1));
    let keys: Vec<(&str, u32)> = resent.iter().map(|a| (a.key.as_str(), a.attempt)).collect();
    let mut expected = [(key.as_str(), 2), (queued.as_str(), 1)];
    expected.sort();
    assert_eq!(keys, expected);
}

#[test]
fn a_late_definitive_reply_settles_a_requeued_intent() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    ledger.on_transport_error(&key, CREATED).unwrap();
    assert_eq!(state(&ledger, &key), IntentState::Queued);
    // A late retryable reply to the lost attempt changes nothing.
    let before = ledger.get(&key).unwrap().clone();
    assert_eq!(
        ledger.on_reply(&key, reply(503), CREATED).unwrap(),
        Effect::Ignored
    );
    assert_eq!(
        ledger.on_transport_error(&key, CREATED).unwrap(),
        Effect::Ignored
    );
    assert_eq!(ledger.get(&key).unwrap(), &before);
    // Its late 2xx completes the intent.
    let effect = ledger
        .on_reply(&key, reply(200), CREATED.plus_millis(2))
        .unwrap();
    assert_eq!(effect, Effect::Finished(IntentState::Completed));
    assert!(ledger.due(DEADLINE).is_empty());
}

#[test]
fn terminal_intents_and_unsent_ones_ignore_every_input() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    ledger.on_reply(&key, reply(201), CREATED).unwrap();
    let settled = ledger.get(&key).unwrap().clone();
    for status in [200, 409, 422, 404, 503] {
        let other = Reply {
            status,
            body: b"other".to_vec(),
            retry_at: None,
        };
        assert_eq!(
            ledger.on_reply(&key, other, CREATED).unwrap(),
            Effect::Ignored
        );
    }
    assert_eq!(
        ledger.on_transport_error(&key, CREATED).unwrap(),
        Effect::Ignored
    );
    ledger.restart();
    assert!(ledger.due(CREATED).is_empty());
    assert_eq!(ledger.get(&key).unwrap(), &settled);

    let unsent = begin(&mut ledger, 2);
    assert_eq!(
        ledger.on_reply(&unsent, reply(200), CREATED).unwrap(),
        Effect::Ignored
    );
    assert_eq!(state(&ledger, &unsent), IntentState::Queued);
}

#[test]
fn unknown_keys_are_refused() {
    let mut ledger = ledger();
    let err = ledger.on_reply("nope", reply(200), CREATED).unwrap_err();
    assert_eq!(err.to_string(), "key nope: no intent with this key");
    assert!(matches!(
        ledger.on_transport_error("nope", CREATED),
        Err(LedgerError::UnknownKey { .. })
    ));
}

#[test]
fn poll_names_what_it_sent_and_what_expired() {
    let mut ledger = ledger();
    let old = begin(&mut ledger, 1);
    let young = ledger
        .begin("pay", vec![], fingerprint(), DEADLINE, [2; 16])
        .unwrap()
        .key
        .clone();
    let polled = ledger.poll(DEADLINE);
    assert_eq!(polled.expired, [old.as_str()]);
    assert_eq!(polled.attempts.len(), 1);
    assert_eq!(polled.attempts[0].key, young);
    assert_eq!(state(&ledger, &old), IntentState::Expired);
    assert_eq!(
        ledger.poll(DEADLINE),
        Polled::default(),
        "nothing left to do"
    );
}

#[test]
fn put_takes_in_copies_but_never_changes_a_terminal_intent() {
    let mut here = ledger();
    let mut there = ledger();
    let key = in_flight(&mut there);
    let sent = there.get(&key).unwrap().clone();
    assert!(here.put(sent.clone()), "a new intent is inserted");
    assert!(
        !here.put(sent.clone()),
        "the same copy again changes nothing"
    );
    assert_eq!(here.get(&key), Some(&sent));

    there.on_reply(&key, reply(201), CREATED).unwrap();
    let done = there.get(&key).unwrap().clone();
    assert!(here.put(done.clone()), "a newer copy replaces it");
    assert!(
        !here.put(sent),
        "a late copy cannot bring a terminal intent back"
    );
    assert_eq!(here.get(&key), Some(&done));

    let other = begin(&mut there, 2);
    assert!(here.put(there.get(&other).unwrap().clone()));
    let keys: Vec<&str> = here.iter().map(|i| i.key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "kept in key order");
    assert_eq!(here.len(), 2);
}

#[test]
fn forget_takes_only_terminal_intents() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    let err = ledger.forget(&key).unwrap_err();
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "key {key}: intent is in_flight, only completed, failed, conflict or resolved expired or unknown intents may be forgotten"
        )
    );
    ledger.on_reply(&key, reply(404), CREATED).unwrap();
    assert_eq!(ledger.forget(&key).unwrap().state, IntentState::Failed);
    assert!(ledger.get(&key).is_none() && ledger.is_empty());
    assert!(matches!(
        ledger.forget(&key),
        Err(LedgerError::UnknownKey { .. })
    ));
}

#[test]
fn next_wakeup_is_the_earliest_queued_time() {
    let mut ledger = ledger();
    assert_eq!(ledger.next_wakeup(), None);
    let a = in_flight(&mut ledger);
    assert_eq!(
        ledger.next_wakeup(),
        None,
        "in flight waits for the network"
    );
    let busy = Reply {
        status: 409,
        body: vec![],
        retry_at: Some(Timestamp(7_000)),
    };
    ledger.on_reply(&a, busy, CREATED).unwrap();
    ledger
        .begin("pay", vec![], fingerprint(), Timestamp(5_000), [2; 16])
        .unwrap();
    assert_eq!(ledger.next_wakeup(), Some(Timestamp(5_000)));
    assert_eq!(ledger.iter().count(), 2);
}

/// The retry times of one intent that always meets a transport error, with `seed`.
fn retry_times(seed: u64) -> Vec<Timestamp> {
    let mut ledger = Ledger::new(LedgerConfig { seed, ..config() }).unwrap();
    let key = begin(&mut ledger, 1);
    let mut times = Vec::new();
    while let Some(now) = ledger.next_wakeup() {
        if ledger.due(now).is_empty() {
            continue;
        }
        if let Effect::Requeued { at } = ledger.on_transport_error(&key, now).unwrap() {
            times.push(at);
        }
    }
    times
}

#[test]
fn backoff_is_deterministic_given_the_seed() {
    let a = retry_times(5);
    assert!(a.len() > 50);
    assert_eq!(a, retry_times(5));
    assert_ne!(a, retry_times(6));
    assert!(a.windows(2).all(|w| w[0] <= w[1]));
}
