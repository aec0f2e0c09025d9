//! Canonical JSON held against a reference model: random documents, written with random
//! whitespace, member order, escapes and number spellings, and random ignored paths,
//! must come out as the model writes them, as text and through the streaming hash alike.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Doc {
    Null,
    Bool(bool),
    Number(f64),
    Text(String),
    Array(Vec<Doc>),
    /// Names are unique.
    Object(Vec<(String, Doc)>),
}

/// Characters that need escapes, that sort differently in UTF-16 and UTF-8, and
/// noncharacters.
const CHARS: &[char] = &[
    'a',
    'b',
    '0',
    'é',
    '"',
    '\\',
    '/',
    '\n',
    '\u{1}',
    '\u{1f}',
    '\u{7f}',
    '\u{2028}',
    '\u{d7ff}',
    '\u{e000}',
    '\u{fdd0}',
    '\u{ffff}',
    '😀',
    '\u{10ffff}',
];

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(CHARS), 0..4)
        .prop_map(|chars| chars.into_iter().collect())
}

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<i32>().prop_map(f64::from),
        any::<f64>().prop_filter("finite", |n| n.is_finite()),
        proptest::sample::select(&[0.1, 1e21, 1e-7, 5e-324, -0.0, 9_007_199_254_740_993.0][..]),
    ]
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        number().prop_map(Doc::Number),
        text().prop_map(Doc::Text),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            proptest::collection::vec((text(), inner), 0..6).prop_map(|members| {
                let mut unique: Vec<(String, Doc)> = Vec::new();
                for (name, value) in members {
                    if unique.iter().all(|(n, _)| *n != name) {
                        unique.push((name, value));
                    }
                }
                Doc::Object(unique)
            }),
        ]
    })
}

/// Pointers whose tokens hit the documents above now and then.
fn path() -> impl Strategy<Value = String> {
    let tokens = &["*", "0", "1", "a", "b", "é", "~1", "😀", ""][..];
    proptest::collection::vec(proptest::sample::select(tokens), 1..4)
        .prop_map(|tokens| tokens.iter().map(|t| format!("/{t}")).collect())
}

/// The model: `doc` per RFC 8785 without what `paths` (unescaped tokens) name.
fn model(doc: &Doc, paths: &[Vec<String>], out: &mut String) {
    match doc {
        Doc::Null => out.push_str("null"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Number(n) => out.push_str(ryu_js::Buffer::new().format_finite(*n)),
        Doc::Text(s) => model_string(s, out),
        Doc::Array(items) => {
            out.push('[');
            let mut first = true;
            for (i, item) in items.iter().enumerate() {
                if let Some(deeper) = below(paths, &i.to_string()) {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    model(item, &deeper, out);
                }
            }
            out.push(']');
        }
        Doc::Object(members) => {
            let mut sorted: Vec<&(String, Doc)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            let mut first = true;
            for (name, value) in sorted {
                if let Some(deeper) = below(paths, name) {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    model_string(name, out);
                    out.push(':');
                    model(value, &deeper, out);
                }
            }
            out.push('}');
        }
    }
}

/// The canonical text of `doc` keeping only what `paths` reach, with the containers on
/// the way to it: the model of [`JsonPaths::Only`].
fn model_only(doc: &Doc, paths: &[Vec<String>], out: &mut String) {
    // The text of the child `name`, or `None` when no path reaches it.
    let child = |name: &str, value: &Doc| {
        let mut deeper = Vec::new();
        for path in paths {
            if let Some((first, rest)) = path.split_first()
                && (first == "*" || first == name)
            {
                if rest.is_empty() {
                    let mut text = String::new();
                    model(value, &[], &mut text);
                    return Some(text);
                }
                deeper.push(rest.to_vec());
            }
        }
        let container = matches!(value, Doc::Array(_) | Doc::Object(_));
        (container && !deeper.is_empty()).then(|| {
            let mut text = String::new();
            model_only(value, &deeper, &mut text);
            text
        })
    };
    match doc {
        Doc::Array(items) => {
            let kept: Vec<String> = items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| child(&i.to_string(), item))
                .collect();
            out.push('[');
            out.push_str(&kept.join(","));
            out.push(']');
        }
        Doc::Object(members) => {
            let mut sorted: Vec<&(String, Doc)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            let kept: Vec<String> = sorted
                .into_iter()
                .filter_map(|(name, value)| {
                    let text = child(name, value)?;
                    let mut member = String::new();
                    model_string(name, &mut member);
                    member.push(':');
                    member.push_str(&text);
                    Some(member)
                })
                .collect();
            out.push('{');
            out.push_str(&kept.join(","));
            out.push('}');
        }
        scalar => model(scalar, &[], out),
    }
}

/// The paths that go on below the child `name` (an element's index in decimal), or
/// `None` when one ends at it.
fn below(paths: &[Vec<String>], name: &str) -> Option<Vec<Vec<String>>> {
    let mut deeper = Vec::new();
    for path in paths {
        if let Some((first, rest)) = path.split_first() {
            if first == "*" || first == name {
                if rest.is_empty() {
                    return None;
                }
                deeper.push(rest.to_vec());
            }
        }
    }
    Some(deeper)
}

fn model_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The tokens of a pointer, unescaped.
fn tokens(path: &str) -> Vec<String> {
    path.split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// A xorshift generator for the writing's choices.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `doc` as some producer might write it.
fn write(doc: &Doc, choices: &mut Choices, out: &mut String) {
    space(choices, out);
    match doc {
        Doc::Null => out.push_str("null"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Number(n) => out.push_str(&match choices.below(3) {
            0 => format!("{n}"),
            1 => format!("{n:e}"),
            _ => format!("{n:E}"),
        }),
        Doc::Text(s) => write_string(s, choices, out),
        Doc::Array(items) => {
            out.push('[');
            space(choices, out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, choices, out);
            }
            out.push(']');
        }
        Doc::Object(members) => {
            out.push('{');
            space(choices, out);
            let turn = choices.below(members.len() as u64 + 1) as usize;
            let (head, tail) = members.split_at(turn.min(members.len()));
            for (i, (name, value)) in tail.iter().chain(head).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(choices, out);
                write_string(name, choices, out);
                space(choices, out);
                out.push(':');
                write(value, choices, out);
            }
            out.push('}');
        }
    }
    space(choices, out);
}

fn write_string(s: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\n' => Some("\\n"),
            _ => None,
        };
        let must_escape = c < ' ' || c == '"' || c == '\\';
        match (choices.below(3), short) {
            (0, Some(short)) => out.push_str(short),
            (0 | 1, _) if !must_escape => out.push(c),
            (1, _) if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

fn space(choices: &mut Choices, out: &mut String) {
    out.push_str(["", "", " ", "\n  ", "\t", "\r\n"][choices.below(6) as usize]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn canonical_text_is_the_models(
        doc in doc(),
        seed in 1..u64::MAX,
        paths in proptest::collection::vec(path(), 0..3),
    ) {
        let mut text = String::new();
        write(&doc, &mut Choices(seed), &mut text);
        let tokens: Vec<Vec<String>> = paths.iter().map(|p| tokens(p)).collect();
        let mut expected = String::new();
        model(&doc, &tokens, &mut expected);
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let ignored = JsonPaths::Ignored(&paths);
        prop_assert_eq!(canonicalize(&text, ignored, MAX_JSON_BYTES), Ok(expected.clone()));
        let digest: [u8; 32] = Sha256::digest(&expected).into();
        for flush_at in [1, 5, canonical::FLUSH_AT] {
            let hashed = sha256_flushing_at(&text, ignored, MAX_JSON_BYTES, flush_at);
            prop_assert_eq!(hashed, Ok(digest), "flushing at {}", flush_at);
        }
        let none = JsonPaths::Ignored(&[]);
        prop_assert_eq!(canonicalize(&expected, none, MAX_JSON_BYTES), Ok(expected.clone()));
    }

    #[test]
    fn kept_text_is_the_models(
        doc in doc(),
        seed in 1..u64::MAX,
        paths in proptest::collection::vec(path(), 0..3),
    ) {
        let mut text = String::new();
        write(&doc, &mut Choices(seed), &mut text);
        let tokens: Vec<Vec<String>> = paths.iter().map(|p| tokens(p)).collect();
        let mut expected = String::new();
        model_only(&doc, &tokens, &mut expected);
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let only = JsonPaths::Only(&paths);
        prop_assert_eq!(canonicalize(&text, only, MAX_JSON_BYTES), Ok(expected.clone()));
        let digest: [u8; 32] = Sha256::digest(&expected).into();
        for flush_at in [1, 5, canonical::FLUSH_AT] {
            let hashed = sha256_flushing_at(&text, only, MAX_JSON_BYTES, flush_at);
            prop_assert_eq!(hashed, Ok(digest), "flushing at {}", flush_at);
        }
    }
}
