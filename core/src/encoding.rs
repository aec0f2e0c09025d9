//! The persisted byte formats: a format-version byte, then postcard 1.x.
//!
//! postcard's wire format is documented and frozen, needs no std, and gives identical
//! bytes on every target, so a file written by a terminal today decodes on any build
//! later. Every persisted value starts with its format version: [`FORMAT_VERSION`] for a
//! value whose layout never changed, its own newer version for one that did
//! ([`RECORD_VERSION`]; an intent and a ledger snapshot are at version 3: 2 added the
//! resolution of an expired intent, 3 the state Unknown); a value written by a newer format is refused with
//! [`DecodeError::NewerFormat`], never misread, and every older version is still read.
//!
//! Record ids are keys of ordered tables, so they have their own encoding,
//! [`RecordId::to_key_bytes`]: tenant, operation and key, each behind its length byte.
//! Records of one tenant (and of one tenant and operation) are then contiguous.

use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::fmt;
use serde::{Serialize, de::DeserializeOwned};

use crate::{Record, RecordId};

/// The first format version, still current for every value whose layout never changed.
pub const FORMAT_VERSION: u8 = 1;

/// The format version [`Record::encode`] writes. Version 2 added
/// [`crate::Status::Tombstone`]; version 1 bytes, which cannot hold one, read unchanged.
pub const RECORD_VERSION: u8 = 2;

/// Bytes that do not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// No bytes at all.
    Empty,
    /// Written by a newer format than this build reads.
    NewerFormat {
        /// The version byte found.
        found: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// The version byte is 0, which no format ever used.
    BadVersion,
    /// The bytes after the version byte are not a valid value.
    Malformed {
        /// What was being decoded.
        what: &'static str,
    },
    /// The bytes decode but break a rule of the value (an invalid id, for instance).
    Invalid {
        /// What was being decoded.
        what: &'static str,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Empty => f.write_str("encoded value: empty, expected a version byte"),
            DecodeError::NewerFormat { found, supported } => write!(
                f,
                "encoded value: format version {found} is newer than this build reads (at most {supported})"
            ),
            DecodeError::BadVersion => f.write_str("encoded value: format version 0 is not valid"),
            DecodeError::Malformed { what } => write!(f, "{what}: bytes do not decode"),
            DecodeError::Invalid { what } => write!(f, "{what}: decoded value breaks its rules"),
        }
    }
}

impl core::error::Error for DecodeError {}

/// Encodes `value` behind [`FORMAT_VERSION`].
#[must_use]
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    encode_as(FORMAT_VERSION, value)
}

/// Encodes `value` behind the version byte `version`.
#[must_use]
pub fn encode_as<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(version);
    // postcard only fails on a writer error or on types it cannot represent (maps
    // of unknown length); a Vec never refuses and our types are plain data. (Not
    // `expect`: it would keep postcard's error names in the wasm for a panic that
    // cannot happen.)
    postcard::to_extend(value, out)
        .unwrap_or_else(|_| unreachable!("postcard encodes plain data into a Vec"))
}

/// Decodes bytes made by [`encode`]; `what` names the value in errors.
///
/// # Errors
///
/// [`DecodeError`] for empty, newer-format or malformed bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, DecodeError> {
    let (_, body) = split_version(bytes, FORMAT_VERSION)?;
    decode_body(body, what)
}

/// Splits off the version byte of a value whose newest format is `newest`: the version
/// (1 to `newest`) and the bytes after it.
///
/// # Errors
///
/// [`DecodeError::Empty`], [`DecodeError::BadVersion`] or [`DecodeError::NewerFormat`].
pub fn split_version(bytes: &[u8], newest: u8) -> Result<(u8, &[u8]), DecodeError> {
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    match version {
        0 => Err(DecodeError::BadVersion),
        found if found > newest => Err(DecodeError::NewerFormat {
            found,
            supported: newest,
        }),
        version => Ok((version, body)),
    }
}

/// Decodes the postcard bytes after a version byte, which must hold one value and
/// nothing more.
///
/// # Errors
///
/// [`DecodeError::Malformed`] naming `what`.
pub fn decode_body<T: DeserializeOwned>(body: &[u8], what: &'static str) -> Result<T, DecodeError> {
    match postcard::take_from_bytes(body) {
        Ok((value, [])) => Ok(value),
        _ => Err(DecodeError::Malformed { what }),
    }
}

/// The postcard bytes of a value whose version 2 added one last field to version 1,
/// with the version: the bytes after the version byte, and for version 1 those bytes
/// with a 0 after them, so that they read as version 2 with that field absent (postcard
/// writes a `None` and an empty list as the byte 0). Versions from 2 to `newest` share
/// the layout of version 2.
///
/// # Errors
///
/// As [`split_version`].
pub(crate) fn body_with_last_field(
    bytes: &[u8],
    newest: u8,
) -> Result<(u8, Cow<'_, [u8]>), DecodeError> {
    match split_version(bytes, newest)? {
        (1, body) => {
            let mut out = Vec::with_capacity(body.len() + 1);
            out.extend_from_slice(body);
            out.push(0);
            Ok((1, Cow::Owned(out)))
        }
        (version, body) => Ok((version, Cow::Borrowed(body))),
    }
}

impl Record {
    /// The persisted bytes of this record, behind [`RECORD_VERSION`].
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_as(RECORD_VERSION, self)
    }

    /// Decodes bytes made by [`Record::encode`], of this format version or an older one.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format or malformed bytes, and for version 1
    /// bytes that hold a tombstone (a version 1 writer had none).
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        const WHAT: &str = "record";
        let (version, body) = split_version(bytes, RECORD_VERSION)?;
        let record: Record = decode_body(body, WHAT)?;
        if version == 1 && matches!(record.status, crate::Status::Tombstone { .. }) {
            return Err(DecodeError::Malformed { what: WHAT });
        }
        Ok(record)
    }
}

impl RecordId {
    /// The ordered-table key: `len(tenant) tenant len(operation) operation key`.
    #[must_use]
    pub fn to_key_bytes(&self) -> Vec<u8> {
        let mut out = Self::prefix(Some(self.tenant()), Some(self.operation()));
        out.extend_from_slice(self.key().as_bytes());
        out
    }

    /// The key prefix shared by all records of `tenant` (and of `operation`, when both
    /// are given). With no tenant the prefix is empty: every record matches.
    #[must_use]
    pub fn prefix(tenant: Option<&str>, operation: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(tenant) = tenant {
            push_short(&mut out, tenant);
            if let Some(operation) = operation {
                push_short(&mut out, operation);
            }
        }
        out
    }

    /// Parses bytes made by [`RecordId::to_key_bytes`] and validates the parts.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Malformed`] or [`DecodeError::Invalid`].
    pub fn from_key_bytes(bytes: &[u8]) -> Result<RecordId, DecodeError> {
        const WHAT: &str = "record id";
        let (tenant, rest) = take_short(bytes).ok_or(DecodeError::Malformed { what: WHAT })?;
        let (operation, key) = take_short(rest).ok_or(DecodeError::Malformed { what: WHAT })?;
        let key = core::str::from_utf8(key).map_err(|_| DecodeError::Malformed { what: WHAT })?;
        RecordId::new(tenant, operation, key).map_err(|_| DecodeError::Invalid { what: WHAT })
    }
}

fn push_short(out: &mut Vec<u8>, text: &str) {
    // Tenant and operation are at most 255 bytes in a valid id; a longer text given as a
    // filter can match nothing, and its truncated length byte would only narrow the scan.
    out.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(text.as_bytes());
}

fn take_short(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    let len = usize::from(len);
    if rest.len() < len {
        return None;
    }
    let (text, rest) = rest.split_at(len);
    Some((core::str::from_utf8(text).ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fingerprint, Generation, Outcome, Status, Timestamp, Verdict};
    use alloc::string::ToString;
    use alloc::vec;

    fn record(status: Status) -> Record {
        Record {
            fingerprint: Fingerprint([0xab; 32]),
            generation: Generation(300),
            created_at: Timestamp(1_700_000_000_000),
            updated_at: Timestamp(1_700_000_000_500),
            status,
        }
    }

    fn hex(bytes: &[u8]) -> alloc::string::String {
        bytes.iter().map(|b| alloc::format!("{b:02x}")).collect()
    }

    /// Golden bytes: a change here is a change of the file format, and needs a new
    /// format version and a migration, not an edit of the expected text.
    #[test]
    fn record_bytes_are_frozen() {
        let fp = "ab".repeat(32);
        let body = alloc::format!("{fp}ac0280d095ffbc31f4d395ffbc31");
        let cases = [
            (
                record(Status::Pending {
                    lease_until: Timestamp(1_700_000_030_000),
                }),
                "00b0ba97ffbc31",
            ),
            (record(Status::Unknown), "02"),
            (
                record(Status::Settled {
                    verdict: Verdict::Failed,
                    outcome: Outcome::new(-1, vec![1, 2, 3]),
                    completed_at: Timestamp(1_700_000_000_500),
                    expires_at: Timestamp(1_700_086_400_500),
                }),
                "01010103010203f4d395ffbc31f48bafa8bd31",
            ),
        ];
        for (record, tail) in cases {
            let bytes = record.encode();
            assert_eq!(hex(&bytes), alloc::format!("02{body}{tail}"), "{record:?}");
            assert_eq!(Record::decode(&bytes).unwrap(), record);
            // Version 1 wrote the same body: files written before tombstones read as they were.
            let v1 = unhex(&alloc::format!("01{body}{tail}"));
            assert_eq!(Record::decode(&v1).unwrap(), record);
        }
        let tombstone = record(Status::Tombstone {
            verdict: Verdict::Succeeded,
            completed_at: Timestamp(1_700_000_000_500),
            expires_at: Timestamp(1_702_592_000_500),
        });
        let tail = "0300f4d395ffbc31f4e390d3c631";
        assert_eq!(hex(&tombstone.encode()), alloc::format!("02{body}{tail}"));
        assert_eq!(Record::decode(&tombstone.encode()).unwrap(), tombstone);
        assert_eq!(
            Record::decode(&unhex(&alloc::format!("01{body}{tail}"))),
            Err(DecodeError::Malformed { what: "record" }),
            "a version 1 writer had no tombstones"
        );
    }

    fn unhex(text: &str) -> alloc::vec::Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn refuses_newer_formats_and_garbage() {
        let mut bytes = record(Status::Unknown).encode();
        bytes[0] = 3;
        assert_eq!(
            Record::decode(&bytes).unwrap_err().to_string(),
            "encoded value: format version 3 is newer than this build reads (at most 2)"
        );
        assert_eq!(Record::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(Record::decode(&[0]), Err(DecodeError::BadVersion));
        for version in [1, 2] {
            assert_eq!(
                Record::decode(&[version, 0xff]),
                Err(DecodeError::Malformed { what: "record" })
            );
        }
        let mut long = record(Status::Unknown).encode();
        long.push(0);
        assert_eq!(
            Record::decode(&long),
            Err(DecodeError::Malformed { what: "record" })
        );
    }

    #[test]
    fn decoding_never_panics_on_truncations() {
        let bytes = record(Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(200, vec![9; 40]),
            completed_at: Timestamp(5),
            expires_at: Timestamp(6),
        })
        .encode();
        for end in 0..bytes.len() {
            assert!(Record::decode(&bytes[..end]).is_err());
        }
    }

    #[test]
    fn id_keys_round_trip_and_group_by_tenant() {
        let id = RecordId::new("shop", "credit", "k-1").unwrap();
        let bytes = id.to_key_bytes();
        assert_eq!(bytes, b"\x04shop\x06creditk-1");
        assert_eq!(RecordId::from_key_bytes(&bytes).unwrap(), id);
        assert!(bytes.starts_with(&RecordId::prefix(Some("shop"), None)));
        assert!(bytes.starts_with(&RecordId::prefix(Some("shop"), Some("credit"))));
        assert!(!bytes.starts_with(&RecordId::prefix(Some("sho"), None)));
        assert!(RecordId::from_key_bytes(b"\x09shop").is_err());
        assert!(RecordId::from_key_bytes(b"\x04shop\x06credit").is_err());
    }
}
