//! The fingerprint of an HTTP request: what makes two requests under one key "the same".

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::{Fingerprint, FingerprintError};

/// The parts of a request that its fingerprint covers.
///
/// The fingerprint is [`Fingerprint::of_fields`] over `method`, `path`, the body, and
/// each configured header present in the request (`header:` + its lowercase name). The
/// body is the field `json`, its RFC 8785 canonical text without `ignored_paths`, when
/// the content type is JSON (`application/json` or any `+json` type), and the field
/// `body`, its bytes as sent, otherwise. So a JSON body re-serialized by a retrying
/// client (other member order, other whitespace) keeps its fingerprint, and a body of
/// another kind must be identical byte for byte.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'r> {
    /// The method, as sent (`POST`).
    pub method: &'r str,
    /// The path, without the query (`/orders`). Pass the query in `path` if it is part
    /// of the business input.
    pub path: &'r str,
    /// The `Content-Type` value, if any.
    pub content_type: Option<&'r [u8]>,
    /// The body, whole.
    pub body: &'r [u8],
    /// The configured headers present in the request: lowercase name, value (several
    /// fields of one name joined with `, `).
    pub headers: &'r [(&'r str, &'r [u8])],
}

/// Why a request has no fingerprint; answered with 400 (see
/// [`crate::http::Problem::body_malformed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The content type is JSON and the body is not UTF-8.
    BodyNotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The content type is JSON and the body is not canonicalizable JSON, or a
    /// configured header repeats.
    Body(FingerprintError),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::BodyNotUtf8 { offset } => write!(
                f,
                "body: byte {offset} is not UTF-8, a JSON body (Content-Type application/json) must be"
            ),
            RequestError::Body(e) => write!(f, "body: {e}"),
        }
    }
}

impl core::error::Error for RequestError {}

/// Whether `content_type` names JSON: `application/json` or a `+json` structured
/// suffix, parameters ignored, case-insensitive.
#[must_use]
pub fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii()
        .to_ascii_lowercase();
    essence == b"application/json"
        || (essence.starts_with(b"application/") && essence.ends_with(b"+json"))
}

impl RequestParts<'_> {
    /// The request's fingerprint; `ignored_paths` are JSON Pointers removed from a JSON
    /// body first (trace ids and other non-business fields).
    ///
    /// # Errors
    ///
    /// [`RequestError`]: a JSON body that is not UTF-8 or not JSON, a configured header
    /// named twice.
    pub fn fingerprint(&self, ignored_paths: &[&str]) -> Result<Fingerprint, RequestError> {
        self.fingerprint_of(|body| canonical_body(body, ignored_paths, false))
    }

    /// The request's fingerprint with only the members `included_paths` reach counting
    /// from a JSON body (the amount and the account, not the client's timestamp):
    /// [`crate::fingerprint::json::JsonPaths::Only`].
    ///
    /// # Errors
    ///
    /// As [`RequestParts::fingerprint`].
    #[cfg(feature = "json")]
    pub fn fingerprint_only(&self, included_paths: &[&str]) -> Result<Fingerprint, RequestError> {
        self.fingerprint_of(|body| canonical_body(body, included_paths, true))
    }

    fn fingerprint_of(
        &self,
        canonical_body: impl FnOnce(&[u8]) -> Result<String, RequestError>,
    ) -> Result<Fingerprint, RequestError> {
        let canonical = match self.content_type.filter(|t| is_json(t)) {
            Some(_) => Some(canonical_body(self.body)?),
            None => None,
        };
        let names: Vec<String> = self
            .headers
            .iter()
            .map(|(name, _)| format!("header:{}", name.to_ascii_lowercase()))
            .collect();
        let mut fields: Vec<(&str, &[u8])> = Vec::with_capacity(3 + names.len());
        fields.push(("method", self.method.as_bytes()));
        fields.push(("path", self.path.as_bytes()));
        match &canonical {
            Some(text) => fields.push(("json", text.as_bytes())),
            None => fields.push(("body", self.body)),
        }
        for (name, (_, value)) in names.iter().zip(self.headers) {
            fields.push((name, value));
        }
        Fingerprint::of_fields(&fields).map_err(RequestError::Body)
    }
}

/// The canonical text of a JSON body, without the members at `paths` or, with `only`,
/// with only theirs.
#[cfg(feature = "json")]
fn canonical_body(body: &[u8], paths: &[&str], only: bool) -> Result<String, RequestError> {
    use crate::fingerprint::json::JsonPaths;
    let text = core::str::from_utf8(body).map_err(|e| RequestError::BodyNotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let paths = if only {
        JsonPaths::Only(paths)
    } else {
        JsonPaths::Ignored(paths)
    };
    Fingerprint::canonical_json_selected(text, paths, usize::MAX).map_err(RequestError::Body)
}

/// Without the `json` feature a JSON body is fingerprinted as bytes.
#[cfg(not(feature = "json"))]
fn canonical_body(body: &[u8], _paths: &[&str], _only: bool) -> Result<String, RequestError> {
    let text = core::str::from_utf8(body).map_err(|e| RequestError::BodyNotUtf8 {
        offset: e.valid_up_to(),
    })?;
    Ok(text.into())
}
