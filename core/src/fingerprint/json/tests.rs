//! RFC 8785 examples, ignored paths, and every refusal.

use super::*;
use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

/// The canonical text, or the error; checks on the way that hashing the text as it
/// becomes final, whenever 1, 7 or the default number of bytes wait, gives the SHA-256 of
/// that text, or the same error.
fn canonicalize(text: &str, paths: &[&str]) -> Result<String, JsonError> {
    selected(text, JsonPaths::Ignored(paths))
}

/// [`canonicalize`] with paths that select either way.
fn selected(text: &str, paths: JsonPaths<'_>) -> Result<String, JsonError> {
    let canonical = super::canonicalize(text, paths, MAX_JSON_BYTES);
    let expected = canonical
        .as_ref()
        .map(|c| <[u8; 32]>::from(Sha256::digest(c)))
        .map_err(Clone::clone);
    for flush_at in [1, 7, canonical::FLUSH_AT] {
        let hashed = sha256_flushing_at(text, paths, MAX_JSON_BYTES, flush_at);
        assert_eq!(
            hashed, expected,
            "{text:?} {paths:?}, flushing at {flush_at}"
        );
    }
    canonical
}

fn jcs(text: &str) -> String {
    canonicalize(text, &[]).unwrap()
}

fn err(text: &str) -> JsonError {
    canonicalize(text, &[]).unwrap_err()
}

/// RFC 8785 Appendix B, every finite row.
#[rustfmt::skip]
const APPENDIX_B: &[(u64, &str)] = &[
    (0x0000000000000000, "0"), (0x8000000000000000, "0"),
    (0x0000000000000001, "5e-324"), (0x8000000000000001, "-5e-324"),
    (0x7fefffffffffffff, "1.7976931348623157e+308"),
    (0xffefffffffffffff, "-1.7976931348623157e+308"),
    (0x4340000000000000, "9007199254740992"), (0xc340000000000000, "-9007199254740992"),
    (0x4430000000000000, "295147905179352830000"),
    (0x44b52d02c7e14af5, "9.999999999999997e+22"), (0x44b52d02c7e14af6, "1e+23"),
    (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
    (0x444b1ae4d6e2ef4e, "999999999999999700000"),
    (0x444b1ae4d6e2ef4f, "999999999999999900000"), (0x444b1ae4d6e2ef50, "1e+21"),
    (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"), (0x3eb0c6f7a0b5ed8d, "0.000001"),
    (0x41b3de4355555553, "333333333.3333332"), (0x41b3de4355555554, "333333333.33333325"),
    (0x41b3de4355555555, "333333333.3333333"), (0x41b3de4355555556, "333333333.3333334"),
    (0x41b3de4355555557, "333333333.33333343"),
    (0xbecbf647612f3696, "-0.0000033333333333333333"),
    (0x43143ff3c1cb0959, "1424953923781206.2"),
];

#[rustfmt::skip]
const OTHER_NUMBERS: &[(&str, &str)] = &[
    ("-0", "0"), ("-0.0e-7", "0"), ("1E21", "1e+21"), ("1e+21", "1e+21"), ("1e-7", "1e-7"),
    ("100000000000000000000", "100000000000000000000"), ("0.1", "0.1"), ("1.0", "1"),
    ("-1.5E+2", "-150"), ("1e-400", "0"), ("123456789012345678901234567890", "1.2345678901234568e+29"),
];

/// Input, byte offset of the `Syntax` or `TrailingContent` error.
#[rustfmt::skip]
const BAD_SYNTAX: &[(&str, usize)] = &[
    ("", 0), ("  ", 2), ("{", 1), ("[1,]", 3), ("[1 2]", 3), ("{\"a\" 1}", 5), ("{\"a\":1,}", 7),
    ("{1:2}", 1), ("tru", 0), ("nul", 0), ("+1", 0), ("01", 1), ("1.", 2), ("1.e5", 2), ("1e", 2),
    ("-", 1), ("\"abc", 4), ("\"a\nb\"", 2), ("\"\\x\"", 2), ("\"\\u12g4\"", 5), ("\"\\u12", 5),
    ("'a'", 0), ("[1]]", 3), ("{} {}", 3), ("NaN", 0), ("Infinity", 0), ("-Infinity", 1),
];

const DOC: &str = r#"{"meta":{"trace_id":"t1","span":2},"items":[{"trace_id":"x","n":1},{"n":2},3],
    "a/b":{"c~d":true,"e":1},"*":{"k":1},"keep":0}"#;

/// Ignored paths, and `DOC`'s canonical text without them.
#[rustfmt::skip]
const IGNORED: &[(&[&str], &str)] = &[
    (&["/meta/trace_id"], r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[{"n":1,"trace_id":"x"},{"n":2},3],"keep":0,"meta":{"span":2}}"#),
    (&["/items/*/trace_id", "/meta"], r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[{"n":1},{"n":2},3],"keep":0}"#),
    (&["/a~1b/c~0d", "/*/k"], r#"{"*":{},"a/b":{"e":1},"items":[{"n":1,"trace_id":"x"},{"n":2},3],"keep":0,"meta":{"span":2,"trace_id":"t1"}}"#),
    (&["/items/0", "/items/2", "/items/01", "/items/-"], r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[{"n":2}],"keep":0,"meta":{"span":2,"trace_id":"t1"}}"#),
    (&["/*/*/trace_id", "/items/*/n"], r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[{},{},3],"keep":0,"meta":{"span":2,"trace_id":"t1"}}"#),
    (&["/items/*", "/meta/*"], r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[],"keep":0,"meta":{}}"#),
    (&["/*"], "{}"),
    // Matching nothing removes nothing.
    (&["/nope", "/meta/trace_id/deeper", "/keep/x", "/items/3", "/items/x", "/", "/meta/"],
     r#"{"*":{"k":1},"a/b":{"c~d":true,"e":1},"items":[{"n":1,"trace_id":"x"},{"n":2},3],"keep":0,"meta":{"span":2,"trace_id":"t1"}}"#),
];

#[test]
fn rfc_3_2_2_sample() {
    let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
          2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
    assert_eq!(jcs(input), expected);
}

#[test]
fn rfc_3_2_3_sorting_by_utf16_code_units() {
    let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
        \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
        \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(jcs(input), expected);
}

#[test]
fn rfc_appendix_b_numbers() {
    for &(bits, expected) in APPENDIX_B {
        let n = f64::from_bits(bits);
        // Rust's shortest exponent form ("1e23") is another valid spelling of the value.
        for spelling in [format!("{n:e}"), format!("{n:E}"), expected.to_string()] {
            assert_eq!(jcs(&spelling), expected, "{bits:#018x} spelled {spelling}");
        }
        let parsed = number::parse(expected);
        assert_eq!(parsed, n, "{expected} parses back to {bits:#018x}"); // -0.0 == 0.0
    }
    for &(input, expected) in OTHER_NUMBERS {
        assert_eq!(jcs(input), expected, "{input}");
    }
}

#[test]
fn strings_and_structure() {
    let input = r#" "\b\t\n\f\r\u0000\u001f\u007f\"\\\/ é\u00e9\ud83d\ude00" "#;
    let expected = "\"\\b\\t\\n\\f\\r\\u0000\\u001f\u{7f}\\\"\\\\/ éé\u{1f600}\"";
    assert_eq!(jcs(input), expected);
    assert_eq!(jcs("\"\u{1f600}</script>\""), "\"\u{1f600}</script>\"");
    let input = " \t\r\n{ \"b\" : [ { \"z\" : 1 , \"a\" : [ ] } , { } ] , \"a\" : null } \n";
    assert_eq!(jcs(input), r#"{"a":null,"b":[{"a":[],"z":1},{}]}"#);
    assert_eq!(jcs("[true,false,null,\"\"]"), "[true,false,null,\"\"]");
    let once = jcs(r#"{"€":1,"\r":[0.5,{"y":"\u0001"}],"1":-0}"#);
    assert_eq!(jcs(&once), once, "canonical text is a fixed point");
}

#[test]
fn ignored_paths() {
    for &(paths, expected) in IGNORED {
        assert_eq!(canonicalize(DOC, paths).unwrap(), expected, "{paths:?}");
    }
    let empty_names = r#"{"":{"":1,"a":2}}"#;
    assert_eq!(
        canonicalize(empty_names, &["//"]).unwrap(),
        r#"{"":{"a":2}}"#
    );
    assert_eq!(canonicalize(empty_names, &["/", "//"]).unwrap(), "{}");
    assert_eq!(canonicalize("[1,2]", &["/0"]).unwrap(), "[2]");
    assert_eq!(canonicalize("7", &["/a"]).unwrap(), "7");
}

#[test]
fn syntax_errors_name_the_byte() {
    for &(input, offset) in BAD_SYNTAX {
        match err(input) {
            JsonError::Syntax { offset: at, .. } | JsonError::TrailingContent { offset: at } => {
                assert_eq!(at, offset, "{input:?}");
            }
            other => panic!("{input:?}: {other:?}"),
        }
    }
    assert_eq!(err("[1]]"), JsonError::TrailingContent { offset: 3 });
    let message = "json: invalid syntax at byte 3, expected a JSON value";
    assert_eq!(err("[1,]").to_string(), message);
    let message = "json: unexpected content at byte 3 after the document's single value";
    assert_eq!(err("{} x").to_string(), message);
}

#[test]
fn duplicate_members_refused() {
    let e = err(r#"{"a":1,"b":{"x":1},"a":2}"#);
    assert_eq!(
        e.to_string(),
        "json: duplicate member name \"a\" at byte 19"
    );
    // Escaped and literal spellings are one name; the earliest repeat is named.
    let e = err(r#"{"b":1,"é":1,"\u00e9":2,"b":2}"#);
    assert_eq!(
        e,
        JsonError::DuplicateMember {
            name: "é".into(),
            offset: 14
        }
    );
    // Refused even inside an ignored subtree.
    assert!(canonicalize(r#"{"m":{"t":1,"t":2}}"#, &["/m"]).is_err());
}

#[test]
fn lone_surrogates_refused() {
    for input in [
        r#""\ud800""#,
        r#""a\udc00b""#,
        r#""\ud83d\u0041""#,
        r#""\ud83dx""#,
    ] {
        let offset = input.find('\\').unwrap();
        let code_unit = u16::from_str_radix(&input[offset + 2..offset + 6], 16).unwrap();
        assert_eq!(err(input), JsonError::LoneSurrogate { offset, code_unit });
    }
    let message = "json: escape \\udead at byte 2 is a lone surrogate, which I-JSON forbids";
    assert_eq!(err(r#"["\udead"]"#).to_string(), message);
}

#[test]
fn non_finite_numbers_refused() {
    let message = "json: number 1e400 at byte 4 is not a finite IEEE 754 double";
    assert_eq!(err("[1, 1e400]").to_string(), message);
    let literal = "-1.8e308".into();
    assert_eq!(err("-1.8e308"), JsonError::NotFinite { literal, offset: 0 });
    let literal = format!("{}...", "9".repeat(40));
    assert_eq!(
        err(&"9".repeat(400)),
        JsonError::NotFinite { literal, offset: 0 }
    );
}

#[test]
fn depth_limited_without_stack_overflow() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(MAX_JSON_DEPTH, 10_000);
    assert_eq!(jcs(&nest(10_000)), nest(10_000));
    let message = "json: nesting at byte 10000 is deeper than 10000 arrays and objects";
    assert_eq!(err(&nest(10_001)).to_string(), message);
    assert_eq!(
        err(&nest(1_000_000)),
        JsonError::TooDeep {
            offset: 10_000,
            limit: 10_000
        }
    );
    let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    assert_eq!(jcs(&objects(10_000)), objects(10_000));
    assert_eq!(
        err(&objects(10_001)),
        JsonError::TooDeep {
            offset: 50_000,
            limit: 10_000
        }
    );
    // Deep and wide at once: every level closes and the next one opens at the same depth.
    let wide = format!("[{}]", [nest(9_999).as_str(); 3].join(","));
    assert_eq!(jcs(&wide), wide);
}

#[test]
fn size_limited_before_parsing() {
    let within = canonicalize_up_to("[1, 2]", &[], 6).unwrap();
    assert_eq!(within, "[1,2]");
    let e = canonicalize_up_to("[1, 2]", &[], 5).unwrap_err();
    assert_eq!(e, JsonError::TooLarge { size: 6, limit: 5 });
    assert_eq!(
        e.to_string(),
        "json: 6 bytes, more than the limit of 5 bytes"
    );
    // Nothing is read: neither the syntax nor the paths.
    let e = canonicalize_up_to("[1,,", &["no slash"], 3).unwrap_err();
    assert_eq!(e, JsonError::TooLarge { size: 4, limit: 3 });
    assert_eq!(
        sha256_flushing_at("[1, 2]", JsonPaths::Ignored(&[]), 5, 1),
        Err(JsonError::TooLarge { size: 6, limit: 5 })
    );
    // The default counts bytes of UTF-8, not characters.
    assert_eq!(MAX_JSON_BYTES, 16 * 1024 * 1024);
    let big = format!("\"{}\"", "é".repeat(MAX_JSON_BYTES / 2));
    assert_eq!(
        err(&big),
        JsonError::TooLarge {
            size: MAX_JSON_BYTES + 2,
            limit: MAX_JSON_BYTES
        }
    );
    let largest = format!("\"{}\"", "é".repeat(MAX_JSON_BYTES / 2 - 1));
    assert_eq!(jcs(&largest).len(), MAX_JSON_BYTES);
}

fn canonicalize_up_to(text: &str, paths: &[&str], max: usize) -> Result<String, JsonError> {
    super::canonicalize(text, JsonPaths::Ignored(paths), max)
}

/// Noncharacters are accepted, literal or escaped, and written as they are; names with
/// them sort by UTF-16 code units like any other.
#[test]
fn noncharacters_accepted() {
    for (input, expected) in [
        ("\"\u{ffff}\"", "\"\u{ffff}\""),
        (r#""\uffff""#, "\"\u{ffff}\""),
        (r#""\ufdd0\ufdef\ufffe""#, "\"\u{fdd0}\u{fdef}\u{fffe}\""),
        (r#""\udbff\udfff""#, "\"\u{10ffff}\""),
        ("\"\u{10ffff}\u{1fffe}\"", "\"\u{10ffff}\u{1fffe}\""),
    ] {
        assert_eq!(jcs(input), expected, "{input}");
    }
    let names = r#"{"\uffff":1,"\ud83d\ude00":2,"\ufdd0":3,"\udbff\udfff":4,"\ud7ff":5}"#;
    let expected =
        "{\"\u{d7ff}\":5,\"\u{1f600}\":2,\"\u{10ffff}\":4,\"\u{fdd0}\":3,\"\u{ffff}\":1}";
    assert_eq!(jcs(names), expected);
    // An escaped and a literal noncharacter are one name.
    let e = err(&format!("{{\"\\uffff\":1,\"{}\":2}}", '\u{ffff}'));
    assert_eq!(
        e,
        JsonError::DuplicateMember {
            name: "\u{ffff}".into(),
            offset: 12
        }
    );
}

/// Documents far larger than what waits before the hash takes it, in the shapes that
/// matter: a long array of scalars, of objects, an object around an array, nested arrays,
/// and ignored paths that remove elements and members on the way.
#[test]
fn large_documents_canonicalize_and_hash_alike() {
    // Each canonical text is longer than FLUSH_AT.
    let zeros = format!("[{}0]", "0 , ".repeat(40_000));
    let zeros_canonical = format!("[{}0]", "0,".repeat(40_000));
    assert_eq!(jcs(&zeros), zeros_canonical);

    let n = 2_000;
    let order = |i: usize| format!(r#"{{"trace":"t{i}","qty":{i},"sku":"A-{i}","n":[{i},1.0]}}"#);
    let canonical = |i: usize| format!(r#"{{"n":[{i},1],"qty":{i},"sku":"A-{i}","trace":"t{i}"}}"#);
    let orders: Vec<String> = (0..n).map(order).collect();
    let orders = format!("[{}]", orders.join(",\n"));
    let orders_canonical: Vec<String> = (0..n).map(canonical).collect();
    let orders_canonical = format!("[{}]", orders_canonical.join(","));
    assert_eq!(jcs(&orders), orders_canonical);

    let wrapped = jcs(&format!(r#"{{"z":{orders},"a":{zeros}}}"#));
    assert_eq!(
        wrapped,
        format!(r#"{{"a":{zeros_canonical},"z":{orders_canonical}}}"#)
    );
    let nested = jcs(&format!("[[{orders}],[{zeros}]]"));
    assert_eq!(
        nested,
        format!("[[{orders_canonical}],[{zeros_canonical}]]")
    );

    // Every third order goes, and every order's trace.
    let kept: Vec<String> = (0..n)
        .filter(|i| i % 3 != 1)
        .map(|i| format!(r#"{{"n":[{i},1],"qty":{i},"sku":"A-{i}"}}"#))
        .collect();
    let paths: Vec<String> = (0..n)
        .filter(|i| i % 3 == 1)
        .map(|i| format!("/{i}"))
        .collect();
    let mut paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    paths.push("/*/trace");
    let pruned = canonicalize(&orders, &paths).unwrap();
    assert_eq!(pruned, format!("[{}]", kept.join(",")));
    // A removed element that is itself large, around the point where text is hashed.
    let removed_big = canonicalize(&format!("[1,{orders},2]"), &["/1"]).unwrap();
    assert_eq!(removed_big, "[1,2]");
}
#[test]
fn bad_paths_refused() {
    let e = canonicalize("{}", &["/ok", ""]).unwrap_err();
    assert_eq!(e, JsonError::WholeDocumentPath);
    let message = "ignored path \"\": the empty pointer names the whole document, which \
        cannot be ignored";
    assert_eq!(e.to_string(), message);
    let e = canonicalize("{", &["meta"]).unwrap_err(); // paths are checked first
    assert_eq!(
        e.to_string(),
        "ignored path \"meta\": must be empty or start with '/'"
    );
    for path in ["/a~", "/a~2", "/~/b"] {
        let e = canonicalize("{}", &[path]).unwrap_err();
        let reason = "'~' must be followed by '0' or '1'";
        assert_eq!(
            e,
            JsonError::InvalidPath {
                path: path.into(),
                reason
            }
        );
    }
}

#[test]
fn never_panics_on_prefixes_and_insertions() {
    let samples = [
        r#"{"a":[1,-2.5e+3,{"b":"\ud83d\ude00\u00e9\n"}],"c":null,"d":true,"e":false}"#,
        "{\"é\":\"\u{1f600}\",\"x\":[[[]]]}",
    ];
    let paths = ["/a/*/b", "/c"];
    for sample in samples {
        for (i, _) in sample.char_indices() {
            let (head, tail) = sample.split_at(i);
            let _ = canonicalize(head, &paths);
            let _ = canonicalize(tail, &paths);
            for b in [
                "\"", "\\", "{", "]", ",", "0", "-", "e", "\\u", "\u{0}", "~", "\u{80}",
            ] {
                let _ = canonicalize(&format!("{head}{b}{tail}"), &paths);
            }
        }
    }
}

/// Paths that keep only what they reach: the containers on the way keep none of their
/// other members and elements, what a path ends at is kept whole, and the rest of the
/// rules (duplicates, numbers, order) hold for the whole document still.
#[test]
fn only_the_members_paths_reach_are_kept() {
    let doc = r#"{"z":1,"amount":{"value":12.50,"currency":"EUR"},"timestamp":"t",
        "items":[{"sku":"a","trace":1},{"sku":"b","n":[1,2]},7],"meta":{"trace_id":"x"}}"#;
    for (paths, expected) in [
        (
            &["/amount"][..],
            r#"{"amount":{"currency":"EUR","value":12.5}}"#,
        ),
        (
            &["/amount/value", "/z"][..],
            r#"{"amount":{"value":12.5},"z":1}"#,
        ),
        (
            &["/items/*/sku"][..],
            r#"{"items":[{"sku":"a"},{"sku":"b"}]}"#,
        ),
        (&["/items/1"][..], r#"{"items":[{"n":[1,2],"sku":"b"}]}"#),
        (&["/z/deeper", "/items/2/x"][..], r#"{"items":[]}"#),
        (
            &["/items/*"][..],
            r#"{"items":[{"sku":"a","trace":1},{"n":[1,2],"sku":"b"},7]}"#,
        ),
        (
            &["/amount", "/amount/value"][..],
            r#"{"amount":{"currency":"EUR","value":12.5}}"#,
        ),
        (&["/nowhere"][..], "{}"),
        (&[][..], "{}"),
    ] {
        let mut paths = paths.to_vec();
        assert_eq!(
            selected(doc, JsonPaths::Only(&paths)).unwrap(),
            expected,
            "{paths:?}"
        );
        paths.reverse();
        assert_eq!(
            selected(doc, JsonPaths::Only(&paths)).unwrap(),
            expected,
            "{paths:?}"
        );
    }
    // A field outside the kept ones changes nothing; one inside them does.
    let other = doc.replace(r#""timestamp":"t""#, r#""timestamp":"u""#);
    let paths = ["/amount", "/items/*/sku"];
    assert_eq!(
        selected(doc, JsonPaths::Only(&paths)),
        selected(&other, JsonPaths::Only(&paths))
    );
    let dearer = doc.replace("12.50", "13");
    assert_ne!(
        selected(doc, JsonPaths::Only(&paths)),
        selected(&dearer, JsonPaths::Only(&paths))
    );
    assert_eq!(
        selected("[1,[2,3],{}]", JsonPaths::Only(&["/*/0"])).unwrap(),
        "[[2],{}]"
    );
    assert_eq!(
        selected("[1,[2,3],4]", JsonPaths::Only(&["/1/0"])).unwrap(),
        "[[2]]"
    );
    assert_eq!(
        selected("\"s\"", JsonPaths::Only(&["/a"])).unwrap(),
        "\"s\""
    );
    // Duplicates are refused where nothing is kept too, and a bad path is a bad path.
    assert!(matches!(
        selected(r#"{"a":1,"m":{"t":1,"t":2}}"#, JsonPaths::Only(&["/a"])),
        Err(JsonError::DuplicateMember { .. })
    ));
    assert!(matches!(
        selected("{}", JsonPaths::Only(&["meta"])),
        Err(JsonError::InvalidPath { .. })
    ));
}
