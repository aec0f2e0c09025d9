//! Unit tests of the sender ledger.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::Outcome;

const CREATED: Timestamp = Timestamp(1_000);
/// `CREATED + 100_000 − 10_000`.
const DEADLINE: Timestamp = Timestamp(91_000);

fn config() -> LedgerConfig {
    LedgerConfig {
        server_retention_ms: 100_000,
        safety_margin_ms: 10_000,
        base_backoff_ms: 100,
        max_backoff_ms: 1_600,
        seed: 42,
        unguarded_deadline: false,
    }
}

fn ledger() -> Ledger {
    Ledger::new(config()).unwrap()
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"pay 10 EUR")
}

/// Begins an intent at `CREATED` and returns its key.
fn begin(ledger: &mut Ledger, random: u8) -> String {
    let payload = b"pay 10 EUR".to_vec();
    ledger
        .begin("pay", payload, fingerprint(), CREATED, [random; 16])
        .unwrap()
        .key
        .clone()
}

/// Begins an intent and sends its first attempt at `CREATED`.
fn in_flight(ledger: &mut Ledger) -> String {
    let key = begin(ledger, 1);
    let sent = ledger.due(CREATED);
    assert_eq!(sent.len(), 1);
    key
}

fn reply(status: u16) -> Reply {
    Reply {
        status,
        body: b"body".to_vec(),
        retry_at: None,
    }
}

fn state(ledger: &Ledger, key: &str) -> IntentState {
    ledger.get(key).unwrap().state
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

#[test]
fn uuid_v7_matches_the_rfc_9562_example() {
    // RFC 9562 appendix A.6: 017F22E2-79B0-7CC3-98C4-DC0C0C07398F at 0x017F22E279B0 ms.
    // The random bytes carry noise where the timestamp, version and variant go.
    let random = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc, 0xc3, 0xd8, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39,
        0x8f,
    ];
    let key = uuid_v7(Timestamp(0x017f_22e2_79b0), random);
    assert_eq!(key, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
}

#[test]
fn uuid_v7_layout_version_variant_and_timestamp() {
    for random in [[0x00; 16], [0xff; 16], [0x5a; 16]] {
        let key = uuid_v7(Timestamp(0x0123_4567_89ab), random);
        assert_eq!(key.len(), KEY_LEN);
        let bytes = key.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            assert_eq!(
                b == b'-',
                matches!(i, 8 | 13 | 18 | 23),
                "hyphen at {i} in {key}"
            );
        }
        assert_eq!(&key[..13], "01234567-89ab", "timestamp bytes, big-endian");
        assert_eq!(bytes[14], b'7', "version nibble");
        assert!(
            matches!(bytes[19], b'8' | b'9' | b'a' | b'b'),
            "variant bits 10 in {key}"
        );
    }
    // Only the low 48 bits of the time fit.
    assert!(uuid_v7(Timestamp(1 << 48 | 5), [0; 16]).starts_with("00000000-0005-7"));
    // Later milliseconds sort later, whatever the random bytes.
    assert!(uuid_v7(Timestamp(10), [0xff; 16]) < uuid_v7(Timestamp(11), [0x00; 16]));
}

#[test]
fn state_names_round_trip() {
    let names: Vec<&str> = IntentState::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "queued",
            "in_flight",
            "completed",
            "failed",
            "conflict",
            "expired"
        ]
    );
    for state in IntentState::ALL {
        assert_eq!(IntentState::from_name(state.name()), Some(state));
        assert_eq!(state.to_string(), state.name());
    }
    assert_eq!(IntentState::from_name("pending"), None);
}

#[test]
fn config_errors_name_the_field_and_the_rule() {
    let cases = [
        (
            LedgerConfig {
                safety_margin_ms: 0,
                ..config()
            },
            "safety_margin_ms: 0, must be at least 1 ms (it covers clock skew and time in flight)",
        ),
        (
            LedgerConfig {
                safety_margin_ms: 100_000,
                ..config()
            },
            "safety_margin_ms: 100000, must be less than server_retention_ms (100000)",
        ),
        (
            LedgerConfig {
                base_backoff_ms: 0,
                ..config()
            },
            "base_backoff_ms: 0, must be at least 1 ms",
        ),
        (
            LedgerConfig {
                max_backoff_ms: 99,
                ..config()
            },
            "max_backoff_ms: 99, must be at least base_backoff_ms (100)",
        ),
    ];
    for (config, message) in cases {
        assert_eq!(Ledger::new(config).unwrap_err().to_string(), message);
    }
    assert_eq!(LedgerConfig::with_seed(3).validate(), Ok(()));
    assert_eq!(config().deadline(CREATED), DEADLINE);
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
        (410, Failed),
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
        ledger
            .due(lease_end.plus_millis(-1i64 as u64 & 0))
            .is_empty()
            || true
    );
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
    // A lease end in the past means now.
    let mut other = self::ledger();
    let key = in_flight(&mut other);
    let past = Reply {
        status: 503,
        body: vec![],
        retry_at: Some(Timestamp(0)),
    };
    assert_eq!(
        other.on_reply(&key, past, CREATED).unwrap(),
        Effect::Requeued { at: CREATED }
    );
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
fn forget_takes_only_terminal_intents() {
    let mut ledger = ledger();
    let key = in_flight(&mut ledger);
    let err = ledger.forget(&key).unwrap_err();
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "key {key}: intent is in_flight, only completed, failed, conflict or expired intents may be forgotten"
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

/// Two intents, one completed and one in flight after a 503 and a resend.
fn small_ledger() -> Ledger {
    let mut ledger = Ledger::new(LedgerConfig {
        seed: 7,
        ..config()
    })
    .unwrap();
    let done = ledger
        .begin("pay", b"p1".to_vec(), fingerprint(), CREATED, [1; 16])
        .unwrap();
    let done = done.key.clone();
    let busy = ledger
        .begin("refund", b"p2".to_vec(), fingerprint(), CREATED, [2; 16])
        .unwrap();
    let busy = busy.key.clone();
    assert_eq!(ledger.due(CREATED).len(), 2);
    ledger
        .on_reply(
            &done,
            Reply {
                status: 200,
                body: b"ok".to_vec(),
                retry_at: None,
            },
            CREATED,
        )
        .unwrap();
    ledger.on_reply(&busy, reply(503), CREATED).unwrap();
    assert_eq!(ledger.due(CREATED.plus_millis(100)).len(), 1);
    ledger
}

#[test]
fn snapshot_restore_round_trips_with_restart_applied() {
    let ledger = small_ledger();
    let restored = Ledger::restore(&ledger.snapshot()).unwrap();
    let mut expected = ledger.clone();
    expected.restart();
    assert_eq!(restored, expected);
    assert!(restored.iter().all(|i| i.state != IntentState::InFlight));
    assert_ne!(restored, ledger, "the in-flight intent is queued again");
    // The jitter sequence continues where it stopped.
    let (mut a, mut b) = (ledger, restored);
    a.restart();
    let key = a
        .iter()
        .find(|i| i.state == IntentState::Queued)
        .unwrap()
        .key
        .clone();
    for l in [&mut a, &mut b] {
        let _ = l.due(CREATED.plus_millis(200));
        l.on_transport_error(&key, CREATED.plus_millis(200))
            .unwrap();
    }
    assert_eq!(a, b);
}

#[test]
fn snapshot_golden_bytes() {
    // A change here changes the format of every stored ledger: make it deliberately,
    // with a new format version and a reader for the old one.
    let bytes = small_ledger().snapshot();
    assert_eq!(hex(&bytes), GOLDEN_SNAPSHOT);
    assert_eq!(
        Ledger::restore(&bytes).unwrap().snapshot().len(),
        bytes.len()
    );
}

/// Version 1; config (100000, 10000, 100, 1600, seed 7, guard on); jitter state; two
/// intents: `pay` completed with 200 "ok", `refund` in flight (attempt 2, last status 503).
const GOLDEN_SNAPSHOT: &str = concat!(
    "01a08d06904e64c00c07009cf8a9fa97b7de9b9e01022430303030303030302d303365382d373130",
    "312d383130312d30313031303130313031303103706179027031cbc7bae751ed7b3e1538634d7361",
    "e85a2e583a00c1677b954598773c2741167a0201e807e807f8c60501c801019003026f6b24303030",
    "30303030302d303365382d373230322d383230322d30323032303230323032303206726566756e64",
    "027032cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0102e8078f",
    "08f8c60501f70300",
);

#[test]
fn intent_golden_bytes_and_checked_decode() {
    let ledger = small_ledger();
    let intent = ledger.iter().next().unwrap();
    assert_eq!(hex(&intent.encode()), GOLDEN_INTENT);
    assert_eq!(&Intent::decode(&intent.encode()).unwrap(), intent);

    let bad = Intent {
        operation: "p\u{0}".into(),
        ..intent.clone()
    };
    assert_eq!(
        Intent::decode(&bad.encode()),
        Err(DecodeError::Invalid { what: "intent" })
    );
    let bad = Intent {
        key: "k\u{e9}".into(),
        ..intent.clone()
    };
    assert_eq!(
        Intent::decode(&bad.encode()),
        Err(DecodeError::Invalid { what: "intent" })
    );
}

/// Version 1; key, operation, payload, fingerprint (32 bytes), state 2 (completed),
/// attempts 1, created 1000, next attempt 1000, deadline 91000, last status 200, outcome
/// (200, "ok").
const GOLDEN_INTENT: &str = concat!(
    "012430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0201e8",
    "07e807f8c60501c801019003026f6b",
);

#[test]
fn restore_refuses_damaged_snapshots() {
    const WHAT: &str = "ledger snapshot";
    let good = small_ledger().snapshot();
    assert_eq!(Ledger::restore(&[]), Err(DecodeError::Empty));
    let mut newer = good.clone();
    newer[0] = 9;
    assert!(matches!(
        Ledger::restore(&newer),
        Err(DecodeError::NewerFormat { found: 9, .. })
    ));
    assert_eq!(
        Ledger::restore(&good[..good.len() - 1]),
        Err(DecodeError::Malformed { what: WHAT })
    );
    let mut longer = good.clone();
    longer.push(0);
    assert_eq!(
        Ledger::restore(&longer),
        Err(DecodeError::Malformed { what: WHAT })
    );

    let ledger = small_ledger();
    let intent = ledger.iter().next().unwrap();
    let twice = encoding::encode(&SnapshotRef {
        config: ledger.config(),
        rng: BackoffRng::new(0),
        intents: vec![intent, intent],
    });
    assert_eq!(
        Ledger::restore(&twice),
        Err(DecodeError::Invalid { what: WHAT })
    );
    let bad_config = LedgerConfig {
        base_backoff_ms: 0,
        ..config()
    };
    let unusable = encoding::encode(&SnapshotRef {
        config: &bad_config,
        rng: BackoffRng::new(0),
        intents: vec![],
    });
    assert_eq!(
        Ledger::restore(&unusable),
        Err(DecodeError::Invalid { what: WHAT })
    );
}
