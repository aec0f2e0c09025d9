//! The JS bindings, run as wasm in Node and in headless Chromium (wasm-bindgen-test):
//! the shared fingerprint vectors, the client's life cycle and the in-memory receiver,
//! each through the same exported functions JavaScript calls.
#![cfg(target_arch = "wasm32")]

use idem_wasm::sys::{JsString, Uint8Array};
use idem_wasm::types::{
    BytesInput, FieldsInput, GenerationInput, OutcomeInput, Paths, RecordIdInput, Reply,
    ResolvedAsInput,
};
use idem_wasm::{
    IdemClient, Machine, MemoryReceiver, canonical_json, fingerprint_bytes, fingerprint_fields,
    fingerprint_json,
};
use js_sys::{Array, JSON, Reflect};
use serde_json::Value;
use wasm_bindgen::{JsCast, JsError, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;

const VECTORS: &str = include_str!("../../testdata/fingerprints.json");

/// A JS string from Rust text.
fn s(text: &str) -> JsString {
    JsString::from(text)
}

/// A JS value from JSON text.
fn js<T: JsCast>(json: &str) -> T {
    JSON::parse(json).expect("valid JSON").unchecked_into()
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &name.into()).expect("an object")
}

fn text(object: &JsValue, name: &str) -> String {
    get(object, name)
        .as_string()
        .unwrap_or_else(|| panic!("{name} is a string"))
}

fn num(object: &JsValue, name: &str) -> f64 {
    get(object, name)
        .as_f64()
        .unwrap_or_else(|| panic!("{name} is a number"))
}

/// The message of the JS `Error` a binding threw.
fn message(err: JsError) -> String {
    let value: JsValue = err.into();
    let error: js_sys::Error = value.dyn_into().expect("a JS Error");
    error.message().into()
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn bytes(b: &[u8]) -> BytesInput {
    JsValue::from(Uint8Array::from(b)).unchecked_into()
}

fn vectors(kind: &str) -> Vec<Value> {
    let all: Value = serde_json::from_str(VECTORS).expect("testdata/fingerprints.json is JSON");
    let list = all[kind].as_array().expect("a list").clone();
    assert!(!list.is_empty());
    list
}

#[wasm_bindgen_test]
fn vectors_raw_bytes() {
    for case in vectors("bytes") {
        let got = fingerprint_bytes(bytes(&hex(case["hex"].as_str().unwrap()))).unwrap();
        assert_eq!(
            got,
            case["fingerprint"].as_str().unwrap(),
            "{}",
            case["name"]
        );
    }
    // A string counts as its UTF-8 bytes.
    let abc = fingerprint_bytes(JsValue::from_str("abc").unchecked_into()).unwrap();
    assert_eq!(abc, fingerprint_bytes(bytes(b"abc")).unwrap());
}

#[wasm_bindgen_test]
fn vectors_named_fields() {
    for case in vectors("fields") {
        let pairs: Array = case["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| {
                let value = Uint8Array::from(hex(pair[1].as_str().unwrap()).as_slice());
                JsValue::from(Array::of2(&pair[0].as_str().unwrap().into(), &value))
            })
            .collect();
        let got = fingerprint_fields(JsValue::from(pairs).unchecked_into());
        match case.get("error") {
            Some(error) => assert_eq!(message(got.unwrap_err()), error.as_str().unwrap()),
            None => assert_eq!(got.unwrap(), case["fingerprint"].as_str().unwrap()),
        }
    }
    // An object is fields by name, in any order.
    let object: FieldsInput = js(r#"{"to":"acct-9","amount":"100"}"#);
    let pairs: FieldsInput = js(r#"[["amount","100"],["to","acct-9"]]"#);
    assert_eq!(
        fingerprint_fields(object).unwrap(),
        fingerprint_fields(pairs).unwrap()
    );
}

#[wasm_bindgen_test]
fn vectors_canonical_json() {
    for case in vectors("json") {
        let name = &case["name"];
        let text = case["text"].as_str().unwrap();
        let paths = || -> Paths { js(&case["ignored"].to_string()) };
        match case.get("error") {
            Some(error) => {
                let err = fingerprint_json(&s(text), Some(paths())).unwrap_err();
                assert_eq!(message(err), error.as_str().unwrap(), "{name}");
            }
            None => {
                let canonical = canonical_json(&s(text), Some(paths())).unwrap();
                assert_eq!(canonical, case["canonical"].as_str().unwrap(), "{name}");
                let fingerprint = fingerprint_json(&s(text), Some(paths())).unwrap();
                assert_eq!(fingerprint, case["fingerprint"].as_str().unwrap(), "{name}");
            }
        }
    }
    // No paths at all is the same as an empty list.
    let none = fingerprint_json(&s("{}"), None).unwrap();
    assert_eq!(none, fingerprint_bytes(bytes(b"{}")).unwrap());
}

/// The JavaScript strings of the vectors, given as UTF-16 code units: lone surrogates are
/// refused with the message given, well-formed strings fingerprinted.
#[wasm_bindgen_test]
fn vectors_javascript_strings() {
    assert_eq!(string_vector_mismatches(), Vec::<String>::new());
}

/// Engines before ES2024 lack `String.prototype.isWellFormed`: the bindings then check
/// code unit by code unit, with the same answers.
#[wasm_bindgen_test]
fn vectors_javascript_strings_without_is_well_formed() {
    let string = Reflect::get(&js_sys::global(), &"String".into()).unwrap();
    let prototype: js_sys::Object = Reflect::get(&string, &"prototype".into())
        .unwrap()
        .unchecked_into();
    let native = Reflect::get(&prototype, &"isWellFormed".into()).unwrap();
    assert!(native.is_function(), "this engine has isWellFormed");
    assert!(Reflect::delete_property(&prototype, &"isWellFormed".into()).unwrap());
    let gone = !Reflect::has(&prototype, &"isWellFormed".into()).unwrap();
    let mismatches = string_vector_mismatches();
    // Put back before asserting, so that a failure here leaves the other tests alone.
    Reflect::set(&prototype, &"isWellFormed".into(), &native).unwrap();
    assert!(gone);
    assert_eq!(mismatches, Vec::<String>::new());
}

/// The string vectors whose answer is not the expected one, described.
fn string_vector_mismatches() -> Vec<String> {
    let mut mismatches = Vec::new();
    for case in vectors("strings") {
        let name = case["name"].as_str().unwrap();
        let code_units: Vec<u16> = case["units"]
            .as_str()
            .unwrap()
            .split(' ')
            .map(|u| u16::from_str_radix(u, 16).expect("hex code unit"))
            .collect();
        let string = units(&code_units);
        let got = match case["function"].as_str().unwrap() {
            "fingerprintJson" => fingerprint_json(&string, None),
            "canonicalJson" => canonical_json(&string, None),
            "fingerprintBytes" => fingerprint_bytes(JsValue::from(string).unchecked_into()),
            other => panic!("{name}: no function {other}"),
        };
        let got = got.map_err(message);
        let expected = match case.get("error") {
            Some(error) => Err(error.as_str().unwrap().to_owned()),
            None => Ok(case["fingerprint"].as_str().unwrap().to_owned()),
        };
        if got != expected {
            mismatches.push(format!("{name}: {got:?}, expected {expected:?}"));
        }
    }
    mismatches
}

fn client() -> IdemClient {
    IdemClient::new(Some(js(
        r#"{"serverRetentionMs":100000,"safetyMarginMs":10000,
        "baseBackoffMs":100,"maxBackoffMs":1600,"seed":42}"#,
    )))
    .unwrap()
}

fn reply(json: &str) -> Reply {
    js(json)
}

#[wasm_bindgen_test]
fn client_retries_with_one_key_until_a_definitive_reply() {
    let mut client = client();
    let random = Uint8Array::from([7u8; 16].as_slice());
    let begun = client
        .begin(
            &s("order"),
            JsValue::from_str(r#"{"sku":"A-1"}"#).unchecked_into(),
            1_000.0,
            Some(random),
        )
        .unwrap();
    let key = text(&begun, "key");
    assert_eq!(key, "00000000-03e8-7707-8707-070707070707");
    assert_eq!(
        text(&begun, "fingerprint"),
        fingerprint_bytes(bytes(br#"{"sku":"A-1"}"#)).unwrap()
    );
    assert_eq!(client.next_wakeup(), Some(1_000.0));

    let attempts: Array = client.due(1_000.0).unwrap().unchecked_into();
    assert_eq!(attempts.length(), 1);
    let first = attempts.get(0);
    assert_eq!(text(&first, "key"), key);
    assert_eq!(num(&first, "attempt"), 1.0);
    let payload: Uint8Array = get(&first, "payload").unchecked_into();
    assert_eq!(payload.to_vec(), br#"{"sku":"A-1"}"#);
    let view = client.get(&s(&key)).unwrap();
    assert_eq!(text(&view, "state"), "in_flight");

    // Lost reply: queued again after a backoff of at most the base.
    let effect = client.on_transport_error(&s(&key), 1_010.0).unwrap();
    assert_eq!(text(&effect, "effect"), "requeued");
    let at = num(&effect, "at");
    assert!((1_010.0..=1_110.0).contains(&at), "{at}");

    // A 409 with the server's lease end.
    let second: Array = client.due(at).unwrap().unchecked_into();
    assert_eq!(text(&second.get(0), "key"), key);
    assert_eq!(num(&second.get(0), "attempt"), 2.0);
    let effect = client
        .on_response(&s(&key), reply(r#"{"status":409,"retryAt":5000}"#), at)
        .unwrap();
    assert_eq!(num(&effect, "at"), 5_000.0);
    assert_eq!(client.next_wakeup(), Some(5_000.0));
    assert_eq!(
        client
            .due(4_999.0)
            .unwrap()
            .unchecked_into::<Array>()
            .length(),
        0
    );

    // The replay completes it with the stored outcome.
    let third: Array = client.due(5_000.0).unwrap().unchecked_into();
    assert_eq!(text(&third.get(0), "key"), key);
    let effect = client
        .on_response(
            &s(&key),
            reply(r#"{"status":201,"body":"order 17"}"#),
            5_001.0,
        )
        .unwrap();
    assert_eq!(text(&effect, "effect"), "finished");
    assert_eq!(text(&effect, "state"), "completed");
    let view = client.get(&s(&key)).unwrap();
    assert_eq!(text(&view, "state"), "completed");
    assert_eq!(num(&view, "attempts"), 3.0);
    assert_eq!(num(&view, "status"), 201.0);
    assert_eq!(num(&view, "deadline"), 91_000.0);
    let body: Uint8Array = get(&view, "body").unchecked_into();
    assert_eq!(body.to_vec(), b"order 17");
    assert_eq!(client.next_wakeup(), None);

    // A late duplicate changes nothing.
    let effect = client
        .on_response(&s(&key), reply(r#"{"status":500}"#), 5_002.0)
        .unwrap();
    assert_eq!(text(&effect, "effect"), "ignored");

    let list: Array = client.list().unchecked_into();
    assert_eq!(list.length(), 1);
    let forgotten = client.forget(&s(&key)).unwrap();
    assert_eq!(text(&forgotten, "key"), key);
    assert!(client.get(&s(&key)).unwrap().is_undefined());
    assert_eq!(client.size(), 0);
}

#[wasm_bindgen_test]
fn client_survives_a_reload_with_the_same_key() {
    let mut client = client();
    let begun = client
        .begin(&s("order"), bytes(b"pay"), 1_000.0, None)
        .unwrap();
    let key = text(&begun, "key");
    let _ = client.due(1_000.0).unwrap();
    let saved = client.snapshot();

    let mut reloaded = IdemClient::restore(&saved).unwrap();
    let view = reloaded.get(&s(&key)).unwrap();
    assert_eq!(text(&view, "state"), "queued", "in flight becomes queued");
    let attempts: Array = reloaded.due(2_000.0).unwrap().unchecked_into();
    assert_eq!(text(&attempts.get(0), "key"), key, "same key after reload");
    assert_eq!(num(&attempts.get(0), "attempt"), 2.0);

    let err = IdemClient::restore(&saved[..saved.len() - 1])
        .err()
        .unwrap();
    assert_eq!(message(err), "ledger snapshot: bytes do not decode");
}

fn resolved_as(name: &str) -> ResolvedAsInput {
    JsValue::from_str(name).unchecked_into()
}

#[wasm_bindgen_test]
fn an_expired_intent_is_forgotten_only_once_resolved() {
    let mut client = client();
    let key = text(
        &client
            .begin(&s("order"), bytes(b"pay"), 1_000.0, None)
            .unwrap(),
        "key",
    );
    let _ = client.due(1_000.0).unwrap();
    // No answer before the deadline (retention 100 s − margin 10 s).
    let effect = client.on_transport_error(&s(&key), 91_000.0).unwrap();
    assert_eq!(text(&effect, "state"), "expired");
    let _ = changes(&mut client);

    let err = client.forget(&s(&key)).err().unwrap();
    assert_eq!(
        message(err),
        format!(
            "key {key}: intent has no definitive answer (expired, or unknown at the receiver), its effect may or may not have happened; resolve it first (as completed, failed or not executed, with a reason)"
        )
    );
    assert_eq!(client.size(), 1);
    let err = client
        .resolve(&s(&key), resolved_as("lost"), &s("x"), 92_000.0)
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "resolvedAs: \"lost\", expected \"completed\", \"failed\" or \"not_executed\""
    );
    let err = client
        .resolve(&s(&key), resolved_as("failed"), &s(""), 92_000.0)
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "reason: 0 bytes, empty, say why (who confirmed it, where)"
    );
    assert!(changes(&mut client).is_empty(), "a refusal changed nothing");
    assert!(get(&client.get(&s(&key)).unwrap(), "resolution").is_undefined());

    let resolved = client
        .resolve(
            &s(&key),
            resolved_as("not_executed"),
            &s("not on the statement"),
            92_000.0,
        )
        .unwrap();
    assert_eq!(text(&resolved, "state"), "expired");
    let resolution = get(&resolved, "resolution");
    assert_eq!(text(&resolution, "resolvedAs"), "not_executed");
    assert_eq!(text(&resolution, "reason"), "not on the statement");
    assert_eq!(num(&resolution, "resolvedAt"), 92_000.0);
    assert_eq!(changes(&mut client), std::slice::from_ref(&key));
    // The resolution survives a reload, in both forms of storage.
    let reloaded = IdemClient::restore(&client.snapshot()).unwrap();
    let view = reloaded.get(&s(&key)).unwrap();
    assert_eq!(
        text(&get(&view, "resolution"), "reason"),
        "not on the statement"
    );
    let record = client.intent(&key).unwrap();
    let mut other = IdemClient::restore_parts(&client.ledger_state(), js("[]")).unwrap();
    assert!(other.put(&record).unwrap());

    let err = client
        .resolve(&s(&key), resolved_as("completed"), &s("again"), 93_000.0)
        .err()
        .unwrap();
    assert!(message(err).contains("resolved already (as not_executed)"));
    let forgotten = client.forget(&s(&key)).unwrap();
    assert_eq!(
        text(&get(&forgotten, "resolution"), "resolvedAs"),
        "not_executed"
    );
    assert_eq!(client.size(), 0);
}

/// The keys `takeChanges` reports, in order.
fn changes(client: &mut IdemClient) -> Vec<String> {
    let keys: Array = client.take_changes().unchecked_into();
    keys.iter().map(|k| k.as_string().unwrap()).collect()
}

#[wasm_bindgen_test]
fn client_kept_as_one_record_per_intent() {
    let mut leader = client();
    let sent = text(
        &leader
            .begin(&s("order"), bytes(b"a"), 1_000.0, None)
            .unwrap(),
        "key",
    );
    let _ = leader.due(1_000.0).unwrap();
    assert_eq!(
        changes(&mut leader),
        [sent.as_str(), sent.as_str()],
        "begun, then sent"
    );
    assert!(
        changes(&mut leader).is_empty(),
        "each call starts a new list"
    );

    // Another copy (a tab) makes an intent without keeping it, persists it, then puts it.
    let mut other = IdemClient::restore_parts(&leader.ledger_state(), js("[]")).unwrap();
    let prepared = other
        .prepare(&s("order"), bytes(b"b"), 1_001.0, None)
        .unwrap();
    let queued = text(&prepared, "key");
    let record: Uint8Array = get(&prepared, "intent").unchecked_into();
    assert!(
        other.get(&s(&queued)).unwrap().is_undefined(),
        "prepare keeps nothing"
    );
    assert!(other.put(&record.to_vec()).unwrap());
    assert!(leader.put(&record.to_vec()).unwrap());
    assert!(
        !leader.put(&record.to_vec()).unwrap(),
        "the same record again"
    );
    assert!(
        changes(&mut leader).is_empty(),
        "a put record is persisted already"
    );
    assert!(other.put(&leader.intent(&sent).unwrap()).unwrap());
    assert_eq!(
        text(&other.get(&s(&sent)).unwrap(), "state"),
        "in_flight",
        "an exact copy"
    );

    // The records restore the client, in any order, with the in-flight one queued again.
    let records = Array::new();
    records.push(&Uint8Array::from(
        leader.intent(&queued).unwrap().as_slice(),
    ));
    records.push(&Uint8Array::from(leader.intent(&sent).unwrap().as_slice()));
    let restored =
        IdemClient::restore_parts(&leader.ledger_state(), records.clone().unchecked_into())
            .unwrap();
    assert_eq!(
        restored.snapshot(),
        IdemClient::restore(&leader.snapshot()).unwrap().snapshot()
    );
    assert_eq!(text(&restored.get(&s(&sent)).unwrap(), "state"), "queued");
    assert!(leader.intent("no such key").is_none());

    // A finished intent: reported, and no late copy brings it back.
    let before = leader.intent(&sent).unwrap();
    let _ = leader
        .on_response(&s(&sent), reply(r#"{"status":201}"#), 1_002.0)
        .unwrap();
    let _ = leader
        .on_response(&s(&sent), reply(r#"{"status":500}"#), 1_003.0)
        .unwrap();
    assert_eq!(
        changes(&mut leader),
        [sent.as_str()],
        "an ignored reply changes nothing"
    );
    assert!(other.put(&leader.intent(&sent).unwrap()).unwrap());
    assert!(!other.put(&before).unwrap());
    assert_eq!(text(&other.get(&s(&sent)).unwrap(), "state"), "completed");
    let _ = leader.forget(&s(&sent)).unwrap();
    assert_eq!(
        changes(&mut leader),
        [sent.as_str()],
        "forgotten: delete its record"
    );

    records.push(&records.get(0));
    let twice = IdemClient::restore_parts(&leader.ledger_state(), records.unchecked_into());
    assert_eq!(
        message(twice.err().unwrap()),
        "ledger intents: decoded value breaks its rules"
    );
    let damaged = IdemClient::restore_parts(&leader.ledger_state(), js("[[1]]"));
    assert_eq!(
        message(damaged.err().unwrap()),
        "intents: an array, expected a Uint8Array or a string"
    );
    let damaged = IdemClient::restore_parts(&leader.ledger_state(), js("[\"\"]"));
    assert_eq!(
        message(damaged.err().unwrap()),
        "encoded value: empty, expected a version byte"
    );
}

#[wasm_bindgen_test]
fn keys_come_from_crypto_when_no_random_bytes_are_given() {
    let mut client = client();
    let a = text(
        &client
            .begin(&s("order"), bytes(b"1"), 1_000.0, None)
            .unwrap(),
        "key",
    );
    let b = text(
        &client
            .begin(&s("order"), bytes(b"1"), 1_000.0, None)
            .unwrap(),
        "key",
    );
    assert_ne!(a, b);
    for key in [&a, &b] {
        assert_eq!(key.len(), 36);
        assert!(key.starts_with("00000000-03e8-7"), "{key}");
    }
    // Without a seed the client draws one too.
    assert!(IdemClient::new(None).is_ok());
}

#[wasm_bindgen_test]
fn client_errors_are_js_errors_with_the_rust_message() {
    let bad = |json: &str| message(IdemClient::new(Some(js(json))).err().unwrap());
    assert_eq!(
        bad(r#"{"safetyMarginMs":0}"#),
        "safety_margin_ms: 0, must be at least 1 ms (it covers clock skew and time in flight)"
    );
    assert_eq!(
        bad(r#"{"serverRetentionMS":1}"#),
        "options: unknown member \"serverRetentionMS\", expected one of serverRetentionMs, \
         safetyMarginMs, baseBackoffMs, maxBackoffMs, seed"
    );
    assert_eq!(
        bad(r#"{"seed":-1}"#),
        "options.seed: -1, must be an integer from 0 to 2^53 - 1 (or a BigInt)"
    );
    assert_eq!(bad("[]"), "options: an array, expected an object");

    let mut client = client();
    let err = client
        .begin(
            &s(""),
            bytes(b"x"),
            1.0,
            Some(Uint8Array::from([1u8; 16].as_slice())),
        )
        .err()
        .unwrap();
    assert_eq!(message(err), "operation: empty, needs 1 to 255 bytes");
    let err = client
        .begin(&s("o"), bytes(b"x"), -1.0, None)
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "nowMs: -1, must be a number of milliseconds since the epoch, from 0 to 2^53 - 1"
    );
    let err = client
        .begin(
            &s("o"),
            bytes(b"x"),
            1.0,
            Some(Uint8Array::from([1u8; 3].as_slice())),
        )
        .err()
        .unwrap();
    assert_eq!(message(err), "random: 3 bytes, expected 16");
    let err = client
        .begin(&s("o"), JsValue::from(5).unchecked_into(), 1.0, None)
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "payload: 5, expected a Uint8Array or a string"
    );
    let err = client.on_transport_error(&s("nope"), 1.0).err().unwrap();
    assert_eq!(message(err), "key nope: no intent with this key");
    let key = text(
        &client.begin(&s("o"), bytes(b"x"), 1.0, None).unwrap(),
        "key",
    );
    let err = client.forget(&s(&key)).err().unwrap();
    assert_eq!(
        message(err),
        format!(
            "key {key}: intent is queued, only completed, failed, conflict or resolved expired or unknown intents may be forgotten"
        )
    );
    let err = client
        .on_response(&s(&key), reply(r#"{"body":"x"}"#), 1.0)
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "reply.status: missing, expected an HTTP status code"
    );
}

fn id(key: &str) -> RecordIdInput {
    js(&format!(
        r#"{{"tenant":"shop","operation":"order","key":"{key}"}}"#
    ))
}

fn generation(decision: &JsValue) -> GenerationInput {
    get(decision, "generation").unchecked_into()
}

#[wasm_bindgen_test]
fn receiver_claims_once_and_replays() {
    let mut receiver = MemoryReceiver::new(Some(js(r#"{"leaseMs":1000}"#))).unwrap();
    let fp = fingerprint_bytes(bytes(b"A-1")).unwrap();
    let other = fingerprint_bytes(bytes(b"B-2")).unwrap();

    let claimed = receiver.begin(id("k1"), &s(&fp), 10.0).unwrap();
    assert_eq!(text(&claimed, "decision"), "claimed");
    assert_eq!(num(&claimed, "generation"), 1.0);
    assert_eq!(num(&claimed, "leaseUntil"), 1_010.0);

    let busy = receiver.begin(id("k1"), &s(&fp), 20.0).unwrap();
    assert_eq!(text(&busy, "decision"), "in_progress");
    let conflict = receiver.begin(id("k1"), &s(&other), 20.0).unwrap();
    assert_eq!(text(&conflict, "decision"), "conflict");
    assert_eq!(text(&conflict, "storedFingerprint"), fp);

    let outcome: OutcomeInput = js(r#"{"code":201,"body":"order 17"}"#);
    receiver
        .complete(
            id("k1"),
            generation(&claimed),
            js("\"succeeded\""),
            outcome,
            30.0,
        )
        .unwrap();
    let replay = receiver.begin(id("k1"), &s(&fp), 40.0).unwrap();
    assert_eq!(text(&replay, "decision"), "replay");
    assert_eq!(text(&replay, "state"), "succeeded");
    assert_eq!(num(&replay, "code"), 201.0);
    let body: Uint8Array = get(&replay, "body").unchecked_into();
    assert_eq!(body.to_vec(), b"order 17");

    // A late executor is fenced.
    let err = receiver
        .release(id("k1"), generation(&claimed))
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "generation 1 is stale: the record is succeeded with generation 1; only the current pending generation may act"
    );

    // Lease runs out: unknown, then reconciled as never executed, then claimable again.
    let second = receiver.begin(id("k2"), &s(&fp), 100.0).unwrap();
    let unknown = receiver.begin(id("k2"), &s(&fp), 1_100.0).unwrap();
    assert_eq!(text(&unknown, "decision"), "unknown");
    assert_eq!(num(&unknown, "generation"), num(&second, "generation"));
    receiver
        .resolve(id("k2"), js("\"not_executed\""), None, 1_200.0)
        .unwrap();
    assert!(receiver.get(id("k2")).unwrap().is_undefined());
    let again = receiver.begin(id("k2"), &s(&fp), 1_300.0).unwrap();
    assert_eq!(text(&again, "decision"), "claimed");
    assert_eq!(num(&again, "generation"), 3.0);
    receiver
        .mark_unknown(id("k2"), generation(&again), 1_301.0)
        .unwrap();
    let record = receiver.get(id("k2")).unwrap();
    assert_eq!(text(&record, "state"), "unknown");

    let list: Array = receiver.list().unchecked_into();
    assert_eq!(list.length(), 2);
    let restored = MemoryReceiver::restore(&receiver.snapshot()).unwrap();
    assert_eq!(restored.generation(), 3.0);
    let record = restored.get(id("k1")).unwrap();
    assert_eq!(text(&record, "state"), "succeeded");
    assert_eq!(num(&record, "code"), 201.0);
}

#[wasm_bindgen_test]
fn receiver_tombstones_follow_their_option() {
    // Retention 1 s: swept at 10 s, the default keeps a tombstone (a retry is answered
    // forgotten), tombstoneRetentionMs 0 keeps none (a retry claims again).
    for (options, after_sweep) in [
        (r#"{"successRetentionMs":1000}"#, "forgotten"),
        (
            r#"{"successRetentionMs":1000,"tombstoneRetentionMs":0}"#,
            "claimed",
        ),
    ] {
        let mut receiver = MemoryReceiver::new(Some(js(options))).unwrap();
        let fp = fingerprint_bytes(bytes(b"A-1")).unwrap();
        let claimed = receiver.begin(id("k"), &s(&fp), 10.0).unwrap();
        receiver
            .complete(
                id("k"),
                generation(&claimed),
                js("\"succeeded\""),
                js(r#"{"code":201}"#),
                20.0,
            )
            .unwrap();
        assert_eq!(receiver.sweep(10_000.0, 100).unwrap(), 1, "{options}");
        let again = receiver.begin(id("k"), &s(&fp), 10_001.0).unwrap();
        assert_eq!(text(&again, "decision"), after_sweep, "{options}");
    }
}

#[wasm_bindgen_test]
fn receiver_errors_name_the_field() {
    let bad = |json: &str| message(MemoryReceiver::new(Some(js(json))).err().unwrap());
    assert_eq!(
        bad(r#"{"leaseMs":0}"#),
        "lease_ms: 0, must be at least 1 ms"
    );
    assert_eq!(
        bad(r#"{"onLeaseExpiry":"panic"}"#),
        "options.onLeaseExpiry: \"panic\", expected \"unknown\" or \"takeover\""
    );
    let mut receiver = MemoryReceiver::new(None).unwrap();
    let err = receiver.begin(id("k"), &s("abc"), 1.0).err().unwrap();
    assert_eq!(
        message(err),
        "fingerprint: 3 characters, expected 64 hex digits (0-9, a-f)"
    );
    let fp = fingerprint_bytes(bytes(b"x")).unwrap();
    let err = receiver
        .begin(
            js(r#"{"tenant":"t","operation":"o","key":"ü"}"#),
            &s(&fp),
            1.0,
        )
        .err()
        .unwrap();
    assert_eq!(
        message(err),
        "key: byte 0xc3 at offset 0 is not printable ASCII (0x20-0x7E)"
    );
    let err = receiver
        .begin(js(r#"{"tenant":"t","operation":"o"}"#), &s(&fp), 1.0)
        .err()
        .unwrap();
    assert_eq!(message(err), "id.key: missing, expected a string");
    let err = receiver
        .complete(
            id("k"),
            JsValue::from(1).unchecked_into(),
            js("\"succeeded\""),
            js(r#"{"code":200}"#),
            1.0,
        )
        .err()
        .unwrap();
    assert_eq!(message(err), "no record under this key");
}

/// A JS string from UTF-16 code units, well-formed or not.
fn units(code_units: &[u16]) -> JsString {
    js_sys::JsString::from_char_code(code_units).unchecked_into()
}

/// `text` with `\u{FFFF}` standing for the code unit `unit`: a way to write strings that
/// Rust cannot hold.
fn with_unit(text: &str, unit: u16) -> JsString {
    let code_units: Vec<u16> = text
        .encode_utf16()
        .map(|u| if u == 0xffff { unit } else { u })
        .collect();
    units(&code_units)
}

#[wasm_bindgen_test]
fn strings_that_are_not_well_formed_utf16_are_refused() {
    let lone = |field: &str, at: usize, unit: u16| {
        format!(
            "{field}: not well-formed UTF-16: code unit {at} is a lone surrogate (\\u{unit:04x})"
        )
    };
    // Lone surrogates converted to UTF-8 would all become U+FFFD: one fingerprint for
    // three different strings. Each is refused, and U+FFFD itself is fine.
    for unit in [0xd800, 0xdbff, 0xdc00, 0xdfff] {
        let text = with_unit("[\"a\u{ffff}b\"]", unit);
        let err = fingerprint_json(&text, None).unwrap_err();
        assert_eq!(message(err), lone("text", 3, unit));
        let err = canonical_json(&text, None).unwrap_err();
        assert_eq!(message(err), lone("text", 3, unit));
    }
    let replacement = fingerprint_json(&s("[\"a\u{fffd}b\"]"), None).unwrap();
    assert_eq!(
        replacement,
        fingerprint_bytes(bytes("[\"a\u{fffd}b\"]".as_bytes())).unwrap()
    );
    let err = canonical_json(&with_unit("{\"\u{ffff}\":1}", 0xdc00), None).unwrap_err();
    assert_eq!(message(err), lone("text", 2, 0xdc00));
    // Escaped in the JSON text, the core refuses it as before.
    let err = fingerprint_json(&s(r#"["\ud800"]"#), None).unwrap_err();
    assert_eq!(
        message(err),
        "json: escape \\ud800 at byte 2 is a lone surrogate, which I-JSON forbids"
    );
    // A pair is one character; a pair in the wrong order, or cut, is two lone halves.
    let pair = units(&[0x22, 0xd83d, 0xde00, 0x22]);
    assert_eq!(canonical_json(&pair, None).unwrap(), "\"\u{1f600}\"");
    let reversed = units(&[0x22, 0xde00, 0xd83d, 0x22]);
    assert_eq!(
        message(fingerprint_json(&reversed, None).unwrap_err()),
        lone("text", 1, 0xde00)
    );
    let cut = units(&[0x22, 0x61, 0x22, 0x20, 0xd83d]);
    assert_eq!(
        message(fingerprint_json(&cut, None).unwrap_err()),
        lone("text", 4, 0xd83d)
    );
    let paths: Paths = JsValue::from(Array::of1(&with_unit("/\u{ffff}", 0xd800))).unchecked_into();
    let err = fingerprint_json(&s("{}"), Some(paths)).unwrap_err();
    assert_eq!(message(err), lone("ignoredPaths[0]", 1, 0xd800));

    // Bytes given as a string, and fields.
    let err = fingerprint_bytes(JsValue::from(with_unit("x\u{ffff}", 0xdfff)).unchecked_into())
        .unwrap_err();
    assert_eq!(message(err), lone("bytes", 1, 0xdfff));
    let pair = |name: JsString, value: JsString| JsValue::from(Array::of2(&name, &value));
    let fields: FieldsInput =
        JsValue::from(Array::of1(&pair(with_unit("\u{ffff}", 0xd800), s("1")))).unchecked_into();
    let err = fingerprint_fields(fields).unwrap_err();
    assert_eq!(message(err), lone("fields[0][0]", 0, 0xd800));
    let fields: FieldsInput =
        JsValue::from(Array::of1(&pair(s("a"), with_unit("1\u{ffff}", 0xdc00)))).unchecked_into();
    let err = fingerprint_fields(fields).unwrap_err();
    assert_eq!(message(err), lone("fields[0][1]", 1, 0xdc00));

    // The client: nothing is queued for a payload or an operation it refuses.
    let mut client = client();
    let payload = with_unit("{\"sku\":\"\u{ffff}\"}", 0xd800);
    let err = client
        .begin(
            &s("order"),
            JsValue::from(payload).unchecked_into(),
            1.0,
            None,
        )
        .err()
        .unwrap();
    assert_eq!(message(err), lone("payload", 8, 0xd800));
    let err = client
        .begin(&with_unit("order\u{ffff}", 0xdbff), bytes(b"x"), 1.0, None)
        .err()
        .unwrap();
    assert_eq!(message(err), lone("operation", 5, 0xdbff));
    assert_eq!(client.size(), 0);
    let key = text(
        &client.begin(&s("order"), bytes(b"x"), 1.0, None).unwrap(),
        "key",
    );
    let _ = client.due(1.0).unwrap();
    let body = with_unit("order \u{ffff}", 0xdfff);
    let reply = js_sys::Object::new();
    Reflect::set(&reply, &"status".into(), &201.into()).unwrap();
    Reflect::set(&reply, &"body".into(), &body).unwrap();
    let err = client
        .on_response(&s(&key), reply.unchecked_into::<Reply>(), 2.0)
        .err()
        .unwrap();
    assert_eq!(message(err), lone("reply.body", 6, 0xdfff));
    let err = client.get(&with_unit("\u{ffff}", 0xd800)).err().unwrap();
    assert_eq!(message(err), lone("key", 0, 0xd800));

    // The receiver.
    let mut receiver = MemoryReceiver::new(None).unwrap();
    let fp = fingerprint_bytes(bytes(b"x")).unwrap();
    let err = receiver
        .begin(
            id("k"),
            &with_unit(&format!("{}\u{ffff}", &fp[..63]), 0xd800),
            1.0,
        )
        .err()
        .unwrap();
    assert_eq!(message(err), lone("fingerprint", 63, 0xd800));
    let tenant = js_sys::Object::new();
    Reflect::set(
        &tenant,
        &"tenant".into(),
        &with_unit("shop\u{ffff}", 0xdc00),
    )
    .unwrap();
    Reflect::set(&tenant, &"operation".into(), &"o".into()).unwrap();
    Reflect::set(&tenant, &"key".into(), &"k".into()).unwrap();
    let err = receiver
        .begin(JsValue::from(tenant).unchecked_into(), &s(&fp), 1.0)
        .err()
        .unwrap();
    assert_eq!(message(err), lone("id.tenant", 4, 0xdc00));
}

#[wasm_bindgen_test]
fn json_text_over_the_size_limit_is_refused_before_it_is_copied() {
    let limit = idem_core::fingerprint::MAX_JSON_BYTES;
    // More code units than the limit: refused on its length, before it reaches the module.
    let long: JsString = js_sys::JsString::from("1")
        .repeat(i32::try_from(limit + 1).unwrap())
        .unchecked_into();
    let err = fingerprint_json(&long, None).unwrap_err();
    assert_eq!(
        message(err),
        format!(
            "json: at least {0} bytes ({0} UTF-16 code units), more than the limit of {limit} bytes",
            limit + 1
        )
    );
    // Fewer code units than the limit but more bytes of UTF-8: the core counts the bytes.
    let wide = format!("\"{}\"", "\u{e9}".repeat(limit / 2));
    let err = canonical_json(&s(&wide), None).unwrap_err();
    assert_eq!(
        message(err),
        format!(
            "json: {} bytes, more than the limit of {limit} bytes",
            limit + 2
        )
    );
}

#[wasm_bindgen_test]
fn a_machine_decides_moves_as_the_store_does() {
    let machine = Machine::new(js(
        r#"{"states": ["created", "paid", "refunded"], "initial": "created",
            "moves": [["created", "paid"], ["paid", "refunded"]]}"#,
    ))
    .unwrap();
    let paid = machine.transition(None, "paid", None, 5.0).unwrap();
    assert_eq!(text(&paid, "decision"), "applied");
    let entity = get(&paid, "entity");
    assert_eq!(
        JSON::stringify(&entity).unwrap().as_string().unwrap(),
        r#"{"state":"paid","version":1,"updatedAt":5}"#
    );
    let again = machine
        .transition(
            Some(entity.clone().unchecked_into()),
            "paid",
            Some(7.0),
            6.0,
        )
        .unwrap();
    assert_eq!(text(&again, "decision"), "already_there");
    let back = machine
        .transition(Some(entity.clone().unchecked_into()), "created", None, 6.0)
        .unwrap();
    assert_eq!(
        JSON::stringify(&back).unwrap().as_string().unwrap(),
        r#"{"decision":"illegal","from":"paid","to":"created"}"#
    );
    let stale = machine
        .transition(Some(entity.unchecked_into()), "refunded", Some(3.0), 6.0)
        .unwrap();
    assert_eq!(
        JSON::stringify(&stale).unwrap().as_string().unwrap(),
        r#"{"decision":"version_mismatch","expected":3,"current":1}"#
    );
    for (spec, message) in [
        (
            r#"{"states": ["a"], "initial": "b", "moves": []}"#,
            "initial: \"b\" is not one of the states",
        ),
        (
            r#"{"states": ["a"], "initial": "a", "moves": [["a"]]}"#,
            "machine.moves[0]: expected a [from, to] pair",
        ),
        (
            r#"{"states": "a", "initial": "a"}"#,
            "machine.states: expected an array of strings",
        ),
        (
            r#"{"states": ["a"], "initial": "a", "colour": 1}"#,
            "unknown member",
        ),
    ] {
        let err = match Machine::new(js(spec)) {
            Err(e) => JsValue::from(e),
            Ok(_) => panic!("{spec} was accepted"),
        };
        let shown = Reflect::get(&err, &"message".into())
            .unwrap()
            .as_string()
            .unwrap();
        assert!(shown.contains(message), "{shown} lacks {message}");
    }
}
