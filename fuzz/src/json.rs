//! The canonical JSON of fingerprints (RFC 8785), held against two other
//! implementations: serde_json for what is valid JSON and what it means, and the
//! standard library's `str::parse::<f64>` for every number.

use idem_core::Fingerprint;
use idem_core::fingerprint::{FingerprintError, JsonError};
use serde_json::Value;

/// Arbitrary text as a document, and after a NUL byte, ignored paths one per line.
///
/// - The canonicalizer and serde_json agree on what is valid, except where idem is
///   stricter by design (RFC 7493 I-JSON: a duplicate member name; nesting deeper than
///   its limit, where serde_json's own limit may differ by a level) and at the edge of
///   the doubles, where serde_json's default number parser is not correctly rounded (the
///   standard library decides there).
/// - A valid document means what serde_json reads in it: the canonical text parses
///   (with serde_json) to the same value, numbers equal to within serde_json's rounding.
/// - Canonical text is a fixed point, and it is valid for serde_json.
/// - Removing paths from the document or from its canonical text gives the same text.
pub fn canonical(data: &[u8]) {
    let (document, paths) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Ok(text) = std::str::from_utf8(document) else {
        return;
    };
    let ours = Fingerprint::canonical_json(text, &[]);
    let theirs = serde_json::from_str::<Value>(text);
    match (&ours, &theirs) {
        (Ok(canonical), Ok(value)) => {
            let reread: Value = serde_json::from_str(canonical)
                .unwrap_or_else(|e| panic!("canonical text {canonical:?} is not JSON: {e}"));
            assert!(
                same(value, &reread),
                "{text:?} reads as {value:?}, its canonical text {canonical:?} as {reread:?}"
            );
            assert_eq!(
                Fingerprint::canonical_json(canonical, &[]).as_ref(),
                Ok(canonical),
                "canonical text is not a fixed point"
            );
            assert_eq!(
                Fingerprint::of_json(text, &[]),
                Ok(Fingerprint::of_bytes(canonical.as_bytes()))
            );
        }
        (Err(FingerprintError::Json(why)), Ok(_)) => assert!(
            match why {
                JsonError::DuplicateMember { .. } | JsonError::TooDeep { .. } => true,
                // serde_json reads some numbers just past the doubles as the largest.
                JsonError::NotFinite { offset, .. } => literal_at(text, *offset)
                    .parse::<f64>()
                    .is_ok_and(f64::is_infinite),
                _ => false,
            },
            "{text:?}: refused ({why}), but serde_json reads it"
        ),
        (Err(e), Ok(_)) => panic!("{text:?}: refused ({e}), but serde_json reads it"),
        (Ok(canonical), Err(e)) => assert!(
            e.to_string().contains("recursion limit")
                // serde_json refuses some numbers that round to the largest double.
                || (e.to_string().contains("number out of range")
                    && numbers_in(canonical)
                        .any(|n| ulps_apart(n.abs(), f64::MAX) <= SERDE_ULPS)),
            "{text:?}: canonical {canonical:?}, but serde_json refuses it: {e}"
        ),
        (Err(_), Err(_)) => {}
    }
    let (Ok(canonical), Some(paths)) = (ours, paths) else {
        return;
    };
    let Ok(paths) = std::str::from_utf8(paths) else {
        return;
    };
    let paths: Vec<&str> = paths.split('\n').collect();
    let from_document = Fingerprint::canonical_json(text, &paths);
    let from_canonical = Fingerprint::canonical_json(&canonical, &paths);
    assert_eq!(from_document, from_canonical, "paths {paths:?} on {text:?}");
    if let Ok(stripped) = from_document {
        assert!(
            serde_json::from_str::<Value>(&stripped).is_ok(),
            "{stripped:?}"
        );
    }
}

/// The number literal that starts at byte `offset` of `text`.
fn literal_at(text: &str, offset: usize) -> &str {
    let rest = text.get(offset..).unwrap_or("");
    let end = rest
        .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The numbers of a canonical text, read by the standard library: outside strings,
/// a number is a run of number characters.
fn numbers_in(canonical: &str) -> impl Iterator<Item = f64> + '_ {
    let mut in_string = false;
    let mut escaped = false;
    let mut starts = Vec::new();
    let bytes = canonical.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if (b == b'-' || b.is_ascii_digit())
            && (i == 0 || matches!(bytes[i - 1], b'[' | b',' | b':'))
        {
            starts.push(i);
        }
    }
    starts
        .into_iter()
        .filter_map(|at| literal_at(canonical, at).parse().ok())
}

/// How far (in units in the last place) serde_json's default number parser may land
/// from the correctly rounded double: it is not correctly rounded (its `float_roundtrip`
/// feature makes it so), and two of its readings are compared here.
const SERDE_ULPS: u64 = 4;

/// Equal values, numbers within serde_json's rounding (the canonical text's numbers are
/// the shortest that round-trip; `number` holds them to the exact standard).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || ulps_apart(x, y) <= SERDE_ULPS,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(name, value)| y.get(name).is_some_and(|other| same(value, other)))
        }
        _ => a == b,
    }
}

fn ulps_apart(x: f64, y: f64) -> u64 {
    if x.is_sign_negative() != y.is_sign_negative() {
        return u64::MAX;
    }
    x.to_bits().abs_diff(y.to_bits())
}

/// A JSON number literal built from the bytes (sign, integer digits, fraction,
/// exponent), canonicalized: the canonical text must parse, with the standard library,
/// to exactly the value the standard library reads in the literal; a literal beyond
/// the doubles is refused as not finite, and only then.
pub fn number(data: &[u8]) {
    let literal = literal_from(data);
    let expected: f64 = literal
        .parse()
        .unwrap_or_else(|e| panic!("{literal:?} is a JSON number, std refuses it: {e}"));
    match Fingerprint::canonical_json(&literal, &[]) {
        Ok(canonical) => {
            let read: f64 = canonical
                .parse()
                .unwrap_or_else(|e| panic!("{literal:?} canonical {canonical:?}: {e}"));
            // RFC 8785 writes -0 as 0.
            let equal = read.to_bits() == expected.to_bits() || (read == 0.0 && expected == 0.0);
            assert!(
                equal,
                "{literal:?}: std reads {expected:e}, canonical text {canonical:?} is {read:e}"
            );
        }
        Err(FingerprintError::Json(JsonError::NotFinite { .. })) => assert!(
            expected.is_infinite(),
            "{literal:?} refused as not finite, std reads {expected:e}"
        ),
        Err(e) => panic!("{literal:?}: {e}"),
    }
}

/// A JSON number literal (RFC 8259 §6) from arbitrary bytes: the first byte picks the
/// parts, the next ones give their lengths and digits.
fn literal_from(data: &[u8]) -> String {
    let mut bytes = data.iter().copied();
    let mut next = || bytes.next().unwrap_or(0);
    let shape = next();
    let mut out = String::new();
    if shape & 1 != 0 {
        out.push('-');
    }
    let int_len = usize::from(next() % 40) + 1;
    let mut digit = |first: bool| {
        let d = next() % 10;
        // No leading zero before more integer digits.
        char::from(b'0' + if first && int_len > 1 { d.max(1) } else { d })
    };
    for i in 0..int_len {
        out.push(digit(i == 0));
    }
    if shape & 2 != 0 {
        out.push('.');
        let frac_len = usize::from(next() % 40) + 1;
        for _ in 0..frac_len {
            out.push(char::from(b'0' + next() % 10));
        }
    }
    if shape & 4 != 0 {
        out.push(if shape & 8 != 0 { 'E' } else { 'e' });
        match shape >> 4 & 3 {
            1 => out.push('+'),
            2 => out.push('-'),
            _ => {}
        }
        let exp_len = usize::from(next() % 5) + 1;
        for _ in 0..exp_len {
            out.push(char::from(b'0' + next() % 10));
        }
    }
    out
}
