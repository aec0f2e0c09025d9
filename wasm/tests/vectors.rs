//! The shared fingerprint vectors (`testdata/fingerprints.json`), checked natively against
//! idem-core. `web.rs` checks the same file through the JS bindings in Node and Chromium,
//! and the npm package's tests check it once more from JavaScript: all must agree.
#![cfg(not(target_arch = "wasm32"))]

use idem_core::Fingerprint;
use serde_json::Value;

const VECTORS: &str = include_str!("../../testdata/fingerprints.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("testdata/fingerprints.json is JSON")
}

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd hex length: {text}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn str_of<'a>(case: &'a Value, field: &str) -> &'a str {
    case[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} of {case}"))
}

fn cases<'a>(all: &'a Value, kind: &str) -> &'a [Value] {
    let list = all[kind].as_array().expect("a list of cases");
    assert!(!list.is_empty(), "no {kind} vectors");
    list
}

#[test]
fn raw_bytes() {
    let all = vectors();
    for case in cases(&all, "bytes") {
        let got = Fingerprint::of_bytes(&hex(str_of(case, "hex"))).to_hex();
        assert_eq!(got, str_of(case, "fingerprint"), "{}", case["name"]);
    }
}

#[test]
fn named_fields() {
    let all = vectors();
    for case in cases(&all, "fields") {
        let owned: Vec<(String, Vec<u8>)> = case["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|pair| {
                (
                    pair[0].as_str().expect("name").to_owned(),
                    hex(pair[1].as_str().expect("hex value")),
                )
            })
            .collect();
        let fields: Vec<(&str, &[u8])> = owned
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        let got = Fingerprint::of_fields(&fields).map(|f| f.to_hex());
        match case.get("error") {
            Some(error) => assert_eq!(
                got.unwrap_err().to_string(),
                error.as_str().unwrap(),
                "{}",
                case["name"]
            ),
            None => assert_eq!(
                got.unwrap(),
                str_of(case, "fingerprint"),
                "{}",
                case["name"]
            ),
        }
    }
}

#[test]
fn canonical_json() {
    let all = vectors();
    let mut checked = 0;
    for case in cases(&all, "json") {
        let name = &case["name"];
        let text = str_of(case, "text");
        let ignored: Vec<&str> = case["ignored"]
            .as_array()
            .expect("ignored")
            .iter()
            .map(|p| p.as_str().expect("path"))
            .collect();
        match case.get("error") {
            Some(error) => {
                let err = Fingerprint::of_json(text, &ignored).unwrap_err();
                assert_eq!(err.to_string(), error.as_str().unwrap(), "{name}");
            }
            None => {
                let canonical = Fingerprint::canonical_json(text, &ignored).unwrap();
                assert_eq!(canonical, str_of(case, "canonical"), "{name}");
                let fingerprint = Fingerprint::of_json(text, &ignored).unwrap();
                assert_eq!(fingerprint.to_hex(), str_of(case, "fingerprint"), "{name}");
                // "Plain SHA-256 of the canonical text", as a server in any language does it.
                assert_eq!(fingerprint, Fingerprint::of_bytes(canonical.as_bytes()));
            }
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} JSON vectors");
}

/// The JavaScript strings: the refused ones are not well-formed UTF-16 (no Rust string can
/// hold them, so natively there is nothing to refuse), the others fingerprint as given.
#[test]
fn javascript_strings() {
    let all = vectors();
    let (mut refused, mut accepted) = (0, 0);
    for case in cases(&all, "strings") {
        let name = &case["name"];
        let units: Vec<u16> = str_of(case, "units")
            .split(' ')
            .map(|u| u16::from_str_radix(u, 16).expect("hex code unit"))
            .collect();
        let text = String::from_utf16(&units);
        if case.get("error").is_some() {
            assert!(
                text.is_err(),
                "{name}: well-formed, but the bindings must refuse it"
            );
            refused += 1;
            continue;
        }
        let text = text.unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = match str_of(case, "function") {
            "fingerprintJson" => Fingerprint::of_json(&text, &[]).unwrap(),
            "fingerprintBytes" => Fingerprint::of_bytes(text.as_bytes()),
            other => panic!("{name}: no function {other}"),
        };
        assert_eq!(got.to_hex(), str_of(case, "fingerprint"), "{name}");
        accepted += 1;
    }
    assert!(
        refused >= 8 && accepted >= 4,
        "{refused} refused, {accepted} accepted"
    );
}
