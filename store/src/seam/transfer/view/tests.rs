//! Unit tests of the JSON views: every field's rule, round trips, and the errors that
//! name the field.

use super::*;

fn id() -> RecordId {
    RecordId::new("shop", "credit", "k-1").unwrap()
}

fn settled() -> Record {
    Record {
        fingerprint: Fingerprint([0xab; 32]),
        generation: Generation(7),
        created_at: Timestamp(1_000),
        updated_at: Timestamp(1_100),
        status: Status::Settled {
            verdict: Verdict::Failed,
            outcome: Outcome::new(-3, vec![0, 255, 10]),
            completed_at: Timestamp(1_100),
            expires_at: Timestamp(9_000),
        },
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

#[test]
fn views_round_trip_every_state() {
    let base = settled();
    let records = [
        base.clone(),
        Record {
            status: Status::Pending {
                lease_until: Timestamp(31_000),
            },
            ..base.clone()
        },
        Record {
            status: Status::Unknown,
            ..base.clone()
        },
        base.tombstone(5_000).unwrap(),
    ];
    for record in records {
        let json = record_json(&id(), &record);
        let view = RecordView::from_json(&object(json)).unwrap();
        assert_eq!(view.to_record().unwrap(), (id(), record));
    }
}

#[test]
fn the_json_names_follow_the_cli_contract() {
    let text = serde_json::to_string(&RecordView::new(&id(), &settled())).unwrap();
    let fp = "ab".repeat(32);
    assert_eq!(
        text,
        format!(
            r#"{{"tenant":"shop","operation":"credit","key":"k-1","state":"failed","generation":7,"fingerprint":"{fp}","created_at":1000,"updated_at":1100,"expires_at":9000,"completed_at":1100,"code":-3,"outcome_b64":"AP8K"}}"#
        )
    );
    assert_eq!(
        record_json(&id(), &settled()),
        serde_json::from_str::<Value>(&text).unwrap()
    );
    let tombstone = settled().tombstone(5_000).unwrap();
    let text = serde_json::to_string(&RecordView::new(&id(), &tombstone)).unwrap();
    assert_eq!(
        text,
        format!(
            r#"{{"tenant":"shop","operation":"credit","key":"k-1","state":"forgotten","generation":7,"fingerprint":"{fp}","created_at":1000,"updated_at":9000,"verdict":"failed","expires_at":14000,"completed_at":1100}}"#
        )
    );
    let mut bad = object(record_json(&id(), &tombstone));
    bad.insert("verdict".into(), "maybe".into());
    assert_eq!(
        RecordView::from_json(&bad)
            .and_then(|v| v.to_record())
            .unwrap_err()
            .to_string(),
        r#"verdict: "maybe" is not one of succeeded, failed"#
    );
    bad.remove("verdict");
    assert_eq!(
        RecordView::from_json(&bad)
            .and_then(|v| v.to_record())
            .unwrap_err()
            .to_string(),
        "verdict: missing, a forgotten record needs it"
    );
}

#[test]
fn bad_fields_are_named() {
    let good = object(record_json(&id(), &settled()));
    let cases: [(&str, Value, &str); 9] = [
        (
            "fingerprint",
            "abc".into(),
            "fingerprint: 3 characters, expected 64 hex digits (0-9, a-f)",
        ),
        (
            "state",
            "done".into(),
            r#"state: "done" is not one of pending, succeeded, failed, unknown, forgotten"#,
        ),
        ("generation", 0.into(), "generation: 0, must be at least 1"),
        (
            "created_at",
            "x".into(),
            r#"created_at: expected an integer from 0 to 2^64-1, found "x""#,
        ),
        (
            "code",
            (1u64 << 40).into(),
            "code: expected a 32-bit integer, found 1099511627776",
        ),
        (
            "outcome_b64",
            "!!".into(),
            "outcome_b64: not standard base64: Invalid symbol 33, offset 0.",
        ),
        (
            "key",
            "a\nb".into(),
            "key: byte 0x0a at offset 1 is not printable ASCII (0x20-0x7E)",
        ),
        (
            "lease_until",
            5.into(),
            "lease_until: present, but a failed record has none",
        ),
        (
            "verdict",
            "failed".into(),
            "verdict: present, but a failed record has none",
        ),
    ];
    for (field, value, message) in cases {
        let mut object = good.clone();
        object.insert(field.into(), value);
        let err = RecordView::from_json(&object).and_then(|v| v.to_record());
        assert_eq!(err.unwrap_err().to_string(), message, "{field}");
    }
    let mut missing = good.clone();
    missing.remove("expires_at");
    assert_eq!(
        RecordView::from_json(&missing)
            .unwrap()
            .to_record()
            .unwrap_err()
            .to_string(),
        "expires_at: missing, a failed record needs it"
    );
    let mut extra = good;
    extra.insert("extra".into(), 1.into());
    assert_eq!(
        RecordView::from_json(&extra).unwrap_err().to_string(),
        r#"record: unknown field "extra""#
    );
}

#[test]
fn each_field_is_read_as_its_type_by_name() {
    let good = object(record_json(&id(), &settled()));
    // The good object with `field` set to `value`, or removed for `None`.
    let read = |field: &str, value: Option<Value>| {
        let mut object = good.clone();
        match value {
            Some(value) => object.insert(field.into(), value),
            None => object.remove(field),
        };
        RecordView::from_json(&object).map_err(|e| e.to_string())
    };
    let cases: [(&str, Option<Value>, &str); 5] = [
        ("tenant", None, "tenant: missing"),
        ("key", Some(5.into()), "key: expected a string, found 5"),
        (
            "generation",
            Some((-1).into()),
            "generation: expected an integer from 0 to 2^64-1, found -1",
        ),
        (
            "completed_at",
            Some(1.5.into()),
            "completed_at: expected an integer from 0 to 2^64-1, found 1.5",
        ),
        (
            "outcome_b64",
            Some(true.into()),
            "outcome_b64: expected a string, found true",
        ),
    ];
    for (field, value, message) in cases {
        assert_eq!(read(field, value), Err(message.into()), "{field}");
    }
    // An optional field may be null or absent: the view has none.
    let null = read("code", Some(Value::Null)).unwrap();
    let absent = read("code", None).unwrap();
    assert_eq!((null.code, absent.code), (None, None));
    assert_eq!(
        null.to_record().unwrap_err().to_string(),
        "code: missing, a failed record needs it"
    );
}
