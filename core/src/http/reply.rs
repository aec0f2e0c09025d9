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
    /// 503 with idem's problem `unknown` (see [`ReplyClass::of_reply`]): the receiver
    /// claimed the key, its handler may have acted, and it does not know the outcome
    /// either. Resending gets the same answer until an operator settles the key: the
    /// intent stops as Unknown, for a person to look.
    Unknown,
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

    /// The class of a reply: as [`ReplyClass::of`], except that a 503 whose body is a
    /// problem document (RFC 9457) with the member `"idempotency": "unknown"`, as idem's
    /// receivers answer a key whose outcome is unknown ([`super::Problem::unknown`]), is
    /// [`ReplyClass::Unknown`].
    #[must_use]
    pub fn of_reply(status: u16, body: &[u8]) -> ReplyClass {
        if status == 503 && top_level_string(body, "idempotency") == Some("unknown") {
            return ReplyClass::Unknown;
        }
        ReplyClass::of(status)
    }

    /// The terminal state a definitive class leads to; `None` for InProgress and Retry.
    #[must_use]
    pub const fn settles_as(self) -> Option<IntentState> {
        match self {
            ReplyClass::Completed => Some(IntentState::Completed),
            ReplyClass::Failed => Some(IntentState::Failed),
            ReplyClass::Conflict => Some(IntentState::Conflict),
            ReplyClass::Gone => Some(IntentState::Expired),
            ReplyClass::Unknown => Some(IntentState::Unknown),
            ReplyClass::InProgress | ReplyClass::Retry => None,
        }
    }
}

/// The value of the member `name` of the JSON object `json`, when it is a string written
/// without escapes; `None` when `json` is not an object, has no such member, or its value
/// is anything else. Reads only what it must: members before it are skipped, not checked.
fn top_level_string<'a>(json: &'a [u8], name: &str) -> Option<&'a str> {
    let mut at = skip_space(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_space(json, at);
        let (member, end) = plain_string(json, at)?;
        at = skip_space(json, end);
        if json.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(json, at + 1);
        if member == name.as_bytes() {
            let (value, _) = plain_string(json, at)?;
            return core::str::from_utf8(value).ok();
        }
        at = skip_value(json, at)?;
        at = skip_space(json, at);
        match json.get(at) {
            Some(b',') => at += 1,
            _ => return None,
        }
    }
}

fn skip_space(json: &[u8], mut at: usize) -> usize {
    while matches!(json.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// A string at `at` without escapes: its bytes and where it ends. `None` for anything
/// else (an escape makes it "not plain", which the caller reads as "not this member").
fn plain_string(json: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if json.get(at) != Some(&b'"') {
        return None;
    }
    let rest = json.get(at + 1..)?;
    let len = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[len] == b'"').then(|| (&rest[..len], at + 1 + len + 1))
}

/// Where the value at `at` ends: strings (escapes included), nested arrays and objects,
/// and the bytes of a number or a literal.
fn skip_value(json: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *json.get(at)? {
            b'"' => {
                at += 1;
                loop {
                    match *json.get(at)? {
                        b'\\' => at += 2,
                        b'"' => break,
                        _ => at += 1,
                    }
                }
                at += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                at += 1;
            }
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                at += 1;
            }
            b',' | b'}' | b']' if depth == 0 => return Some(at),
            _ => at += 1,
        }
        if depth == 0 && matches!(json.get(at), Some(b',' | b'}' | b']') | None) {
            return Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Problem;

    #[test]
    fn an_unknown_problem_is_its_own_class() {
        let body = Problem::unknown(60).to_json();
        assert_eq!(
            ReplyClass::of_reply(503, body.as_bytes()),
            ReplyClass::Unknown
        );
        assert_eq!(ReplyClass::Unknown.settles_as(), Some(IntentState::Unknown));
        // Members in another order, spaces, nested values before it.
        let spaced = br#" { "type" : "about:blank", "extra": {"a": [1, "}\"", {"b": null}]},
            "status": 503, "idempotency" : "unknown" } "#;
        assert_eq!(ReplyClass::of_reply(503, spaced), ReplyClass::Unknown);
        // Any other 503 retries: overload, another code, a nested member, no body.
        for body in [
            &b""[..],
            b"Service Unavailable",
            br#"{"idempotency":"in-progress"}"#,
            br#"{"detail":{"idempotency":"unknown"}}"#,
            br#"{"detail":"\"idempotency\":\"unknown\""}"#,
            br#"["idempotency","unknown"]"#,
            br#"{"idempotency":"unknown"#,
            br#"{"idempotency":7}"#,
        ] {
            assert_eq!(
                ReplyClass::of_reply(503, body),
                ReplyClass::Retry,
                "{body:?}"
            );
        }
        // The problem under another status keeps that status's class.
        assert_eq!(
            ReplyClass::of_reply(500, body.as_bytes()),
            ReplyClass::Retry
        );
        assert_eq!(
            ReplyClass::of_reply(200, body.as_bytes()),
            ReplyClass::Completed
        );
    }
}
