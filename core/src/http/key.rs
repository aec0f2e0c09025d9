//! The `Idempotency-Key` header: parsing what a client sent, writing what a sender sends.
//!
//! draft-ietf-httpapi-idempotency-key-header-07 makes the value an RFC 8941 structured
//! field String (`"…"`, an Item, so parameters may follow; they are ignored). Older
//! clients send the key bare; a bare token is accepted too. The key is then held to the
//! key rule of [`crate::RecordId`]: 1–255 bytes of printable ASCII.

use alloc::string::String;
use core::fmt;

use crate::id::{MAX_LEN, check_key};

/// Why an `Idempotency-Key` header cannot give a key. Every variant is answered with
/// 400 (see [`crate::http::Problem::key_malformed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request has no `Idempotency-Key` header and the endpoint needs one.
    Missing,
    /// The header field appears more than once, or its value is a list: a request has
    /// one key.
    Repeated {
        /// How many values were sent.
        count: usize,
    },
    /// The value is empty (or only whitespace), or an empty String `""`.
    Empty,
    /// A String without its closing quote.
    Unterminated,
    /// A backslash followed by anything but `"` or `\` (RFC 8941 §3.3.3).
    BadEscape {
        /// Byte offset of the backslash in the value.
        offset: usize,
    },
    /// A byte a key cannot hold: outside printable ASCII inside a String, or outside
    /// the token characters in a bare key.
    BadByte {
        /// Byte offset in the value.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// Text after the closing quote that is not a parameter (`;name=value`).
    TrailingText {
        /// Byte offset where it starts.
        offset: usize,
    },
    /// The key is longer than 255 bytes.
    TooLong {
        /// Its length in bytes, after unescaping.
        len: usize,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Idempotency-Key: ")?;
        match self {
            KeyError::Missing => f.write_str("missing, this endpoint needs one"),
            KeyError::Repeated { count } => write!(
                f,
                "{count} values, a request carries exactly one key (one header field, one String)"
            ),
            KeyError::Empty => write!(f, "empty, a key has 1 to {MAX_LEN} bytes"),
            KeyError::Unterminated => f.write_str("a String without its closing quote"),
            KeyError::BadEscape { offset } => write!(
                f,
                "backslash at byte {offset} escapes neither \" nor \\, the only escapes of a structured field String"
            ),
            KeyError::BadByte { offset, byte } => write!(
                f,
                "byte 0x{byte:02x} at offset {offset} is not allowed: a String holds printable ASCII (0x20-0x7E), a bare key token characters"
            ),
            KeyError::TrailingText { offset } => write!(
                f,
                "text at byte {offset} after the String, only parameters (;name=value) may follow"
            ),
            KeyError::TooLong { len } => write!(f, "{len} bytes, at most {MAX_LEN}"),
        }
    }
}

impl core::error::Error for KeyError {}

/// The key of a request, from all the values of its `Idempotency-Key` header fields, in
/// the order they came (an HTTP library's `get_all`). Returns `Ok(None)` when there is
/// none, so the caller decides whether the endpoint needs a key ([`KeyError::Missing`]).
///
/// # Errors
///
/// [`KeyError::Repeated`] for more than one value; otherwise as [`parse_key`].
pub fn key_from_fields<'v>(
    values: impl IntoIterator<Item = &'v [u8]>,
) -> Result<Option<String>, KeyError> {
    let mut values = values.into_iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let more = values.count();
    if more > 0 {
        return Err(KeyError::Repeated { count: more + 1 });
    }
    parse_key(first).map(Some)
}

/// The key of one `Idempotency-Key` field value: an RFC 8941 String with optional
/// parameters, or a bare token. Leading and trailing spaces and tabs are ignored.
///
/// A bare key is one or more token characters (RFC 9110 `tchar`: letters, digits and
/// ``!#$%&'*+-.^_`|~``) or `:`, `/`, `=`, so UUIDs, ULIDs and base64 keys sent unquoted
/// work.
///
/// # Errors
///
/// [`KeyError`] naming the byte and the rule.
pub fn parse_key(value: &[u8]) -> Result<String, KeyError> {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |at| at + 1);
    let trimmed = value.get(start..end).unwrap_or_default();
    let key = match trimmed.first() {
        None => return Err(KeyError::Empty),
        Some(b'"') => sf_string(trimmed, start)?,
        Some(_) => bare(trimmed, start)?,
    };
    checked(key)
}

/// A bare key: token characters only.
fn bare(value: &[u8], base: usize) -> Result<String, KeyError> {
    if value.contains(&b',') {
        // Two fields folded into one line: `a, b`.
        return Err(KeyError::Repeated {
            count: value.split(|&b| b == b',').count(),
        });
    }
    match value.iter().position(|&b| !is_bare_byte(b)) {
        Some(at) => Err(KeyError::BadByte {
            offset: base + at,
            byte: value[at],
        }),
        // All ASCII, checked just above.
        None => Ok(value.iter().map(|&b| char::from(b)).collect()),
    }
}

fn is_bare_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/=".contains(&b)
}

/// An RFC 8941 String (the value starts with `"`), then parameters or nothing.
fn sf_string(value: &[u8], base: usize) -> Result<String, KeyError> {
    let mut key = String::new();
    let mut at = 1;
    loop {
        match value.get(at) {
            None => return Err(KeyError::Unterminated),
            Some(b'"') => break,
            Some(b'\\') => match value.get(at + 1) {
                Some(&c @ (b'"' | b'\\')) => {
                    key.push(char::from(c));
                    at += 1;
                }
                _ => return Err(KeyError::BadEscape { offset: base + at }),
            },
            Some(&c @ 0x20..=0x7e) => key.push(char::from(c)),
            Some(&byte) => {
                return Err(KeyError::BadByte {
                    offset: base + at,
                    byte,
                });
            }
        }
        at += 1;
    }
    let rest = value.get(at + 1..).unwrap_or_default();
    let trimmed = rest.iter().position(|b| !matches!(b, b' ' | b'\t'));
    match trimmed.map(|skip| rest[skip]) {
        None | Some(b';') => Ok(key),
        Some(b',') => Err(KeyError::Repeated {
            count: 1 + rest.iter().filter(|&&b| b == b',').count(),
        }),
        Some(_) => Err(KeyError::TrailingText {
            offset: base + at + 1 + trimmed.unwrap_or(0),
        }),
    }
}

fn checked(key: String) -> Result<String, KeyError> {
    match check_key(&key) {
        Ok(()) => Ok(key),
        Err(crate::IdError::Empty { .. }) => Err(KeyError::Empty),
        Err(crate::IdError::TooLong { len, .. }) => Err(KeyError::TooLong { len }),
        Err(crate::IdError::NotPrintableAscii { offset, byte }) => {
            Err(KeyError::BadByte { offset, byte })
        }
        // `check_key` gives no other error; a bare or quoted key that got here is ASCII.
        Err(_) => Err(KeyError::Empty),
    }
}

/// The `Idempotency-Key` value a sender sends for `key`: an RFC 8941 String, `"` and `\`
/// escaped.
///
/// # Errors
///
/// The key rule of [`crate::RecordId`] ([`crate::IdError`]): a key that is empty, over
/// 255 bytes or not printable ASCII cannot be sent.
pub fn key_field_value(key: &str) -> Result<String, crate::IdError> {
    check_key(key)?;
    let mut value = String::with_capacity(key.len() + 2);
    value.push('"');
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            value.push('\\');
        }
        value.push(c);
    }
    value.push('"');
    Ok(value)
}
