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
    // Version 1, written before resolutions, still restores: to the same ledger.
    let old = unhex(GOLDEN_SNAPSHOT_V1);
    assert_eq!(
        Ledger::restore(&old).unwrap(),
        Ledger::restore(&bytes).unwrap()
    );
    assert_eq!(
        Ledger::restore(&old).unwrap().snapshot(),
        Ledger::restore(&bytes).unwrap().snapshot()
    );
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Version 2; config (100000, 10000, 100, 1600, seed 7, then the ignored switch byte 0);
/// jitter state; two intents: `pay` completed with 200 "ok", `refund` in flight (attempt
/// 2, last status 503); then the resolutions by key, none (00).
const GOLDEN_SNAPSHOT: &str = concat!(
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
    // Version 1, before resolutions, decodes to the same intent.
    assert_eq!(&Intent::decode(&unhex(GOLDEN_INTENT_V1)).unwrap(), intent);

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
    newer[0] = 3;
    assert_eq!(
        Intent::decode(&newer),
        Err(DecodeError::NewerFormat {
            found: 3,
            supported: 2
        })
    );
}

/// Version 2; key, operation, payload, fingerprint (32 bytes), state 2 (completed),
/// attempts 1, created 1000, next attempt 1000, deadline 91000, last status 200, outcome
/// (200, "ok"), no resolution (00).
const GOLDEN_INTENT: &str = concat!(
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

/// Version 2; key, `pay`, payload, fingerprint, state 5 (expired), attempts 0, created
/// 1000, next attempt 1000, deadline 91000, no status, no outcome; resolution 01, variant
/// 2 (not executed), reason (20 bytes), resolved at 91000.
const GOLDEN_RESOLVED_INTENT: &str = concat!(
    "022430303030303030302d303365382d373130312d383130312d3031303130313031303130310370",
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
