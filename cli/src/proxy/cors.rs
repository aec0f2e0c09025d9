//! CORS for the origins `--cors-origin` names: a page served from another origin may
//! send keyed requests through the proxy and read what a sender acts on (`Retry-After`
//! of a 409, `Idempotent-Replayed`, a problem document). Any other origin gets nothing.

use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::exit::Failure;

/// The response headers a sender reads, beyond those every page may read.
const EXPOSED: &str = "Retry-After, Idempotent-Replayed, Location";

/// The request headers a page may send when its preflight names none.
const ALLOWED: &str = "Idempotency-Key, Content-Type";

/// The origins named, each as a browser writes it in `Origin` (lower case).
#[derive(Debug, Clone, Default)]
pub(super) struct Cors {
    origins: Vec<String>,
}

impl Cors {
    /// The origins of `--cors-origin`, each checked: `http` or `https`, a host, an
    /// optional port, nothing after.
    pub(super) fn new(origins: &[String]) -> Result<Cors, Failure> {
        let origins = origins
            .iter()
            .map(|origin| checked(origin))
            .collect::<Result<_, _>>()?;
        Ok(Cors { origins })
    }

    /// The request's `Origin`, when it is one named.
    pub(super) fn allowed(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.origins.contains(&text).then(|| origin.clone())
    }

    /// True when `method` and `headers` are a browser's preflight (an `OPTIONS` that
    /// asks for a method).
    pub(super) fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
        method == Method::OPTIONS && headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// The headers of the answer to a preflight from `origin`: any method, the request
    /// headers it asks for (the idempotency key among them), for ten minutes.
    pub(super) fn preflight(origin: HeaderValue, request: &HeaderMap, answer: &mut HeaderMap) {
        answer.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        answer.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE"),
        );
        let asked = request
            .get(ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static(ALLOWED));
        answer.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked);
        answer.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        answer.append(
            VARY,
            HeaderValue::from_static(
                "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            ),
        );
    }

    /// Adds to an answer for `origin` the headers that let its page read it.
    pub(super) fn expose(origin: HeaderValue, answer: &mut HeaderMap) {
        answer.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        answer.insert(
            ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
        answer.append(VARY, HeaderValue::from_static("Origin"));
    }
}

/// `origin` as a browser writes it, or the failure that names the rule it breaks.
fn checked(origin: &str) -> Result<String, Failure> {
    let refuse = |why: &str| {
        Failure::usage(format!(
            "--cors-origin {origin:?}: {why}; an origin is a scheme, a host and an optional port, as https://shop.example or http://localhost:5173"
        ))
    };
    if origin == "*" {
        return Err(refuse(
            "name each origin: any page could read the answers of keyed requests",
        ));
    }
    let uri: Uri = origin.parse().map_err(|_| refuse("not an origin"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(refuse("the scheme must be http or https"));
    }
    if uri.authority().is_none_or(|a| a.host().is_empty()) {
        return Err(refuse("it has no host"));
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") || origin.ends_with('/') {
        return Err(refuse("nothing may follow the host and port, not even a /"));
    }
    Ok(origin.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_and_matched_as_browsers_write_them() {
        let cors = Cors::new(&[
            "https://Shop.example".into(),
            "http://localhost:5173".into(),
        ])
        .unwrap();
        let from = |origin: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
            cors.allowed(&headers)
        };
        assert!(from("https://shop.example").is_some());
        assert!(from("http://localhost:5173").is_some());
        assert!(from("http://shop.example").is_none());
        assert!(from("https://shop.example:8443").is_none());
        assert!(from("https://evil.example").is_none());
        assert!(cors.allowed(&HeaderMap::new()).is_none());
        for bad in [
            "*",
            "shop.example",
            "ftp://shop.example",
            "https://shop.example/",
            "https://shop.example/app",
            "https://",
        ] {
            let refused = Cors::new(&[bad.into()]).unwrap_err();
            assert!(
                refused.message.contains("--cors-origin"),
                "{bad}: {}",
                refused.message
            );
        }
    }
}
