//! [`IntentView`]: an intent as one flat JSON object, for `idem intents` and for the
//! intent lines of an export.
//!
//! Times are integer milliseconds since the epoch, bytes standard base64, the
//! fingerprint 64 hex digits, the state its lower-case name.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use idem_core::{
    Fingerprint, Intent, IntentResolution, IntentState, Outcome, RecordId, ResolvedAs, Timestamp,
};
use serde::{Deserialize, Serialize};

use crate::error::{ViewError, view_error};

/// An intent as JSON. Field names follow the CLI's contract for records: `*_b64` bytes,
/// `*_at` times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntentView {
    /// The idempotency key.
    pub key: String,
    /// What kind of action.
    pub operation: String,
    /// `queued`, `in_flight`, `completed`, `failed`, `conflict`, `expired` or `unknown`.
    pub state: String,
    /// Sends so far.
    pub attempts: u32,
    /// When the user started the intent.
    pub created_at: u64,
    /// When a queued intent is due.
    pub next_attempt_at: u64,
    /// Sends happen only strictly before this time.
    pub deadline: u64,
    /// The fingerprint, 64 hex digits.
    pub fingerprint: String,
    /// The bytes every attempt sends, standard base64.
    pub payload_b64: String,
    /// Status of the most recent reply taken into account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// The definitive reply's status (completed, failed, conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The definitive reply's body, standard base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_b64: Option<String>,
    /// What a resolved expired intent was resolved as: `completed`, `failed` or
    /// `not_executed`. Absent while unresolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_as: Option<String>,
    /// Why, as the operator or checker said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_reason: Option<String>,
    /// When it was resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<u64>,
}

impl IntentView {
    /// The view of `intent`.
    #[must_use]
    pub fn new(intent: &Intent) -> IntentView {
        IntentView {
            key: intent.key.clone(),
            operation: intent.operation.clone(),
            state: intent.state.name().to_string(),
            attempts: intent.attempts,
            created_at: intent.created_at.as_millis(),
            next_attempt_at: intent.next_attempt_at.as_millis(),
            deadline: intent.deadline.as_millis(),
            fingerprint: intent.fingerprint.to_string(),
            payload_b64: BASE64.encode(&intent.payload),
            last_status: intent.last_status,
            code: intent.outcome.as_ref().map(|o| o.code),
            outcome_b64: intent.outcome.as_ref().map(|o| BASE64.encode(&o.body)),
            resolved_as: intent
                .resolution
                .as_ref()
                .map(|r| r.resolved_as.name().to_string()),
            resolution_reason: intent.resolution.as_ref().map(|r| r.reason.clone()),
            resolved_at: intent
                .resolution
                .as_ref()
                .map(|r| r.resolved_at.as_millis()),
        }
    }

    /// The intent this view describes, checked as the file's own bytes are.
    ///
    /// # Errors
    ///
    /// [`ViewError`] naming the field and its rule.
    pub fn to_intent(&self) -> Result<Intent, ViewError> {
        // The operation and key rules of a record id apply to intents too.
        if let Err(e) = RecordId::new("t", &self.operation, &self.key) {
            return Err(view_error(e.field().name(), e.problem().to_string()));
        }
        let state = IntentState::from_name(&self.state).ok_or_else(|| {
            view_error(
                "state",
                format!(
                    "{:?}, expected one of queued, in_flight, completed, failed, conflict, expired, unknown",
                    self.state
                ),
            )
        })?;
        let fingerprint = Fingerprint::from_hex(&self.fingerprint)
            .map_err(|e| view_error("fingerprint", e.to_string()))?;
        let payload = BASE64
            .decode(&self.payload_b64)
            .map_err(|e| view_error("payload_b64", format!("not base64: {e}")))?;
        let outcome = match (self.code, &self.outcome_b64) {
            (Some(code), Some(body)) => Some(Outcome::new(
                code,
                BASE64
                    .decode(body)
                    .map_err(|e| view_error("outcome_b64", format!("not base64: {e}")))?,
            )),
            (None, None) => None,
            (Some(_), None) => return Err(view_error("outcome_b64", "missing, code is given")),
            (None, Some(_)) => return Err(view_error("code", "missing, outcome_b64 is given")),
        };
        let resolution = match (&self.resolved_as, &self.resolution_reason, self.resolved_at) {
            (None, None, None) => None,
            (Some(name), Some(reason), Some(at)) => Some(IntentResolution {
                resolved_as: ResolvedAs::from_name(name).ok_or_else(|| {
                    view_error(
                        "resolved_as",
                        format!("{name:?}, expected one of completed, failed, not_executed"),
                    )
                })?,
                reason: reason.clone(),
                resolved_at: Timestamp(at),
            }),
            _ => {
                return Err(view_error(
                    "resolved_as",
                    "resolved_as, resolution_reason and resolved_at go together: all or none",
                ));
            }
        };
        let intent = Intent {
            key: self.key.clone(),
            operation: self.operation.clone(),
            payload,
            fingerprint,
            state,
            attempts: self.attempts,
            created_at: Timestamp(self.created_at),
            next_attempt_at: Timestamp(self.next_attempt_at),
            deadline: Timestamp(self.deadline),
            last_status: self.last_status,
            outcome,
            resolution,
        };
        // The rules the file's own bytes keep: a resolution only on an expired intent,
        // with a reason that keeps its rule.
        if let Err(e) = intent.check() {
            let field = match e {
                idem_core::LedgerError::Reason { .. } => "resolution_reason",
                _ => "resolved_as",
            };
            return Err(view_error(field, e.to_string()));
        }
        Ok(intent)
    }
}
