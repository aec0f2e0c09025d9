//! The answer to a request that does not run the handler: docs/design.md §10's table, the RFC
//! 9457 problem documents, and the stored response a replay sends back.

use alloc::borrow::ToOwned;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write as _;

use super::key::KeyError;
use super::request::RequestError;
use crate::protocol::Decision;
use crate::{Outcome, Timestamp};

/// The header a replayed answer carries.
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";
/// The media type of a problem document (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An HTTP answer: status, headers in order, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Header fields, in the order to send them.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Which status a replay carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplayStatus {
    /// The stored status, as the first answer had it (201 stays 201).
    #[default]
    Original,
    /// 200 for a stored 2xx (a stored 4xx keeps its status): for clients that expect a
    /// replay to read "OK".
    Ok,
}

/// How decisions are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerConfig {
    /// The status of a replay.
    pub replay_status: ReplayStatus,
    /// The `Retry-After` of a 503 for an Unknown key, in seconds: how long a reconciler
    /// usually needs.
    pub unknown_retry_after_s: u64,
}

impl Default for AnswerConfig {
    fn default() -> AnswerConfig {
        AnswerConfig {
            replay_status: ReplayStatus::Original,
            unknown_retry_after_s: 60,
        }
    }
}

/// An RFC 9457 problem: `type` is `about:blank`, so `title` is the status's reason
/// phrase; `idempotency` (an extension member) is a stable code a client can match on,
/// and `detail` says what happened in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The status code.
    pub status: u16,
    /// The stable code, such as `in-progress`.
    pub code: &'static str,
    /// What happened, for a person.
    pub detail: String,
    /// `Retry-After`, in seconds.
    pub retry_after_s: Option<u64>,
}

impl Problem {
    /// A problem with no `Retry-After`.
    #[must_use]
    pub fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            retry_after_s: None,
        }
    }

    /// 400 `key-missing`: the endpoint needs a key and the request has none.
    #[must_use]
    pub fn key_missing() -> Problem {
        Problem::new(400, "key-missing", KeyError::Missing.to_string())
    }

    /// 400 `key-missing` for [`KeyError::Missing`], `key-repeated` for
    /// [`KeyError::Repeated`], `key-malformed` for the rest.
    #[must_use]
    pub fn key_malformed(error: &KeyError) -> Problem {
        let code = match error {
            KeyError::Missing => "key-missing",
            KeyError::Repeated { .. } => "key-repeated",
            _ => "key-malformed",
        };
        Problem::new(400, code, error.to_string())
    }

    /// 400 `body-malformed`: the request has no fingerprint.
    #[must_use]
    pub fn body_malformed(error: &RequestError) -> Problem {
        Problem::new(400, "body-malformed", error.to_string())
    }

    /// 413 `body-too-large`: the body is over the limit the receiver buffers.
    #[must_use]
    pub fn body_too_large(limit: usize) -> Problem {
        Problem::new(
            413,
            "body-too-large",
            alloc::format!("body: over {limit} bytes, the most this endpoint fingerprints"),
        )
    }

    /// 409 `in-progress`, `Retry-After` = the lease end (at least one second).
    #[must_use]
    pub fn in_progress(lease_until: Timestamp, now: Timestamp) -> Problem {
        Problem {
            retry_after_s: Some(lease_until.millis_since(now).div_ceil(1_000).max(1)),
            ..Problem::new(
                409,
                "in-progress",
                "a request with this Idempotency-Key is being processed; retry after it",
            )
        }
    }

    /// 422 `conflict`: the key is live with another request's fingerprint.
    #[must_use]
    pub fn conflict() -> Problem {
        Problem::new(
            422,
            "conflict",
            "this Idempotency-Key was used with another request (method, path, body or headers differ); a new request needs a new key",
        )
    }

    /// 503 `unknown`: nobody knows whether the request took effect; it is answered
    /// once a reconciler settled it.
    #[must_use]
    pub fn unknown(retry_after_s: u64) -> Problem {
        Problem {
            retry_after_s: Some(retry_after_s),
            ..Problem::new(
                503,
                "unknown",
                "the outcome of the request with this Idempotency-Key is unknown until it is reconciled; retry later",
            )
        }
    }

    /// 410 `forgotten`: the key's outcome was kept and then removed; the request cannot
    /// be answered or run again under this key.
    #[must_use]
    pub fn forgotten() -> Problem {
        Problem::new(
            410,
            "forgotten",
            "the outcome under this Idempotency-Key is past its retention and was removed; it is not run again",
        )
    }

    /// The problem document, members in a fixed order: `type`, `title`, `status`,
    /// `detail`, `idempotency`.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut json = String::from("{\"type\":\"about:blank\",\"title\":");
        push_json_string(&mut json, reason_phrase(self.status));
        let _ = write!(json, ",\"status\":{},\"detail\":", self.status);
        push_json_string(&mut json, &self.detail);
        json.push_str(",\"idempotency\":");
        push_json_string(&mut json, self.code);
        json.push('}');
        json
    }

    /// The answer: the status, `Content-Type: application/problem+json`, `Retry-After`
    /// when set, and the document.
    #[must_use]
    pub fn answer(&self) -> Answer {
        let mut headers =
            alloc::vec![("Content-Type".to_owned(), PROBLEM_JSON.as_bytes().to_vec())];
        if let Some(seconds) = self.retry_after_s {
            headers.push(("Retry-After".to_owned(), seconds.to_string().into_bytes()));
        }
        Answer {
            status: self.status,
            headers,
            body: self.to_json().into_bytes(),
        }
    }
}

/// The answer to a decision, per docs/design.md §10; `None` for [`Decision::Claimed`]: the
/// handler runs and its answer is the answer.
///
/// | decision | status | headers |
/// |---|---|---|
/// | replay | the stored status (200 for a stored 2xx with [`ReplayStatus::Ok`]) | stored headers + `Idempotent-Replayed: true` |
/// | in progress | 409 | `Retry-After` = lease end |
/// | conflict | 422 | |
/// | unknown | 503 | `Retry-After` |
/// | forgotten | 410 | |
#[must_use]
pub fn answer(decision: &Decision, now: Timestamp, config: &AnswerConfig) -> Option<Answer> {
    let problem = match decision {
        Decision::Claimed { .. } => return None,
        Decision::Replay { outcome, .. } => return Some(replay(outcome, config)),
        Decision::InProgress { lease_until, .. } => Problem::in_progress(*lease_until, now),
        Decision::Conflict { .. } => Problem::conflict(),
        Decision::NeedsReconciliation { .. } => Problem::unknown(config.unknown_retry_after_s),
        Decision::Forgotten { .. } => Problem::forgotten(),
    };
    Some(problem.answer())
}

/// The answer that replays `outcome`: the [`StoredResponse`] in it, or, for an outcome
/// not written by [`StoredResponse::to_outcome`], its code and body as they are.
#[must_use]
pub fn replay(outcome: &Outcome, config: &AnswerConfig) -> Answer {
    let stored = StoredResponse::from_outcome(outcome).unwrap_or_else(|| StoredResponse {
        status: u16::try_from(outcome.code).unwrap_or(500),
        headers: Vec::new(),
        body: outcome.body.clone(),
    });
    let status = match config.replay_status {
        ReplayStatus::Ok if (200..300).contains(&stored.status) => 200,
        _ => stored.status,
    };
    let mut headers = stored.headers;
    headers.push((IDEMPOTENT_REPLAYED.to_owned(), b"true".to_vec()));
    Answer {
        status,
        headers,
        body: stored.body,
    }
}

/// A handler's answer as the receiver keeps it: status, the chosen headers, body.
///
/// Stored in an [`Outcome`] whose code is the status and whose bytes are (version 1):
/// the magic `00 'I' 'H'`, the version byte `01`, the header count (u16 big-endian), per
/// header its name length (u16 BE), name, value length (u32 BE), value; then the body
/// to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code.
    pub status: u16,
    /// The headers kept (name, value), in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

const MAGIC: [u8; 3] = [0, b'I', b'H'];
const VERSION: u8 = 1;

impl StoredResponse {
    /// The outcome that keeps this response. Headers whose name is over 65,535 bytes,
    /// beyond the 65,535th, or whose value is over 4 GiB are left out (no HTTP library
    /// sends such).
    #[must_use]
    pub fn to_outcome(&self) -> Outcome {
        let kept: Vec<&(String, Vec<u8>)> = self
            .headers
            .iter()
            .filter(|(name, value)| {
                u16::try_from(name.len()).is_ok() && u32::try_from(value.len()).is_ok()
            })
            .take(usize::from(u16::MAX))
            .collect();
        let mut bytes = Vec::with_capacity(6 + self.body.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.push(VERSION);
        // At most u16::MAX, taken above.
        bytes.extend_from_slice(&u16::try_from(kept.len()).unwrap_or(u16::MAX).to_be_bytes());
        for (name, value) in kept {
            bytes.extend_from_slice(&u16::try_from(name.len()).unwrap_or(0).to_be_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(&u32::try_from(value.len()).unwrap_or(0).to_be_bytes());
            bytes.extend_from_slice(value);
        }
        bytes.extend_from_slice(&self.body);
        Outcome::new(i32::from(self.status), bytes)
    }

    /// The response kept in `outcome`; `None` when its bytes are not this encoding (an
    /// outcome written another way) or its code is not a status.
    #[must_use]
    pub fn from_outcome(outcome: &Outcome) -> Option<StoredResponse> {
        let status = u16::try_from(outcome.code).ok()?;
        let bytes = outcome.body.strip_prefix(&MAGIC)?;
        let (&version, mut rest) = bytes.split_first()?;
        if version != VERSION {
            return None;
        }
        let count = u16::from_be_bytes(take(&mut rest)?);
        let mut headers = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let name_len = usize::from(u16::from_be_bytes(take(&mut rest)?));
            let name = core::str::from_utf8(take_slice(&mut rest, name_len)?).ok()?;
            let value_len = usize::try_from(u32::from_be_bytes(take(&mut rest)?)).ok()?;
            let value = take_slice(&mut rest, value_len)?;
            headers.push((name.to_owned(), value.to_vec()));
        }
        Some(StoredResponse {
            status,
            headers,
            body: rest.to_vec(),
        })
    }
}

fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
    take_slice(rest, N)?.try_into().ok()
}

fn take_slice<'b>(rest: &mut &'b [u8], len: usize) -> Option<&'b [u8]> {
    let (head, tail) = rest.split_at_checked(len)?;
    *rest = tail;
    Some(head)
}

/// The reason phrase of the statuses this module answers with (RFC 9110), and the
/// class's name for others.
#[must_use]
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

/// Appends `text` as a JSON string (RFC 8259): `"` and `\` escaped, control characters
/// as `\n`-style or `\u00XX` escapes.
fn push_json_string(json: &mut String, text: &str) {
    json.push('"');
    for c in text.chars() {
        match c {
            '"' => json.push_str("\\\""),
            '\\' => json.push_str("\\\\"),
            '\n' => json.push_str("\\n"),
            '\r' => json.push_str("\\r"),
            '\t' => json.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(json, "\\u{:04x}", u32::from(c));
            }
            c => json.push(c),
        }
    }
    json.push('"');
}
