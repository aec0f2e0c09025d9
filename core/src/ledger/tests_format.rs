//! Unit tests of the sender ledger's formats: keys, names, settings, snapshots and their
//! golden bytes.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::tests::{CREATED, DEADLINE, config, fingerprint, reply};
use super::*;

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
            "expired",
            "unknown"
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
    // Versions 1, written before resolutions, and 2, before the state Unknown, still
    // restore: to the same ledger.
    for old in [GOLDEN_SNAPSHOT_V1, GOLDEN_SNAPSHOT_V2] {
        let old = unhex(old);
        assert_eq!(
            Ledger::restore(&old).unwrap(),
            Ledger::restore(&bytes).unwrap()
        );
        assert_eq!(
            Ledger::restore(&old).unwrap().snapshot(),
            Ledger::restore(&bytes).unwrap().snapshot()
        );
    }
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Version 3; config (100000, 10000, 100, 1600, seed 7, then the ignored switch byte 0);
/// jitter state; two intents: `pay` completed with 200 "ok", `refund` in flight (attempt
/// 2, last status 503); then the resolutions by key, none (00).
const GOLDEN_SNAPSHOT: &str = concat!(
    "03a08d06904e64c00c07009cf8a9fa97b7de9b9e01022430303030303030302d303365382d373130",
    "312d383130312d30313031303130313031303103706179027031cbc7bae751ed7b3e1538634d7361",
    "e85a2e583a00c1677b954598773c2741167a0201e807e807f8c60501c801019003026f6b24303030",
    "30303030302d303365382d373230322d383230322d30323032303230323032303206726566756e64",
    "027032cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0102e8078f",
    "08f8c60501f7030000",
);

/// The same ledger in format version 2, which had no state Unknown: the same bytes
/// behind another version byte.
const GOLDEN_SNAPSHOT_V2: &str = concat!(
    "02a08d06904e64c00c07009cf8a9fa97b7de9b9e01022430303030303030302d303365382d373130",
    "312d383130312d30313031303130313031303103706179027031cbc7bae751ed7b3e1538634d7361",
    "e85a2e583a00c1677b954598773c2741167a0201e807e807f8c60501c801019003026f6b24303030",
    "30303030302d303365382d373230322d383230322d30323032303230323032303206726566756e64",
    "027032cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0102e8078f",
    "08f8c60501f7030000",
);

/// The same ledger in format version 1, which had no resolutions.
const GOLDEN_SNAPSHOT_V1: &str = concat!(
    "01a08d06904e64c00c07009cf8a9fa97b7de9b9e01022430303030303030302d303365382d373130",
    "312d383130312d30313031303130313031303103706179027031cbc7bae751ed7b3e1538634d7361",
    "e85a2e583a00c1677b954598773c2741167a0201e807e807f8c60501c801019003026f6b24303030",
    "30303030302d303365382d373230322d383230322d30323032303230323032303206726566756e64",
    "027032cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0102e8078f",
    "08f8c60501f70300",
);

#[test]
fn a_snapshot_never_carries_the_test_switch() {
    // Byte 10 (after the version and the five settings) held the test-only switch of
    // earlier builds. A snapshot with it set decodes, with the deadline guard on.
    const SWITCH: usize = 10;
    let golden = small_ledger().snapshot();
    assert_eq!(
        golden[SWITCH - 1..=SWITCH],
        [7, 0],
        "seed 7, then the switch"
    );
    let mut switched = golden.clone();
    switched[SWITCH] = 1;
    let restored = Ledger::restore(&switched).unwrap();
    assert!(!restored.config().unguarded_deadline);
    assert_eq!(restored, Ledger::restore(&golden).unwrap());

    let mut unguarded = small_ledger();
    unguarded.config.unguarded_deadline = true;
    assert_eq!(unguarded.snapshot(), golden, "the switch is not written");
}

#[test]
fn intent_golden_bytes_and_checked_decode() {
    let ledger = small_ledger();
    let intent = ledger.iter().next().unwrap();
    assert_eq!(hex(&intent.encode()), GOLDEN_INTENT);
    assert_eq!(&Intent::decode(&intent.encode()).unwrap(), intent);
    // Version 1, before resolutions, and 2, before the state Unknown, decode to the
    // same intent.
    assert_eq!(&Intent::decode(&unhex(GOLDEN_INTENT_V1)).unwrap(), intent);
    assert_eq!(&Intent::decode(&unhex(GOLDEN_INTENT_V2)).unwrap(), intent);

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
    // A resolution on an intent that is not expired, or with a blank reason, is damage.
    let resolution = IntentResolution {
        resolved_as: ResolvedAs::Failed,
        reason: "x".into(),
        resolved_at: DEADLINE,
    };
    let bad = Intent {
        resolution: Some(resolution.clone()),
        ..intent.clone()
    };
    assert_eq!(
        Intent::decode(&bad.encode()),
        Err(DecodeError::Invalid { what: "intent" })
    );
    let bad = Intent {
        state: IntentState::Expired,
        resolution: Some(IntentResolution {
            reason: " ".into(),
            ..resolution
        }),
        ..intent.clone()
    };
    assert_eq!(
        Intent::decode(&bad.encode()),
        Err(DecodeError::Invalid { what: "intent" })
    );
    let mut newer = intent.encode();
    newer[0] = 4;
    assert_eq!(
        Intent::decode(&newer),
        Err(DecodeError::NewerFormat {
            found: 4,
            supported: 3
        })
    );
}

/// Version 3; key, operation, payload, fingerprint (32 bytes), state 2 (completed),
/// attempts 1, created 1000, next attempt 1000, deadline 91000, last status 200, outcome
/// (200, "ok"), no resolution (00).
const GOLDEN_INTENT: &str = concat!(
    "032430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0201e8",
    "07e807f8c60501c801019003026f6b00",
);

/// The same intent in format version 2: the bytes of version 3 behind another version
/// byte (version 2 had no state Unknown).
const GOLDEN_INTENT_V2: &str = concat!(
    "022430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0201e8",
    "07e807f8c60501c801019003026f6b00",
);

/// The same intent in format version 1: no resolution field.
const GOLDEN_INTENT_V1: &str = concat!(
    "012430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0201e8",
    "07e807f8c60501c801019003026f6b",
);

#[test]
fn resolved_intent_golden_bytes() {
    let mut ledger = Ledger::new(config()).unwrap();
    let key = ledger
        .begin("pay", b"p1".to_vec(), fingerprint(), CREATED, [1; 16])
        .unwrap()
        .key
        .clone();
    assert!(ledger.due(DEADLINE).is_empty(), "expires at its deadline");
    let intent = ledger
        .resolve(
            &key,
            ResolvedAs::NotExecuted,
            "not on the statement",
            DEADLINE,
        )
        .unwrap();
    assert_eq!(hex(&intent.encode()), GOLDEN_RESOLVED_INTENT);
    assert_eq!(&Intent::decode(&intent.encode()).unwrap(), intent);
}

#[test]
fn a_snapshot_carries_resolutions_and_refuses_one_that_names_no_expired_intent() {
    let mut ledger = Ledger::new(config()).unwrap();
    let key = ledger
        .begin("pay", b"p1".to_vec(), fingerprint(), CREATED, [1; 16])
        .unwrap()
        .key
        .clone();
    let other = ledger
        .begin("pay", b"p2".to_vec(), fingerprint(), CREATED, [2; 16])
        .unwrap()
        .key
        .clone();
    assert!(ledger.due(DEADLINE).is_empty());
    ledger
        .resolve(&key, ResolvedAs::Failed, "declined", DEADLINE)
        .unwrap();
    let bytes = ledger.snapshot();
    assert_eq!(Ledger::restore(&bytes).unwrap(), ledger);
    let resolution = ledger.get(&key).unwrap().resolution.clone().unwrap();
    let forged = |resolutions: Vec<(&str, &IntentResolution)>| {
        encoding::encode_as(
            INTENT_VERSION,
            &SnapshotRef {
                config: ledger.config().into(),
                rng: BackoffRng::new(0),
                intents: ledger.iter().collect(),
                resolutions,
            },
        )
    };
    const WHAT: DecodeError = DecodeError::Invalid {
        what: "ledger snapshot",
    };
    assert_eq!(
        Ledger::restore(&forged(vec![("nope", &resolution)])),
        Err(WHAT)
    );
    assert_eq!(
        Ledger::restore(&forged(vec![(&key, &resolution), (&key, &resolution)])),
        Err(WHAT),
        "one intent resolved twice"
    );
    assert!(Ledger::restore(&forged(vec![(&other, &resolution)])).is_ok());
    let done = ledger
        .begin("pay", b"p3".to_vec(), fingerprint(), DEADLINE, [3; 16])
        .unwrap()
        .key
        .clone();
    assert_eq!(ledger.due(DEADLINE).len(), 1);
    ledger.on_reply(&done, reply(200), DEADLINE).unwrap();
    let bytes = encoding::encode_as(
        INTENT_VERSION,
        &SnapshotRef {
            config: ledger.config().into(),
            rng: BackoffRng::new(0),
            intents: ledger.iter().collect(),
            resolutions: vec![(&done, &resolution)],
        },
    );
    assert_eq!(
        Ledger::restore(&bytes),
        Err(WHAT),
        "a resolution of a completed intent"
    );
}

/// Version 3; key, `pay`, payload, fingerprint, state 5 (expired), attempts 0, created
/// 1000, next attempt 1000, deadline 91000, no status, no outcome; resolution 01, variant
/// 2 (not executed), reason (20 bytes), resolved at 91000.
const GOLDEN_RESOLVED_INTENT: &str = concat!(
    "032430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0500e8",
    "07e807f8c60500000102146e6f74206f6e207468652073746174656d656e74f8c605",
);

#[test]
fn state_snapshot_and_intent_records_restore_as_the_whole_snapshot() {
    let ledger = small_ledger();
    let state = ledger.state_snapshot();
    let whole = Ledger::restore(&ledger.snapshot()).unwrap();
    // The state is a snapshot that holds no intent: version, settings, jitter, no intents,
    // no resolutions.
    assert_eq!(
        hex(&state),
        alloc::format!("{}0000", &GOLDEN_SNAPSHOT[..GOLDEN_STATE_LEN * 2])
    );
    assert!(Ledger::restore(&state).unwrap().is_empty());

    let records: Vec<Vec<u8>> = ledger.iter().map(Intent::encode).collect();
    let decoded = || records.iter().map(|r| Intent::decode(r).unwrap());
    assert_eq!(Ledger::restore_parts(&state, decoded()).unwrap(), whole);
    // Any order of records, and the whole snapshot as state with no records.
    assert_eq!(
        Ledger::restore_parts(&state, decoded().rev()).unwrap(),
        whole
    );
    assert_eq!(
        Ledger::restore_parts(&ledger.snapshot(), []).unwrap(),
        whole
    );

    const WHAT: DecodeError = DecodeError::Invalid {
        what: "ledger intents",
    };
    let first = decoded().next().unwrap();
    assert_eq!(
        Ledger::restore_parts(&state, [first.clone(), first.clone()]),
        Err(WHAT),
        "two records with one key"
    );
    assert_eq!(
        Ledger::restore_parts(&ledger.snapshot(), [first.clone()]),
        Err(WHAT),
        "a record of an intent the state already holds"
    );
    let bad = Intent {
        operation: String::new(),
        ..first
    };
    assert_eq!(Ledger::restore_parts(&state, [bad]), Err(WHAT));
    assert_eq!(Ledger::restore_parts(&[], []), Err(DecodeError::Empty));
}

/// Bytes of [`GOLDEN_SNAPSHOT`] before its intents: version, settings, jitter state.
const GOLDEN_STATE_LEN: usize = 21;

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
    let twice = encoding::encode_as(
        INTENT_VERSION,
        &SnapshotRef {
            config: ledger.config().into(),
            rng: BackoffRng::new(0),
            intents: vec![intent, intent],
            resolutions: vec![],
        },
    );
    assert_eq!(
        Ledger::restore(&twice),
        Err(DecodeError::Invalid { what: WHAT })
    );
    let mut intents: Vec<&Intent> = ledger.iter().collect();
    intents.reverse();
    let reversed = encoding::encode_as(
        INTENT_VERSION,
        &SnapshotRef {
            config: ledger.config().into(),
            rng: BackoffRng::new(0),
            intents,
            resolutions: vec![],
        },
    );
    assert_eq!(
        Ledger::restore(&reversed),
        Err(DecodeError::Invalid { what: WHAT }),
        "snapshot writes intents by key, so another order is damage"
    );
    let bad_config = LedgerConfig {
        base_backoff_ms: 0,
        ..config()
    };
    let unusable = encoding::encode_as(
        INTENT_VERSION,
        &SnapshotRef {
            config: (&bad_config).into(),
            rng: BackoffRng::new(0),
            intents: vec![],
            resolutions: vec![],
        },
    );
    assert_eq!(
        Ledger::restore(&unusable),
        Err(DecodeError::Invalid { what: WHAT })
    );
}

/// A ledger whose one intent got idem's 503 `unknown`: the intent stops as Unknown.
fn unknown_ledger() -> (Ledger, String) {
    let mut ledger = Ledger::new(config()).unwrap();
    let key = ledger
        .begin("pay", b"p1".to_vec(), fingerprint(), CREATED, [1; 16])
        .unwrap()
        .key
        .clone();
    assert_eq!(ledger.due(CREATED).len(), 1);
    let problem = crate::http::Problem::unknown(60).to_json().into_bytes();
    let effect = ledger
        .on_reply(
            &key,
            Reply {
                status: 503,
                body: problem.clone(),
                retry_at: Some(CREATED.plus_millis(60_000)),
            },
            CREATED,
        )
        .unwrap();
    assert_eq!(effect, Effect::Finished(IntentState::Unknown));
    let intent = ledger.get(&key).unwrap();
    assert_eq!(intent.state, IntentState::Unknown);
    assert_eq!(intent.last_status, Some(503));
    assert_eq!(intent.outcome, Some(crate::Outcome::new(503, problem)));
    (ledger, key)
}

#[test]
fn an_unknown_intent_is_never_sent_again_and_waits_for_a_resolution() {
    let (mut ledger, key) = unknown_ledger();
    assert_eq!(ledger.next_wakeup(), None, "nothing to wake up for");
    assert!(ledger.due(DEADLINE).is_empty(), "not sent, not expired");
    assert_eq!(ledger.get(&key).unwrap().state, IntentState::Unknown);
    assert!(ledger.get(&key).unwrap().needs_resolution());
    assert_eq!(
        ledger.forget(&key),
        Err(LedgerError::Unresolved { key: key.clone() })
    );
    // A late reply changes nothing: the intent is terminal.
    assert_eq!(
        ledger.on_reply(&key, reply(200), CREATED).unwrap(),
        Effect::Ignored
    );
    let resolved = ledger
        .resolve(
            &key,
            ResolvedAs::Completed,
            "order 7 is in the books",
            DEADLINE,
        )
        .unwrap();
    assert_eq!(resolved.state, IntentState::Unknown);
    assert!(resolved.is_settled());
    assert_eq!(Intent::decode(&resolved.encode()).unwrap(), *resolved);
    assert_eq!(Ledger::restore(&ledger.snapshot()).unwrap(), ledger);
    assert!(ledger.forget(&key).is_ok());
}

#[test]
fn unknown_intent_golden_bytes_and_no_unknown_before_version_3() {
    let (ledger, _) = unknown_ledger();
    let intent = ledger.iter().next().unwrap();
    let bytes = intent.encode();
    assert_eq!(hex(&bytes), GOLDEN_UNKNOWN_INTENT);
    assert_eq!(&Intent::decode(&bytes).unwrap(), intent);
    // Versions 1 and 2 had no state Unknown: such bytes are damage, never misread.
    let mut v2 = bytes.clone();
    v2[0] = 2;
    assert_eq!(
        Intent::decode(&v2),
        Err(DecodeError::Malformed { what: "intent" })
    );
    let mut v1 = bytes[..bytes.len() - 1].to_vec();
    v1[0] = 1;
    assert_eq!(
        Intent::decode(&v1),
        Err(DecodeError::Malformed { what: "intent" })
    );
    let mut snapshot = ledger.snapshot();
    assert_eq!(snapshot[0], 3);
    assert_eq!(Ledger::restore(&snapshot).unwrap(), ledger);
    snapshot[0] = 2;
    assert_eq!(
        Ledger::restore(&snapshot),
        Err(DecodeError::Malformed {
            what: "ledger snapshot"
        })
    );
}

/// Version 3; key, `pay`, payload, fingerprint, state 6 (unknown), attempts 1, created
/// 1000, next attempt 1000, deadline 91000, last status 503, outcome (503, idem's
/// problem `unknown`), no resolution (00).
const GOLDEN_UNKNOWN_INTENT: &str = concat!(
    "032430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
    "6179027031cbc7bae751ed7b3e1538634d7361e85a2e583a00c1677b954598773c2741167a0601e8",
    "07e807f8c60501f70301ee07c8017b2274797065223a2261626f75743a626c616e6b222c22746974",
    "6c65223a225365727669636520556e617661696c61626c65222c22737461747573223a3530332c22",
    "64657461696c223a22746865206f7574636f6d65206f662074686520726571756573742077697468",
    "2074686973204964656d706f74656e63792d4b657920697320756e6b6e6f776e20756e74696c2069",
    "74206973207265636f6e63696c65643b207265747279206c61746572222c226964656d706f74656e",
    "6379223a22756e6b6e6f776e227d00",
);
