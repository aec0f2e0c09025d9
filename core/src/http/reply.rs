//! How a sender reads the receiver's status: the other side of [`super::answer()`].

use crate::ledger::IntentState;

/// How the sender reads an HTTP status (draft-ietf-httpapi-idempotency-key-header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyClass {
    /// 2xx: the effect happened.
    Completed,
    /// 409: another request with this key is being executed; retry after its lease.
    InProgress,
    /// 422: the key was used with another payload.
    Conflict,
    /// 408, 425, 429, 5xx, and anything that is not a final HTTP status (0–199, 600 and
    /// up, such as the 0 of an opaque browser response): no definitive answer, resend.
    Retry,
    /// 3xx and every other 4xx: a definitive answer that resending would not change. A
    /// 3xx is not followed (a 303 after a POST may well mean the effect happened), so the
    /// caller gets its status and body to judge.
    Failed,
    /// 410: the receiver ran this request but no longer keeps its outcome (past its
    /// retention, only a tombstone is left). Resending would not tell more and the
    /// sender cannot learn whether it succeeded: the intent expires, to be reconciled.
    Gone,
}

impl ReplyClass {
    /// The class of `status`.
    #[must_use]
    pub const fn of(status: u16) -> ReplyClass {
        match status {
            200..=299 => ReplyClass::Completed,
            409 => ReplyClass::InProgress,
            422 => ReplyClass::Conflict,
            410 => ReplyClass::Gone,
            408 | 425 | 429 | 500..=599 => ReplyClass::Retry,
            300..=499 => ReplyClass::Failed,
            _ => ReplyClass::Retry,
        }
    }

    /// The terminal state a definitive class leads to; `None` for InProgress and Retry.
    #[must_use]
    pub const fn settles_as(self) -> Option<IntentState> {
        match self {
            ReplyClass::Completed => Some(IntentState::Completed),
            ReplyClass::Failed => Some(IntentState::Failed),
            ReplyClass::Conflict => Some(IntentState::Conflict),
            ReplyClass::Gone => Some(IntentState::Expired),
            ReplyClass::InProgress | ReplyClass::Retry => None,
        }
    }
}
