//! The HTTP mapping of the receiver protocol (docs/design.md §10), pure and shared by every
//! receiver and sender: no HTTP library, no I/O.
//!
//! A receiver in front of a handler does, per request:
//!
//! 1. [`key_from_fields`] with every `Idempotency-Key` field value: the key, or a 400
//!    ([`Problem::key_malformed`]; [`Problem::key_missing`] when the endpoint needs a key
//!    and there is none);
//! 2. [`RequestParts::fingerprint`]: method, path, body (canonical JSON for a JSON
//!    content type, bytes otherwise) and the configured headers; a 400
//!    ([`Problem::body_malformed`]) for a JSON body that is not JSON;
//! 3. `begin` on the store; [`answer()`] turns every decision but a claim into the
//!    answer (status, headers, an RFC 9457 problem document or the replayed response);
//! 4. on a claim, runs the handler and keeps its answer with
//!    [`StoredResponse::to_outcome`]: a 2xx settles as succeeded, a 3xx or 4xx as failed
//!    (definitive, replayed as well), a 5xx releases the key so a retry runs again.
//!
//! The sender side reads statuses with [`ReplyClass`] and sends its key with
//! [`key_field_value`].
//!
//! | decision | status | headers |
//! |---|---|---|
//! | claimed | the handler's own | stored with the outcome |
//! | replay | the stored status (or 200, [`ReplayStatus::Ok`]) | stored headers + `Idempotent-Replayed: true` |
//! | in progress | 409, problem+json | `Retry-After` = lease end |
//! | conflict | 422, problem+json | |
//! | unknown | 503, problem+json | `Retry-After` |
//! | key missing where required, or malformed | 400, problem+json | |
//! | body over the receiver's limit | 413, problem+json | |

mod answer;
mod key;
mod reply;
mod request;
#[cfg(test)]
mod tests;

pub use answer::{
    Answer, AnswerConfig, IDEMPOTENT_REPLAYED, PROBLEM_JSON, Problem, ReplayStatus, StoredResponse,
    answer, reason_phrase, replay,
};
pub use key::{KeyError, key_field_value, key_from_fields, parse_key};
pub use reply::ReplyClass;
pub use request::{RequestError, RequestParts, is_json};

/// The request header that carries the key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
