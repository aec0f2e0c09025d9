//! Request fingerprints: SHA-256 over the validated business input.
//!
//! The key identifies the intent; the fingerprint detects a key reused for a different
//! request. Three ways to make one, all here so every target computes the same bytes:
//!
//! - [`Fingerprint::of_bytes`]: plain SHA-256 of the bytes as given.
//! - [`Fingerprint::of_fields`]: named fields, order-independent, duplicate names refused.
//!   The hashed bytes are, for each field in ascending byte order of its name:
//!   `u64 big-endian name length, name, u64 big-endian value length, value`.
//! - [`Fingerprint::of_json`] (feature `json`): plain SHA-256 of the RFC 8785 canonical
//!   text, after the members at the ignored paths (RFC 6901 pointers, `*` matching every
//!   member or element) are removed. What it accepts, and every limit (size, nesting,
//!   numbers, strings, duplicate names), is listed in one place: the [`json`] module.
//!
//! A server in any language reproduces them with its own SHA-256.

#[cfg(feature = "json")]
pub mod json;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::quote::Quoted;

#[cfg(feature = "json")]
pub use json::{JsonError, JsonPaths, MAX_JSON_BYTES, MAX_JSON_DEPTH};

/// SHA-256 of a request's business input, 32 bytes; shown as 64 lower-case hex digits.
///
/// Serialized as the derive would: a newtype struct around a tuple of 32 bytes (in
/// postcard, the 32 bytes as they are). [`Deserialize`] is written by hand only to read
/// the bytes in a loop: serde's impl for `[u8; 32]` unrolls it, 2.4 KB of wasm.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Fingerprint(pub [u8; 32]);

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fingerprint, D::Error> {
        /// The newtype around the bytes.
        struct Newtype;
        /// The 32 bytes, as a tuple.
        struct Bytes;

        impl<'de> Visitor<'de> for Newtype {
            type Value = Fingerprint;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a fingerprint")
            }

            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> Result<Fingerprint, D::Error> {
                deserializer.deserialize_tuple(32, Bytes)
            }
        }

        impl<'de> Visitor<'de> for Bytes {
            type Value = Fingerprint;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of length 32")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Fingerprint, A::Error> {
                let mut out = [0u8; 32];
                for (i, byte) in out.iter_mut().enumerate() {
                    *byte = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(i, &self))?;
                }
                Ok(Fingerprint(out))
            }
        }

        deserializer.deserialize_newtype_struct("Fingerprint", Newtype)
    }
}

/// Input that cannot be fingerprinted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// Two fields have the same name.
    DuplicateField {
        /// The repeated name.
        name: String,
    },
    /// A hex fingerprint that is not 64 hex digits.
    BadHex {
        /// Length of the text given, in characters.
        len: usize,
    },
    /// The JSON text or an ignored path was refused.
    #[cfg(feature = "json")]
    Json(JsonError),
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintError::DuplicateField { name } => {
                write!(
                    f,
                    "fields: name {} appears twice, names must be unique",
                    Quoted(name)
                )
            }
            FingerprintError::BadHex { len } => write!(
                f,
                "fingerprint: {len} characters, expected 64 hex digits (0-9, a-f)"
            ),
            #[cfg(feature = "json")]
            FingerprintError::Json(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for FingerprintError {}

#[cfg(feature = "json")]
impl From<JsonError> for FingerprintError {
    fn from(e: JsonError) -> FingerprintError {
        FingerprintError::Json(e)
    }
}

impl Fingerprint {
    /// SHA-256 of `bytes` as given.
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(bytes).into())
    }

    /// SHA-256 over named fields, independent of their order.
    ///
    /// # Errors
    ///
    /// [`FingerprintError::DuplicateField`] when a name repeats.
    pub fn of_fields(fields: &[(&str, &[u8])]) -> Result<Fingerprint, FingerprintError> {
        let order = crate::order::sorted_positions(fields.len(), &mut |a, b| {
            fields[a].0.as_bytes().cmp(fields[b].0.as_bytes())
        });
        let sorted: Vec<&(&str, &[u8])> =
            order.into_iter().filter_map(|at| fields.get(at)).collect();
        if let Some(pair) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(FingerprintError::DuplicateField {
                name: pair[0].0.into(),
            });
        }
        let mut hasher = Sha256::new();
        for (name, value) in sorted {
            hasher.update((name.len() as u64).to_be_bytes());
            hasher.update(name.as_bytes());
            hasher.update((value.len() as u64).to_be_bytes());
            hasher.update(value);
        }
        Ok(Fingerprint(hasher.finalize().into()))
    }

    /// SHA-256 of the RFC 8785 canonical form of `json`, without the members at
    /// `ignored_paths` (trace ids and other non-business fields). `json` may be up to
    /// [`MAX_JSON_BYTES`] long; the limits are listed in the [`json` module](json).
    ///
    /// # Errors
    ///
    /// [`FingerprintError::Json`] for text that is larger than the limit, not JSON, or
    /// not within the rules and limits of canonical JSON, or a malformed path.
    #[cfg(feature = "json")]
    pub fn of_json(json: &str, ignored_paths: &[&str]) -> Result<Fingerprint, FingerprintError> {
        Fingerprint::of_json_up_to(json, ignored_paths, MAX_JSON_BYTES)
    }

    /// [`Fingerprint::of_json`] with another size limit: `json` may be up to `max_bytes`
    /// long.
    ///
    /// # Errors
    ///
    /// As [`Fingerprint::of_json`].
    #[cfg(feature = "json")]
    pub fn of_json_up_to(
        json: &str,
        ignored_paths: &[&str],
        max_bytes: usize,
    ) -> Result<Fingerprint, FingerprintError> {
        Fingerprint::of_json_selected(json, JsonPaths::Ignored(ignored_paths), max_bytes)
    }

    /// SHA-256 of the RFC 8785 canonical form of `json` with the members `paths` select
    /// ([`JsonPaths`]: all but some, or only some); `json` may be up to `max_bytes` long.
    ///
    /// # Errors
    ///
    /// As [`Fingerprint::of_json`].
    #[cfg(feature = "json")]
    pub fn of_json_selected(
        json: &str,
        paths: JsonPaths<'_>,
        max_bytes: usize,
    ) -> Result<Fingerprint, FingerprintError> {
        Ok(Fingerprint(json::canonical_sha256(json, paths, max_bytes)?))
    }

    /// The RFC 8785 canonical text that [`Fingerprint::of_json`] hashes.
    ///
    /// # Errors
    ///
    /// As [`Fingerprint::of_json`].
    #[cfg(feature = "json")]
    pub fn canonical_json(json: &str, ignored_paths: &[&str]) -> Result<String, FingerprintError> {
        Fingerprint::canonical_json_up_to(json, ignored_paths, MAX_JSON_BYTES)
    }

    /// [`Fingerprint::canonical_json`] with another size limit: `json` may be up to
    /// `max_bytes` long.
    ///
    /// # Errors
    ///
    /// As [`Fingerprint::of_json`].
    #[cfg(feature = "json")]
    pub fn canonical_json_up_to(
        json: &str,
        ignored_paths: &[&str],
        max_bytes: usize,
    ) -> Result<String, FingerprintError> {
        Fingerprint::canonical_json_selected(json, JsonPaths::Ignored(ignored_paths), max_bytes)
    }

    /// The RFC 8785 canonical text that [`Fingerprint::of_json_selected`] hashes.
    ///
    /// # Errors
    ///
    /// As [`Fingerprint::of_json`].
    #[cfg(feature = "json")]
    pub fn canonical_json_selected(
        json: &str,
        paths: JsonPaths<'_>,
        max_bytes: usize,
    ) -> Result<String, FingerprintError> {
        Ok(json::canonicalize(json, paths, max_bytes)?)
    }

    /// Parses 64 hex digits (either case).
    ///
    /// # Errors
    ///
    /// [`FingerprintError::BadHex`].
    pub fn from_hex(text: &str) -> Result<Fingerprint, FingerprintError> {
        let bad = || FingerprintError::BadHex {
            len: text.chars().count(),
        };
        let digits = text.as_bytes();
        if digits.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
            let hi = hex_value(pair[0]).ok_or_else(bad)?;
            let lo = hex_value(pair[1]).ok_or_else(bad)?;
            *byte = hi << 4 | lo;
        }
        Ok(Fingerprint(out))
    }

    /// 64 lower-case hex digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            out.push(char::from(DIGITS[usize::from(byte >> 4)]));
            out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
        }
        out
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn bytes_is_plain_sha256() {
        // FIPS 180-2 test vector for "abc".
        assert_eq!(
            Fingerprint::of_bytes(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            Fingerprint::of_bytes(b"").to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn fields_ignore_order_and_refuse_duplicates() {
        let a = Fingerprint::of_fields(&[("amount", b"100"), ("to", b"acct-9")]).unwrap();
        let b = Fingerprint::of_fields(&[("to", b"acct-9"), ("amount", b"100")]).unwrap();
        assert_eq!(a, b);
        // Length prefixes keep ("ab","c") apart from ("a","bc").
        let c = Fingerprint::of_fields(&[("ab", b"c")]).unwrap();
        let d = Fingerprint::of_fields(&[("a", b"bc")]).unwrap();
        assert_ne!(c, d);
        let mut expected = Vec::new();
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(b"ab");
        expected.extend_from_slice(&1u64.to_be_bytes());
        expected.extend_from_slice(b"c");
        assert_eq!(c, Fingerprint::of_bytes(&expected));
        let err = Fingerprint::of_fields(&[("a", b"1"), ("b", b"2"), ("a", b"3")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "fields: name \"a\" appears twice, names must be unique"
        );
    }

    #[test]
    fn hex_round_trips_and_refuses_bad_text() {
        let fp = Fingerprint::of_bytes(b"x");
        assert_eq!(Fingerprint::from_hex(&fp.to_hex()).unwrap(), fp);
        assert_eq!(
            Fingerprint::from_hex(&fp.to_hex().to_uppercase()).unwrap(),
            fp
        );
        assert_eq!(
            Fingerprint::from_hex("abc").unwrap_err().to_string(),
            "fingerprint: 3 characters, expected 64 hex digits (0-9, a-f)"
        );
        let mut bad = fp.to_hex();
        bad.replace_range(0..1, "g");
        assert!(Fingerprint::from_hex(&bad).is_err());
        assert!(Fingerprint::from_hex(&"é".repeat(32)).is_err());
    }

    #[cfg(feature = "json")]
    #[test]
    fn json_hashes_the_canonical_text_without_ignored_members() {
        let a = Fingerprint::of_json(r#"{"b":1,"a":"x","trace":"t-1"}"#, &["/trace"]).unwrap();
        let b = Fingerprint::of_json(r#"{ "a" : "x", "b" : 1.0 , "trace":"t-2"}"#, &["/trace"])
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a, Fingerprint::of_bytes(br#"{"a":"x","b":1}"#));
    }
}
