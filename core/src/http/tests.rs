//! Unit tests of the HTTP mapping: key parsing, request fingerprints, the decision table,
//! the problem documents (golden files in `testdata/http/`) and the stored response's
//! golden bytes.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::protocol::Decision;
use crate::{Fingerprint, Generation, Outcome, State, Timestamp, Verdict};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

#[test]
fn keys_as_structured_field_strings_or_bare_tokens() {
    let uuid = "01890a5d-ac96-774b-bcce-b302099a8057";
    let quoted = alloc::format!("\"{uuid}\"");
    assert_eq!(parse_key(quoted.as_bytes()).unwrap(), uuid);
    assert_eq!(parse_key(uuid.as_bytes()).unwrap(), uuid);
    assert_eq!(parse_key(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
    assert_eq!(parse_key(br#""k";v=1"#).unwrap(), "k");
    assert_eq!(parse_key(b"  \"k\" \t").unwrap(), "k");
    assert_eq!(parse_key(b"\"with space\"").unwrap(), "with space");
    assert_eq!(parse_key(b"bXktYjY0LWtleQ==").unwrap(), "bXktYjY0LWtleQ==");
    let cases: [(&[u8], KeyError); 10] = [
        (b"", KeyError::Empty),
        (b"  ", KeyError::Empty),
        (b"\"", KeyError::Unterminated),
        (b"\"\"", KeyError::Empty),
        (b"\"open", KeyError::Unterminated),
        (br#""a\nb""#, KeyError::BadEscape { offset: 2 }),
        (b"\"k\" x", KeyError::TrailingText { offset: 4 }),
        (
            "\"caf\u{e9}\"".as_bytes(),
            KeyError::BadByte {
                offset: 4,
                byte: 0xc3,
            },
        ),
        (b"\"a\", \"b\"", KeyError::Repeated { count: 2 }),
        (
            b"two words",
            KeyError::BadByte {
                offset: 3,
                byte: b' ',
            },
        ),
    ];
    for (value, error) in cases {
        assert_eq!(
            parse_key(value),
            Err(error),
            "{:?}",
            String::from_utf8_lossy(value)
        );
    }
}

#[test]
fn one_key_per_request_of_at_most_255_bytes() {
    assert_eq!(key_from_fields([]), Ok(None));
    assert_eq!(key_from_fields([&b"\"k\""[..]]), Ok(Some("k".into())));
    assert_eq!(
        key_from_fields([&b"\"k\""[..], &b"\"k\""[..]]),
        Err(KeyError::Repeated { count: 2 })
    );
    let longest = "k".repeat(255);
    assert_eq!(parse_key(longest.as_bytes()).unwrap(), longest);
    let over = alloc::format!("\"{}\"", "k".repeat(256));
    assert_eq!(
        parse_key(over.as_bytes()),
        Err(KeyError::TooLong { len: 256 })
    );
    assert_eq!(
        KeyError::TooLong { len: 256 }.to_string(),
        "Idempotency-Key: 256 bytes, at most 255"
    );
}

#[test]
fn a_sent_key_reads_back_as_itself() {
    let every: String = (0x20u8..=0x7e).map(char::from).collect();
    for key in [
        "k",
        "01890a5d-ac96-774b-bcce-b302099a8057",
        r#"a"b\c"#,
        &every,
    ] {
        let value = key_field_value(key).unwrap();
        assert!(value.starts_with('"') && value.ends_with('"'), "{value}");
        assert_eq!(parse_key(value.as_bytes()).unwrap(), key);
    }
    assert_eq!(key_field_value(r#"a"b\c"#).unwrap(), r#""a\"b\\c""#);
    assert!(key_field_value("").is_err());
    assert!(key_field_value("caf\u{e9}").is_err());
    assert!(key_field_value(&"k".repeat(256)).is_err());
}

fn parts<'r>(method: &'r str, body: &'r [u8], json: bool) -> RequestParts<'r> {
    RequestParts {
        method,
        path: "/orders",
        content_type: json.then_some(&b"application/json; charset=utf-8"[..]),
        body,
        headers: &[],
    }
}

#[test]
fn a_json_body_is_fingerprinted_canonically_other_bodies_as_bytes() {
    let a = parts("POST", br#"{"item":"tea","qty":2}"#, true);
    let b = parts("POST", b"{ \"qty\": 2, \"item\": \"tea\" }", true);
    assert_eq!(a.fingerprint(&[]), b.fingerprint(&[]));
    let raw_a = parts("POST", br#"{"item":"tea","qty":2}"#, false);
    let raw_b = parts("POST", b"{ \"qty\": 2, \"item\": \"tea\" }", false);
    assert_ne!(raw_a.fingerprint(&[]), raw_b.fingerprint(&[]));
    assert_ne!(
        a.fingerprint(&[]),
        raw_a.fingerprint(&[]),
        "json and bytes differ"
    );
    assert_ne!(
        a.fingerprint(&[]),
        parts("PUT", br#"{"item":"tea","qty":2}"#, true).fingerprint(&[])
    );
    let traced = parts("POST", br#"{"item":"tea","qty":2,"trace":"x1"}"#, true);
    assert_eq!(traced.fingerprint(&["/trace"]), a.fingerprint(&[]));
    // The fields, so that a receiver in another language computes the same bytes.
    let expected = Fingerprint::of_fields(&[
        ("method", b"POST"),
        ("path", b"/orders"),
        ("json", br#"{"item":"tea","qty":2}"#),
    ])
    .unwrap();
    assert_eq!(a.fingerprint(&[]).unwrap(), expected);
}

#[test]
fn configured_headers_are_part_of_the_fingerprint() {
    let plain = parts("POST", b"x", false);
    let with = |value: &'static [u8]| RequestParts {
        headers: alloc::boxed::Box::leak(vec![("Currency", value)].into_boxed_slice()),
        ..plain
    };
    assert_ne!(with(b"EUR").fingerprint(&[]), with(b"USD").fingerprint(&[]));
    assert_ne!(with(b"EUR").fingerprint(&[]), plain.fingerprint(&[]));
    let expected = Fingerprint::of_fields(&[
        ("method", b"POST"),
        ("path", b"/orders"),
        ("body", b"x"),
        ("header:currency", b"EUR"),
    ])
    .unwrap();
    assert_eq!(with(b"EUR").fingerprint(&[]).unwrap(), expected);
}

#[test]
fn a_malformed_json_body_is_an_error_that_names_the_body() {
    let not_utf8 = parts("POST", b"{\"a\":\"\xff\"}", true);
    assert_eq!(
        not_utf8.fingerprint(&[]),
        Err(RequestError::BodyNotUtf8 { offset: 6 })
    );
    let not_json = parts("POST", b"{\"a\":", true)
        .fingerprint(&[])
        .unwrap_err();
    assert!(not_json.to_string().starts_with("body: "), "{not_json}");
    for (content_type, json) in [
        (&b"application/json"[..], true),
        (b"Application/JSON ; charset=utf-8", true),
        (b"application/problem+json", true),
        (b"text/plain", false),
        (b"application/jsonx", false),
    ] {
        assert_eq!(is_json(content_type), json, "{content_type:?}");
    }
}

const NOW: Timestamp = Timestamp(1_700_000_000_000);

fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a [u8]> {
    answer
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

#[test]
fn the_decision_table() {
    let config = AnswerConfig::default();
    let claimed = Decision::Claimed {
        generation: Generation(1),
        lease_until: NOW,
    };
    assert_eq!(answer(&claimed, NOW, &config), None);

    let in_progress = answer(
        &Decision::InProgress {
            generation: Generation(1),
            lease_until: NOW.plus_millis(2_001),
        },
        NOW,
        &config,
    )
    .unwrap();
    assert_eq!(in_progress.status, 409);
    assert_eq!(header(&in_progress, "retry-after"), Some(&b"3"[..]));
    assert_eq!(
        header(&in_progress, "content-type"),
        Some(PROBLEM_JSON.as_bytes())
    );

    let conflict = Decision::Conflict {
        state: State::Succeeded,
        stored_fingerprint: Fingerprint::of_bytes(b"other"),
    };
    let conflict = answer(&conflict, NOW, &config).unwrap();
    assert_eq!(conflict.status, 422);
    assert_eq!(header(&conflict, "retry-after"), None);

    let unknown = Decision::NeedsReconciliation {
        generation: Generation(1),
    };
    let unknown = answer(&unknown, NOW, &config).unwrap();
    assert_eq!(unknown.status, 503);
    assert_eq!(header(&unknown, "retry-after"), Some(&b"60"[..]));
}

#[test]
fn a_replay_carries_the_stored_response_and_says_so() {
    let stored = StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".into(), b"application/json".to_vec()),
            ("location".into(), b"/orders/7".to_vec()),
        ],
        body: br#"{"order":7}"#.to_vec(),
    };
    let decision = Decision::Replay {
        verdict: Verdict::Succeeded,
        outcome: stored.to_outcome(),
        completed_at: NOW,
    };
    let original = answer(&decision, NOW, &AnswerConfig::default()).unwrap();
    assert_eq!(original.status, 201);
    assert_eq!(original.body, stored.body);
    assert_eq!(header(&original, "location"), Some(&b"/orders/7"[..]));
    assert_eq!(header(&original, IDEMPOTENT_REPLAYED), Some(&b"true"[..]));
    let ok = AnswerConfig {
        replay_status: ReplayStatus::Ok,
        ..AnswerConfig::default()
    };
    assert_eq!(answer(&decision, NOW, &ok).unwrap().status, 200);
    // A definitive 4xx keeps its status under `Ok`: 200 would read as success.
    let failed = StoredResponse {
        status: 404,
        headers: Vec::new(),
        body: b"no such item".to_vec(),
    };
    assert_eq!(replay(&failed.to_outcome(), &ok).status, 404);
    // An outcome written without this encoding replays as its code and bytes.
    let plain = replay(&Outcome::new(201, "plain"), &AnswerConfig::default());
    assert_eq!((plain.status, plain.body.as_slice()), (201, &b"plain"[..]));
}

#[test]
fn stored_response_golden_bytes() {
    let stored = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: b"{}".to_vec(),
    };
    let outcome = stored.to_outcome();
    assert_eq!(outcome.code, 201);
    assert_eq!(
        hex(&outcome.body),
        "004948\
         01\
         0001\
         000c636f6e74656e742d74797065\
         000000106170706c69636174696f6e2f6a736f6e\
         7b7d"
    );
    assert_eq!(StoredResponse::from_outcome(&outcome), Some(stored));
    // Another version, a truncated header, a code that is no status: not this encoding.
    let mut bumped = outcome.clone();
    bumped.body[3] = 2;
    assert_eq!(StoredResponse::from_outcome(&bumped), None);
    let mut cut = outcome.clone();
    cut.body.truncate(10);
    assert_eq!(StoredResponse::from_outcome(&cut), None);
    assert_eq!(
        StoredResponse::from_outcome(&Outcome::new(-1, outcome.body)),
        None
    );
}

/// Every problem document, against its golden file in `testdata/http/`.
#[test]
fn problem_documents_golden() {
    let cases = [
        (
            Problem::key_missing(),
            include_str!("../../../testdata/http/key-missing.json"),
        ),
        (
            Problem::key_malformed(&KeyError::Unterminated),
            include_str!("../../../testdata/http/key-malformed.json"),
        ),
        (
            Problem::key_malformed(&KeyError::Repeated { count: 2 }),
            include_str!("../../../testdata/http/key-repeated.json"),
        ),
        (
            Problem::body_malformed(&RequestError::BodyNotUtf8 { offset: 6 }),
            include_str!("../../../testdata/http/body-malformed.json"),
        ),
        (
            Problem::body_too_large(65_536),
            include_str!("../../../testdata/http/body-too-large.json"),
        ),
        (
            Problem::in_progress(NOW.plus_millis(1_500), NOW),
            include_str!("../../../testdata/http/in-progress.json"),
        ),
        (
            Problem::conflict(),
            include_str!("../../../testdata/http/conflict.json"),
        ),
        (
            Problem::unknown(60),
            include_str!("../../../testdata/http/unknown.json"),
        ),
        (
            Problem::forgotten(),
            include_str!("../../../testdata/http/forgotten.json"),
        ),
    ];
    // `IDEM_BLESS=1` rewrites the files after a deliberate change of a document.
    if std::env::var_os("IDEM_BLESS").is_some() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/http");
        for (problem, _) in &cases {
            let name = match problem.code {
                "key-malformed" if problem.detail.contains("values") => "key-repeated",
                code => code,
            };
            std::fs::write(
                alloc::format!("{dir}/{name}.json"),
                problem.to_json() + "\n",
            )
            .unwrap();
        }
        return;
    }
    for (problem, golden) in cases {
        assert_eq!(problem.to_json(), golden.trim_end(), "{}", problem.code);
    }
}

#[test]
fn problem_detail_is_escaped_json() {
    let problem = Problem::new(400, "x", "a \"quote\", a \\ and a\ttab\u{1}");
    assert_eq!(
        problem.to_json(),
        r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"a \"quote\", a \\ and a\ttab\u0001","idempotency":"x"}"#
    );
}
