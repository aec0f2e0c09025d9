//! RFC 8785 (JSON Canonicalization Scheme) canonical text, with ignored field paths.
//!
//! The input is I-JSON (RFC 7493) with one stated exception, noncharacters (below): no
//! duplicate member names, no surrogate code points, every number a finite IEEE 754
//! double. The members at the ignored paths are removed, then the document is written
//! per RFC 8785: no whitespace, members sorted by the UTF-16 code units of their names,
//! strings with the minimal JCS escapes, numbers as ECMAScript `Number.prototype.toString`.
//!
//! An ignored path is an RFC 6901 JSON Pointer (`/meta/trace_id`, with `~1` for `/` and
//! `~0` for `~`) in which the reference token `*` matches every member of an object and
//! every element of an array (`/items/*/trace_id`). Array indices count in the original
//! document, whatever the other paths remove. A path that matches nothing removes nothing.
//! A member literally named `*` is reached only through the wildcard.
//!
//! # Limits
//!
//! Every limit of canonical JSON, on every target (the npm package's README and
//! `idem --help` repeat this list):
//!
//! | what | limit | refused with |
//! |---|---|---|
//! | document size | [`MAX_JSON_BYTES`] = 16 MiB of UTF-8 by default, checked before parsing; [`Fingerprint::of_json_up_to`](crate::Fingerprint::of_json_up_to) takes another | [`JsonError::TooLarge`] |
//! | nesting | [`MAX_JSON_DEPTH`] = 10,000 arrays and objects | [`JsonError::TooDeep`] |
//! | duplicate member names | refused, in every object (ignored ones too); names are compared after unescaping | [`JsonError::DuplicateMember`] |
//! | numbers | any length and precision; each rounds to the nearest double (ties to even), a magnitude that rounds past `f64::MAX` is refused, one that rounds below the smallest subnormal is 0 | [`JsonError::NotFinite`] |
//! | strings and names | any Unicode scalar value, noncharacters included; a `\u` escape of a surrogate must be half of a pair | [`JsonError::LoneSurrogate`] |
//!
//! There is no limit of its own on a string's or a number's length, nor on the number of
//! members or elements: the document size bounds them all.
//!
//! *Nesting.* The parser keeps its own stack (no recursion), so depth costs no call stack;
//! the limit bounds the memory of that stack (tens of bytes a level) and sits well above
//! what JavaScript producers make: `JSON.stringify` in V8 (Node, Chrome) stops near 4,000
//! levels. RFC 8785 implementations that recurse accept what their call stack holds.
//!
//! *Noncharacters* (U+FDD0 to U+FDEF and the last two code points of every plane, U+FFFF
//! and U+10FFFF among them) are accepted and written as they are, although RFC 7493 §2.1
//! forbids them. They are Unicode scalar values with one UTF-8 form each, so two different
//! documents never share a canonical text because of them; Unicode (Corrigendum #9) allows
//! them in interchange; `JSON.parse` and RFC 8785 implementations such as the
//! `canonicalize` npm package accept them, so a server elsewhere canonicalizes them the
//! same way. Refusing them would
//! turn requests that every other part of a system accepts into errors, and buys no
//! safety. Surrogates are different: they have no UTF-8 form, and a converter that
//! replaces them with U+FFFD would give different strings one fingerprint. So an escaped
//! lone surrogate is refused here, and the JavaScript bindings refuse a string argument
//! that is not well-formed UTF-16 before converting it.
//!
//! # Memory
//!
//! The document is read once, front to back, and written straight into its canonical
//! text; no tree is built. An object's members are written as they come and put in order
//! when it closes, through a buffer as large as that object's text. Canonical text is
//! about as long as its input, so [`Fingerprint::canonical_json`](crate::Fingerprint::canonical_json)
//! holds about two documents' worth: the input and the output (three for an input that is
//! one large object: its members are reordered through a copy). [`Fingerprint::of_json`](crate::Fingerprint::of_json)
//! hashes the text as it becomes final (everything outside open objects) and keeps only
//! the rest, so an array of many values or objects costs little beyond the input itself.

use alloc::string::String;
use core::fmt;
use sha2::{Digest, Sha256};

use crate::quote::Quoted;
use canonical::{Canonical, Select};

mod canonical;
mod number;
mod pointer;
mod written;

/// Largest JSON text, in bytes of UTF-8, that [`Fingerprint::of_json`](crate::Fingerprint::of_json)
/// and [`Fingerprint::canonical_json`](crate::Fingerprint::canonical_json) accept: 16 MiB.
///
/// Checked before parsing, so an oversized document costs nothing. Request payloads are
/// far smaller; the `_up_to` variants take another limit.
pub const MAX_JSON_BYTES: usize = 16 << 20;

/// Deepest nesting of arrays and objects accepted: 10,000.
pub const MAX_JSON_DEPTH: usize = 10_000;

/// Longest number literal quoted whole in an error; longer ones are cut.
const MAX_QUOTED: usize = 40;

/// JSON text or an ignored path that cannot be canonicalized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is larger than the limit; refused before parsing.
    TooLarge {
        /// Size of the text, in bytes of UTF-8.
        size: usize,
        /// The largest size accepted, in bytes.
        limit: usize,
    },
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
            JsonError::TooLarge { size, limit } => write!(
                f,
                "json: {size} bytes, more than the limit of {limit} bytes"
            ),
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

/// Which members and elements of a JSON document count toward its fingerprint, by RFC
/// 6901 JSON Pointers with the wildcard `*` (the [module docs](self) say how they match).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonPaths<'p> {
    /// Every member and element but those the pointers reach (trace ids, timestamps):
    /// what [`Fingerprint::of_json`](crate::Fingerprint::of_json) takes.
    Ignored(&'p [&'p str]),
    /// Only what the pointers reach, whole, with the objects and arrays on the way to it
    /// (the rest of their members and elements removed): `/amount` and `/items/*/sku`
    /// keep `{"amount":…,"items":[{"sku":…},…]}`. A pointer that reaches nothing keeps
    /// nothing: a scalar on its way is removed, an object or array on its way stays,
    /// empty if nothing in it is reached; with no pointer, the document's object or
    /// array is left empty (a scalar document is kept).
    Only(&'p [&'p str]),
}

impl<'p> JsonPaths<'p> {
    fn parts(self) -> (Select, &'p [&'p str]) {
        match self {
            JsonPaths::Ignored(paths) => (Select::Removed, paths),
            JsonPaths::Only(paths) => (Select::Only, paths),
        }
    }
}

/// Canonical UTF-8 text of `text` per RFC 8785, with the members `paths` select.
pub(crate) fn canonicalize(
    text: &str,
    paths: JsonPaths<'_>,
    max_bytes: usize,
) -> Result<String, JsonError> {
    let mut canonical = Canonical::new(text, paths.parts(), max_bytes, canonical::FLUSH_AT)?;
    canonical.run(None)?;
    Ok(canonical.into_text())
}

/// SHA-256 of the text [`canonicalize`] returns, hashed as it becomes final.
pub(crate) fn canonical_sha256(
    text: &str,
    paths: JsonPaths<'_>,
    max_bytes: usize,
) -> Result<[u8; 32], JsonError> {
    sha256_flushing_at(text, paths, max_bytes, canonical::FLUSH_AT)
}

/// [`canonical_sha256`], offering the hash final text whenever `flush_at` bytes wait.
fn sha256_flushing_at(
    text: &str,
    paths: JsonPaths<'_>,
    max_bytes: usize,
    flush_at: usize,
) -> Result<[u8; 32], JsonError> {
    let mut hasher = Sha256::new();
    let rest = {
        let mut hash = |final_text: &str| hasher.update(final_text);
        let mut canonical = Canonical::new(text, paths.parts(), max_bytes, flush_at)?;
        canonical.run(Some(&mut hash))?;
        canonical.into_text()
    };
    hasher.update(rest);
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_prop;
