//! RFC 8785 (JSON Canonicalization Scheme) canonical text, with ignored field paths.
//!
//! The input must be strict I-JSON (RFC 7493): no duplicate member names, no lone
//! surrogates, every number a finite IEEE 754 double, nesting at most [`MAX_DEPTH`].
//! The members at the ignored paths are removed, then the document is written per
//! RFC 8785: no whitespace, members sorted by the UTF-16 code units of their names,
//! strings with the minimal JCS escapes, numbers as ECMAScript `Number.prototype.toString`.
//!
//! An ignored path is an RFC 6901 JSON Pointer (`/meta/trace_id`, with `~1` for `/` and
//! `~0` for `~`) in which the reference token `*` matches every member of an object and
//! every element of an array (`/items/*/trace_id`). Array indices count in the original
//! document, whatever the other paths remove. A path that matches nothing removes nothing.
//! A member literally named `*` is reached only through the wildcard.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write as _};

use crate::quote::Quoted;

mod number;

/// Deepest nesting of arrays and objects accepted.
const MAX_DEPTH: usize = 128;
/// Longest number literal quoted whole in an error; longer ones are cut.
const MAX_QUOTED: usize = 40;

/// JSON text or an ignored path that cannot be canonicalized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not JSON: something else was expected at `offset`.
    Syntax {
        /// Byte offset of the offending byte (the text's length at its end).
        offset: usize,
        /// What the grammar allows there.
        expected: &'static str,
    },
    /// Something follows the document's single value.
    TrailingContent {
        /// Byte offset of the first byte after the value and its whitespace.
        offset: usize,
    },
    /// Arrays and objects nest deeper than the limit.
    TooDeep {
        /// Byte offset of the `[` or `{` that goes too deep.
        offset: usize,
        /// The deepest nesting accepted.
        limit: usize,
    },
    /// An object has two members with the same name (RFC 7493 §2.3).
    DuplicateMember {
        /// The repeated name, unescaped.
        name: String,
        /// Byte offset of the second occurrence's opening quote.
        offset: usize,
    },
    /// A `\u` escape is a surrogate without its partner (RFC 7493 §2.1).
    LoneSurrogate {
        /// Byte offset of the escape's backslash.
        offset: usize,
        /// The surrogate code unit.
        code_unit: u16,
    },
    /// A number is too large for an IEEE 754 double (RFC 7493 §2.2).
    NotFinite {
        /// The literal as written, cut after 40 bytes.
        literal: String,
        /// Byte offset of the literal.
        offset: usize,
    },
    /// The empty pointer names the whole document, which cannot be ignored.
    WholeDocumentPath,
    /// An ignored path is not an RFC 6901 JSON Pointer.
    InvalidPath {
        /// The path as given.
        path: String,
        /// The rule it breaks.
        reason: &'static str,
    },
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::Syntax { offset, expected } => write!(
                f,
                "json: invalid syntax at byte {offset}, expected {expected}"
            ),
            JsonError::TrailingContent { offset } => write!(
                f,
                "json: unexpected content at byte {offset} after the document's single value"
            ),
            JsonError::TooDeep { offset, limit } => write!(
                f,
                "json: nesting at byte {offset} is deeper than {limit} arrays and objects"
            ),
            JsonError::DuplicateMember { name, offset } => {
                write!(
                    f,
                    "json: duplicate member name {} at byte {offset}",
                    Quoted(name)
                )
            }
            JsonError::LoneSurrogate { offset, code_unit } => write!(
                f,
                "json: escape \\u{code_unit:04x} at byte {offset} is a lone surrogate, \
                 which I-JSON forbids"
            ),
            JsonError::NotFinite { literal, offset } => write!(
                f,
                "json: number {literal} at byte {offset} is not a finite IEEE 754 double"
            ),
            JsonError::WholeDocumentPath => write!(
                f,
                "ignored path \"\": the empty pointer names the whole document, \
                 which cannot be ignored"
            ),
            JsonError::InvalidPath { path, reason } => {
                write!(f, "ignored path {}: {reason}", Quoted(path))
            }
        }
    }
}

impl core::error::Error for JsonError {}

/// Canonical UTF-8 text of `text` per RFC 8785, with the members at `ignored_paths` removed first.
pub(crate) fn canonicalize(text: &str, ignored_paths: &[&str]) -> Result<String, JsonError> {
    let paths = ignored_paths
        .iter()
        .map(|p| parse_pointer(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut parser = Parser { text, pos: 0 };
    let mut value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.pos != text.len() {
        return Err(JsonError::TrailingContent { offset: parser.pos });
    }
    let paths: Vec<&[Token]> = paths.iter().map(Vec::as_slice).collect();
    prune(&mut value, &paths);
    let mut out = String::with_capacity(text.len());
    write_value(&value, &mut out);
    Ok(out)
}

/// A parsed JSON value; object members are kept sorted by UTF-16 code units.
enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(Vec<Member>),
}

/// One object member, with the offset of its name for error messages.
struct Member {
    name: String,
    offset: usize,
    value: Value,
}

/// Recursive-descent parser over `text`; `pos` is a byte offset.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn syntax(&self, expected: &'static str) -> JsonError {
        JsonError::Syntax {
            offset: self.pos,
            expected,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// A value, after whitespace; `depth` counts the arrays and objects around it.
    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{' | b'[') if depth >= MAX_DEPTH => Err(JsonError::TooDeep {
                offset: self.pos,
                limit: MAX_DEPTH,
            }),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            _ => Err(self.syntax("a JSON value")),
        }
    }

    fn literal(&mut self, word: &'static str, value: Value) -> Result<Value, JsonError> {
        let end = self.pos.saturating_add(word.len());
        if self.text.as_bytes().get(self.pos..end) != Some(word.as_bytes()) {
            return Err(self.syntax(word));
        }
        self.pos = end;
        Ok(value)
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.pos += 1; // '{'
        let mut members = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a member name string"));
            }
            let offset = self.pos;
            let name = self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.syntax("':'"));
            }
            self.pos += 1;
            let value = self.value(depth)?;
            members.push(Member {
                name,
                offset,
                value,
            });
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("',' or '}'")),
            }
        }
        // By UTF-16 code units, equal names in text order (the offsets make the order
        // total), so the later of two equal names is the duplicate.
        let order = crate::order::sorted_positions(members.len(), &mut |a, b| {
            let (a, b) = (&members[a], &members[b]);
            a.name
                .encode_utf16()
                .cmp(b.name.encode_utf16())
                .then(a.offset.cmp(&b.offset))
        });
        let mut slots: Vec<Option<Member>> = members.into_iter().map(Some).collect();
        let members: Vec<Member> = order
            .into_iter()
            .filter_map(|at| slots.get_mut(at)?.take())
            .collect();
        let duplicate = members
            .windows(2)
            .filter_map(|pair| match pair {
                [a, b] if a.name == b.name => Some(b),
                _ => None,
            })
            .min_by_key(|m| m.offset);
        if let Some(m) = duplicate {
            return Err(JsonError::DuplicateMember {
                name: m.name.clone(),
                offset: m.offset,
            });
        }
        Ok(Value::Object(members))
    }

    /// A string starting at its opening quote, unescaped.
    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1; // '"'
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // Both ends sit next to ASCII bytes or at the text's ends: char boundaries.
            let run = self.text.get(start..self.pos);
            out.push_str(run.ok_or_else(|| self.syntax("a character"))?);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => out.push(self.escape()?),
                Some(_) => return Err(self.syntax("'\\u00XX' for a control character")),
                None => return Err(self.syntax("'\"' closing the string")),
            }
        }
    }

    /// An escape sequence starting at its backslash.
    fn escape(&mut self) -> Result<char, JsonError> {
        let start = self.pos;
        self.pos += 1; // '\\'
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                return self.unicode_escape(start);
            }
            _ => return Err(self.syntax("one of '\"\\/bfnrtu' after '\\'")),
        };
        self.pos += 1;
        Ok(c)
    }

    /// The rest of a `\u` escape (and its low surrogate partner, if any).
    fn unicode_escape(&mut self, start: usize) -> Result<char, JsonError> {
        let unit = self.hex4()?;
        let lone = JsonError::LoneSurrogate {
            offset: start,
            code_unit: unit,
        };
        let code = match unit {
            0xD800..=0xDBFF => {
                let next = self.pos.saturating_add(2);
                if self.text.as_bytes().get(self.pos..next) != Some(b"\\u") {
                    return Err(lone);
                }
                self.pos = next;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(lone);
                }
                0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(lone),
            _ => u32::from(unit),
        };
        char::from_u32(code).ok_or(lone)
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let mut unit = 0u16;
        for _ in 0..4 {
            let digit = self.peek().and_then(|b| char::from(b).to_digit(16));
            let digit = digit.ok_or_else(|| self.syntax("four hex digits after '\\u'"))?;
            unit = (unit << 4) | digit as u16; // digit < 16
            self.pos += 1;
        }
        Ok(unit)
    }

    fn digits(&mut self) -> Result<(), JsonError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.syntax("a digit"));
        }
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        Ok(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as a finite double.
    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        if self.peek() == Some(b'0') {
            self.pos += 1;
        } else {
            self.digits()?;
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
        }
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        match number::parse(literal) {
            n if n.is_finite() => Ok(Value::Number(n)),
            _ => {
                let mut quoted = String::from(literal.get(..MAX_QUOTED).unwrap_or(literal));
                if quoted.len() < literal.len() {
                    quoted.push_str("...");
                }
                Err(JsonError::NotFinite {
                    literal: quoted,
                    offset: start,
                })
            }
        }
    }
}

/// One reference token of an ignored path.
enum Token {
    /// `*`: every member or element.
    Any,
    /// A member name, or an array index when it is one.
    Name(String),
}

impl Token {
    fn matches_name(&self, name: &str) -> bool {
        match self {
            Token::Any => true,
            Token::Name(n) => n == name,
        }
    }

    /// RFC 6901 array index: `0` or a digit string without a leading zero.
    fn matches_index(&self, index: usize) -> bool {
        match self {
            Token::Any => true,
            Token::Name(n) => {
                let canonical = n == "0" || !n.starts_with('0');
                canonical && n.bytes().all(|b| b.is_ascii_digit()) && n.parse() == Ok(index)
            }
        }
    }
}

fn parse_pointer(path: &str) -> Result<Vec<Token>, JsonError> {
    if path.is_empty() {
        return Err(JsonError::WholeDocumentPath);
    }
    let invalid = |reason| JsonError::InvalidPath {
        path: path.into(),
        reason,
    };
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("must be empty or start with '/'"))?;
    rest.split('/')
        .map(|raw| {
            if raw == "*" {
                return Ok(Token::Any);
            }
            let mut name = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                let c = match c {
                    '~' => match chars.next() {
                        Some('0') => '~',
                        Some('1') => '/',
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    },
                    c => c,
                };
                name.push(c);
            }
            Ok(Token::Name(name))
        })
        .collect()
}

/// Removes from `value`'s children those that some path in `paths` ends at, and descends
/// into those that some path continues through. Every path here is non-empty.
fn prune(value: &mut Value, paths: &[&[Token]]) {
    if paths.is_empty() {
        return;
    }
    let visit = |child: &mut Value, matches: &dyn Fn(&Token) -> bool| {
        let mut deeper: Vec<&[Token]> = Vec::new();
        for (first, rest) in paths.iter().filter_map(|p| p.split_first()) {
            if matches(first) {
                if rest.is_empty() {
                    return false;
                }
                deeper.push(rest);
            }
        }
        prune(child, &deeper);
        true
    };
    match value {
        Value::Object(members) => {
            members.retain_mut(|m| visit(&mut m.value, &|t| t.matches_name(&m.name)));
        }
        Value::Array(items) => {
            let mut index = 0;
            items.retain_mut(|item| {
                let keep = visit(item, &|t| t.matches_index(index));
                index += 1;
                keep
            });
        }
        _ => {}
    }
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(ryu_js::Buffer::new().format_finite(*n)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, m) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(&m.name, out);
                out.push(':');
                write_value(&m.value, out);
            }
            out.push('}');
        }
    }
}

/// A string per RFC 8785 §3.2.2.2: short escapes, `\u00xx` for other controls, else literal.
fn write_string(s: &str, out: &mut String) {
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
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c)); // writing to a String never fails
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests;
