//! One record as JSON: [`RecordView`], what `export`, `idem get --json` and `idem list
//! --json` print, and what import reads back.
//!
//! Times are integer milliseconds since the epoch, bytes are standard base64, the
//! fingerprint is 64 lower-case hex digits. Optional fields are present exactly when the
//! record's state has them.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use idem_core::{
    Fingerprint, Generation, Outcome, Record, RecordId, State, Status, Timestamp, Verdict,
};
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::error::{ViewError, view_error};

/// One record as JSON fields. Optional fields are present exactly when the state has
/// them: `lease_until` for Pending; `expires_at`, `completed_at`, `code` and
/// `outcome_b64` for Succeeded and Failed; none for Unknown; `verdict`, `completed_at`
/// and `expires_at` (the end of the tombstone's time) for Forgotten, a tombstone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordView {
    /// The tenant.
    pub tenant: String,
    /// The operation.
    pub operation: String,
    /// The idempotency key.
    pub key: String,
    /// `pending`, `succeeded`, `failed`, `unknown` or `forgotten`.
    pub state: String,
    /// The fencing token of the claim that made the record.
    pub generation: u64,
    /// 64 lower-case hex digits.
    pub fingerprint: String,
    /// When the claim was made, ms since the epoch.
    pub created_at: u64,
    /// When the record last changed, ms since the epoch.
    pub updated_at: u64,
    /// Pending only: when the lease ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,
    /// Forgotten only: how the request settled, `succeeded` or `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Settled and forgotten only: when the record may be swept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Settled and forgotten only: when it settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
    /// Settled only: the outcome's code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Settled only: the outcome's body, standard base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_b64: Option<String>,
}

/// The JSON object of a record: [`RecordView`] as a [`serde_json::Value`].
///
/// A `Value`'s object sorts its keys (unless serde_json's `preserve_order` feature is
/// on); serialize a [`RecordView`] directly to print the fields in the documented order.
#[must_use]
pub fn record_json(id: &RecordId, record: &Record) -> Value {
    // A struct of strings, integers and options always serializes.
    serde_json::to_value(RecordView::new(id, record)).unwrap_or(Value::Null)
}

impl RecordView {
    /// The view of `record` stored under `id`.
    #[must_use]
    pub fn new(id: &RecordId, record: &Record) -> RecordView {
        let mut view = RecordView {
            tenant: id.tenant().into(),
            operation: id.operation().into(),
            key: id.key().into(),
            state: record.state().name().into(),
            generation: record.generation.0,
            fingerprint: record.fingerprint.to_hex(),
            created_at: record.created_at.as_millis(),
            updated_at: record.updated_at.as_millis(),
            lease_until: None,
            verdict: None,
            expires_at: None,
            completed_at: None,
            code: None,
            outcome_b64: None,
        };
        match &record.status {
            Status::Pending { lease_until } => view.lease_until = Some(lease_until.as_millis()),
            Status::Settled {
                outcome,
                completed_at,
                expires_at,
                ..
            } => {
                view.expires_at = Some(expires_at.as_millis());
                view.completed_at = Some(completed_at.as_millis());
                view.code = Some(outcome.code);
                view.outcome_b64 = Some(BASE64.encode(&outcome.body));
            }
            Status::Unknown => {}
            Status::Tombstone {
                verdict,
                completed_at,
                expires_at,
            } => {
                view.verdict = Some(verdict.name().into());
                view.expires_at = Some(expires_at.as_millis());
                view.completed_at = Some(completed_at.as_millis());
            }
        }
        view
    }

    /// Reads a JSON object, refusing missing, mistyped and unknown fields by name.
    ///
    /// # Errors
    ///
    /// [`ViewError`] naming the field.
    pub fn from_json(object: &Map<String, Value>) -> Result<RecordView, ViewError> {
        let wire = Wire::deserialize(Object(object)).map_err(|Misread(e)| e)?;
        Ok(RecordView {
            tenant: wire.tenant,
            operation: wire.operation,
            key: wire.key,
            state: wire.state,
            generation: wire.generation,
            fingerprint: wire.fingerprint,
            created_at: wire.created_at,
            updated_at: wire.updated_at,
            lease_until: wire.lease_until,
            verdict: wire.verdict,
            expires_at: wire.expires_at,
            completed_at: wire.completed_at,
            code: wire.code,
            outcome_b64: wire.outcome_b64,
        })
    }

    /// The id and record this view describes, checking every rule.
    ///
    /// # Errors
    ///
    /// [`ViewError`] naming the field: an id part that breaks its rule, an unknown state,
    /// generation 0, a fingerprint that is not 64 hex digits, bad base64, or a field the
    /// state must (or must not) have.
    pub fn to_record(&self) -> Result<(RecordId, Record), ViewError> {
        let id = RecordId::new(&self.tenant, &self.operation, &self.key)
            .map_err(|e| view_error(e.field().name(), e.problem().to_string()))?;
        let state = State::from_name(&self.state).ok_or_else(|| {
            view_error(
                "state",
                format!(
                    "{:?} is not one of pending, succeeded, failed, unknown, forgotten",
                    self.state
                ),
            )
        })?;
        if self.generation == 0 {
            return Err(view_error("generation", "0, must be at least 1"));
        }
        let fingerprint = Fingerprint::from_hex(&self.fingerprint).map_err(|_| {
            view_error(
                "fingerprint",
                format!(
                    "{} characters, expected 64 hex digits (0-9, a-f)",
                    self.fingerprint.chars().count()
                ),
            )
        })?;
        let status = match state {
            State::Pending => {
                self.absent(
                    &[
                        "verdict",
                        "expires_at",
                        "completed_at",
                        "code",
                        "outcome_b64",
                    ],
                    state,
                )?;
                Status::Pending {
                    lease_until: Timestamp(required(self.lease_until, "lease_until", state)?),
                }
            }
            State::Succeeded | State::Failed => {
                self.absent(&["lease_until", "verdict"], state)?;
                let body_b64 = required(self.outcome_b64.as_deref(), "outcome_b64", state)?;
                let body = BASE64
                    .decode(body_b64)
                    .map_err(|e| view_error("outcome_b64", format!("not standard base64: {e}")))?;
                Status::Settled {
                    verdict: if state == State::Succeeded {
                        Verdict::Succeeded
                    } else {
                        Verdict::Failed
                    },
                    outcome: Outcome::new(required(self.code, "code", state)?, body),
                    completed_at: Timestamp(required(self.completed_at, "completed_at", state)?),
                    expires_at: Timestamp(required(self.expires_at, "expires_at", state)?),
                }
            }
            State::Unknown => {
                self.absent(
                    &[
                        "lease_until",
                        "verdict",
                        "expires_at",
                        "completed_at",
                        "code",
                        "outcome_b64",
                    ],
                    state,
                )?;
                Status::Unknown
            }
            State::Forgotten => {
                self.absent(&["lease_until", "code", "outcome_b64"], state)?;
                let verdict = required(self.verdict.as_deref(), "verdict", state)?;
                Status::Tombstone {
                    verdict: Verdict::from_name(verdict).ok_or_else(|| {
                        view_error(
                            "verdict",
                            format!("{verdict:?} is not one of succeeded, failed"),
                        )
                    })?,
                    completed_at: Timestamp(required(self.completed_at, "completed_at", state)?),
                    expires_at: Timestamp(required(self.expires_at, "expires_at", state)?),
                }
            }
        };
        Ok((
            id,
            Record {
                fingerprint,
                generation: Generation(self.generation),
                created_at: Timestamp(self.created_at),
                updated_at: Timestamp(self.updated_at),
                status,
            },
        ))
    }

    fn absent(&self, fields: &[&'static str], state: State) -> Result<(), ViewError> {
        for &field in fields {
            let present = match field {
                "lease_until" => self.lease_until.is_some(),
                "verdict" => self.verdict.is_some(),
                "expires_at" => self.expires_at.is_some(),
                "completed_at" => self.completed_at.is_some(),
                "code" => self.code.is_some(),
                _ => self.outcome_b64.is_some(),
            };
            if present {
                return Err(view_error(
                    field,
                    format!("present, but a {state} record has none"),
                ));
            }
        }
        Ok(())
    }
}

fn required<T>(value: Option<T>, field: &'static str, state: State) -> Result<T, ViewError> {
    value.ok_or_else(|| view_error(field, format!("missing, a {state} record needs it")))
}

/// A record line as [`RecordView::from_json`] reads it: the fields of [`RecordView`], each
/// checked for its JSON type as it is read. Optional fields may be absent or null.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(deserialize_with = "field")]
    tenant: String,
    #[serde(deserialize_with = "field")]
    operation: String,
    #[serde(deserialize_with = "field")]
    key: String,
    #[serde(deserialize_with = "field")]
    state: String,
    #[serde(deserialize_with = "field")]
    generation: u64,
    #[serde(deserialize_with = "field")]
    fingerprint: String,
    #[serde(deserialize_with = "field")]
    created_at: u64,
    #[serde(deserialize_with = "field")]
    updated_at: u64,
    #[serde(default, deserialize_with = "optional_field")]
    lease_until: Option<u64>,
    #[serde(default, deserialize_with = "optional_field")]
    verdict: Option<String>,
    #[serde(default, deserialize_with = "optional_field")]
    expires_at: Option<u64>,
    #[serde(default, deserialize_with = "optional_field")]
    completed_at: Option<u64>,
    #[serde(default, deserialize_with = "optional_field")]
    code: Option<i32>,
    #[serde(default, deserialize_with = "optional_field")]
    outcome_b64: Option<String>,
}

/// The type of a JSON field, with the words the error for a value of another type uses.
trait FieldType: Sized {
    /// What the field holds: "expected {EXPECTED}, found {value}".
    const EXPECTED: &'static str;

    /// The value as this type, if it is one.
    fn from_value(value: &Value) -> Option<Self>;
}

impl FieldType for String {
    const EXPECTED: &'static str = "a string";

    fn from_value(value: &Value) -> Option<String> {
        value.as_str().map(String::from)
    }
}

impl FieldType for u64 {
    const EXPECTED: &'static str = "an integer from 0 to 2^64-1";

    fn from_value(value: &Value) -> Option<u64> {
        value.as_u64()
    }
}

impl FieldType for i32 {
    const EXPECTED: &'static str = "a 32-bit integer";

    fn from_value(value: &Value) -> Option<i32> {
        value.as_i64().and_then(|n| i32::try_from(n).ok())
    }
}

fn mistyped<T: FieldType>(value: &Value) -> String {
    format!("expected {}, found {value}", T::EXPECTED)
}

fn field<'de, D: Deserializer<'de>, T: FieldType>(deserializer: D) -> Result<T, D::Error> {
    let value = Value::deserialize(deserializer)?;
    T::from_value(&value).ok_or_else(|| de::Error::custom(mistyped::<T>(&value)))
}

fn optional_field<'de, D: Deserializer<'de>, T: FieldType>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value => T::from_value(&value)
            .map(Some)
            .ok_or_else(|| de::Error::custom(mistyped::<T>(&value))),
    }
}

/// The field `name` of `object` as an unsigned integer.
pub(crate) fn unsigned(object: &Map<String, Value>, name: &'static str) -> Result<u64, ViewError> {
    let value = object
        .get(name)
        .ok_or_else(|| view_error(name, "missing"))?;
    u64::from_value(value).ok_or_else(|| view_error(name, mistyped::<u64>(value)))
}

/// A JSON object handed to a derived `Deserialize` ([`Wire`]), so that every error names
/// its field: serde reports unknown and missing fields by name, and [`Fields`] knows
/// which field a mistyped value belongs to.
struct Object<'a>(&'a Map<String, Value>);

impl<'de> Deserializer<'de> for Object<'de> {
    type Error = Misread;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Misread> {
        self.deserialize_struct("", &[], visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        names: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Misread> {
        visitor.visit_map(Fields {
            entries: self.0.iter(),
            names,
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// The entries of an [`Object`], each value read with its field's name at hand.
struct Fields<'a> {
    entries: serde_json::map::Iter<'a>,
    /// The field names of the struct being read.
    names: &'static [&'static str],
    /// The value of the key just read.
    value: Option<(&'a str, &'a Value)>,
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Misread;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Misread> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Misread> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value read before its key"))?;
        let field = self
            .names
            .iter()
            .find(|name| **name == key)
            .map_or("record", |name| name);
        // The message is the field type's own (`mistyped`): serde_json adds no position
        // to an error about a `Value`.
        seed.deserialize(value)
            .map_err(|e| Misread(view_error(field, e.to_string())))
    }
}

/// Why an [`Object`] could not be read, as the [`ViewError`] to report.
#[derive(Debug)]
struct Misread(ViewError);

impl fmt::Display for Misread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Misread {}

impl de::Error for Misread {
    fn custom<T: fmt::Display>(message: T) -> Misread {
        Misread(view_error("record", message.to_string()))
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Misread {
        Misread(view_error("record", format!("unknown field {field:?}")))
    }

    fn missing_field(field: &'static str) -> Misread {
        Misread(view_error(field, "missing"))
    }
}

#[cfg(test)]
mod tests;
