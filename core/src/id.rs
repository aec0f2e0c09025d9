//! The key space: [`RecordId`] = (tenant, operation, key), validated.

use alloc::string::String;
use core::fmt;
use serde::{Deserialize, Serialize};

/// Longest tenant, operation or key, in bytes.
pub const MAX_LEN: usize = 255;

/// Which part of a [`RecordId`] a validation error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// The tenant: who the record belongs to, from the authenticated context.
    Tenant,
    /// The operation: what kind of intent, from the authenticated context.
    Operation,
    /// The idempotency key the client sent.
    Key,
}

impl Field {
    /// The field's name as users see it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Field::Tenant => "tenant",
            Field::Operation => "operation",
            Field::Key => "key",
        }
    }
}

/// A tenant, operation or key that breaks its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdError {
    /// The value is empty; every part needs at least one byte.
    Empty {
        /// Which part.
        field: Field,
    },
    /// The value is longer than [`MAX_LEN`] bytes.
    TooLong {
        /// Which part.
        field: Field,
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a byte outside printable ASCII (0x20–0x7E).
    NotPrintableAscii {
        /// Byte offset of the first offending byte.
        offset: usize,
        /// The offending byte.
        byte: u8,
    },
    /// The tenant or operation holds a control character.
    ControlCharacter {
        /// Which part.
        field: Field,
        /// Byte offset of the control character.
        offset: usize,
    },
}

impl IdError {
    /// The part that breaks its rule.
    #[must_use]
    pub const fn field(&self) -> Field {
        match self {
            IdError::Empty { field }
            | IdError::TooLong { field, .. }
            | IdError::ControlCharacter { field, .. } => *field,
            IdError::NotPrintableAscii { .. } => Field::Key,
        }
    }

    /// What is wrong with the value and the rule, without the field's name (the error's
    /// `Display` is `"{field}: {problem}"`), for a caller that names the field its own way.
    #[must_use]
    pub fn problem(&self) -> impl fmt::Display + '_ {
        Problem(self)
    }
}

/// [`IdError::problem`].
struct Problem<'e>(&'e IdError);

impl fmt::Display for Problem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IdError::Empty { .. } => write!(f, "empty, needs 1 to {MAX_LEN} bytes"),
            IdError::TooLong { len, .. } => write!(f, "{len} bytes, at most {MAX_LEN}"),
            IdError::NotPrintableAscii { offset, byte } => write!(
                f,
                "byte 0x{byte:02x} at offset {offset} is not printable ASCII (0x20-0x7E)"
            ),
            IdError::ControlCharacter { offset, .. } => write!(
                f,
                "control character at byte {offset}, control characters are not allowed"
            ),
        }
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field().name(), self.problem())
    }
}

impl core::error::Error for IdError {}

/// Where a record lives: `(tenant, operation, key)`.
///
/// `key` is 1–255 bytes of printable ASCII (0x20–0x7E), as the IETF Idempotency-Key
/// header allows; `tenant` and `operation` are 1–255 bytes of UTF-8 without control
/// characters. Tenant and operation come from the authenticated context, never from the
/// client's say-so alone, so two tenants sending the same key never meet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordId {
    tenant: String,
    operation: String,
    key: String,
}

impl RecordId {
    /// Validates the three parts.
    ///
    /// # Errors
    ///
    /// The first part that breaks its rule, checked in the order tenant, operation, key.
    pub fn new(tenant: &str, operation: &str, key: &str) -> Result<RecordId, IdError> {
        check_text(Field::Tenant, tenant)?;
        check_text(Field::Operation, operation)?;
        check_key(key)?;
        Ok(RecordId {
            tenant: tenant.into(),
            operation: operation.into(),
            key: key.into(),
        })
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The operation.
    #[must_use]
    pub fn operation(&self) -> &str {
        &self.operation
    }

    /// The idempotency key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Checks a value decoded from storage, so a damaged file cannot smuggle in an
    /// invalid id.
    ///
    /// # Errors
    ///
    /// As [`RecordId::new`].
    pub fn validate(&self) -> Result<(), IdError> {
        check_text(Field::Tenant, &self.tenant)?;
        check_text(Field::Operation, &self.operation)?;
        check_key(&self.key)
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.operation, self.key)
    }
}

fn check_len(field: Field, value: &str) -> Result<(), IdError> {
    match value.len() {
        0 => Err(IdError::Empty { field }),
        len if len > MAX_LEN => Err(IdError::TooLong { field, len }),
        _ => Ok(()),
    }
}

/// The rule of tenant and operation: 1–255 bytes of UTF-8 without control characters.
pub(crate) fn check_text(field: Field, value: &str) -> Result<(), IdError> {
    check_len(field, value)?;
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((offset, _)) => Err(IdError::ControlCharacter { field, offset }),
        None => Ok(()),
    }
}

/// The rule of keys: 1–255 bytes of printable ASCII.
pub(crate) fn check_key(value: &str) -> Result<(), IdError> {
    check_len(Field::Key, value)?;
    match value
        .bytes()
        .enumerate()
        .find(|(_, b)| !(0x20..=0x7e).contains(b))
    {
        Some((offset, byte)) => Err(IdError::NotPrintableAscii { offset, byte }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn accepts_the_full_ranges() {
        let key: String = (0x20u8..=0x7e).map(char::from).collect();
        let id = RecordId::new("shop-7", "credit", &key).unwrap();
        assert_eq!(id.key(), key);
        assert!(RecordId::new("ümlaut tenant", "opération", "k").is_ok());
        let long = "k".repeat(MAX_LEN);
        assert!(RecordId::new(&long, &long, &long).is_ok());
    }

    #[test]
    fn errors_name_the_field_and_the_rule() {
        let long = "k".repeat(300);
        let cases = [
            (
                RecordId::new("", "o", "k"),
                "tenant: empty, needs 1 to 255 bytes",
            ),
            (
                RecordId::new("t", "", "k"),
                "operation: empty, needs 1 to 255 bytes",
            ),
            (
                RecordId::new("t", "o", ""),
                "key: empty, needs 1 to 255 bytes",
            ),
            (
                RecordId::new("t", "o", &long),
                "key: 300 bytes, at most 255",
            ),
            (
                RecordId::new(&long, "o", "k"),
                "tenant: 300 bytes, at most 255",
            ),
            (
                RecordId::new("t", "o", "ab\ncd"),
                "key: byte 0x0a at offset 2 is not printable ASCII (0x20-0x7E)",
            ),
            (
                RecordId::new("t", "o", "é"),
                "key: byte 0xc3 at offset 0 is not printable ASCII (0x20-0x7E)",
            ),
            (
                RecordId::new("t", "op\u{7f}", "k"),
                "operation: control character at byte 2, control characters are not allowed",
            ),
        ];
        for (result, message) in cases {
            let error = result.unwrap_err();
            assert_eq!(error.to_string(), message);
            let (field, problem) = message.split_once(": ").unwrap();
            assert_eq!(error.field().name(), field);
            assert_eq!(error.problem().to_string(), problem);
        }
    }
}
