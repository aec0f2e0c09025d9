//! Routes with rules of their own (`idem proxy --routes FILE`): a TOML file, read at the
//! start and checked whole, each error naming its line.
//!
//! ```toml
//! [[route]]
//! path = "/payments/{id}/capture"   # {name}: one segment; a last "*": the rest
//! methods = ["POST"]                # the keyed methods; default POST, PATCH
//! require_key = true
//! fingerprint.ignore = ["/timestamp", "/meta/trace_id"]
//! fingerprint.headers = ["x-account"]
//! kept_headers = ["content-type", "location", "x-request-cost"]
//! ```
//!
//! A request takes the rules of the first route whose path and method match it; others
//! take the flags' (`--require-key`, `--fingerprint-header`, `--body-limit`,
//! `--wait-in-flight`), which are also what a route leaves unsaid.

use std::path::Path;
use std::time::Duration;

use http::{HeaderName, Method};
use idem_store::Terms;
use idem_store::http::Settings;
use serde::Deserialize;
use toml::Spanned;

use crate::time::parse_duration;

/// The routes file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    route: Vec<Spanned<RouteEntry>>,
}

/// One `[[route]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteEntry {
    path: Spanned<String>,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
    require_key: Option<bool>,
    body_limit: Option<Spanned<usize>>,
    wait_in_flight: Option<Spanned<String>>,
    lease: Option<Spanned<String>>,
    retention: Option<Spanned<String>>,
    fingerprint: Option<FingerprintEntry>,
    kept_headers: Option<Vec<Spanned<String>>>,
}

/// A route's `fingerprint` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FingerprintEntry {
    ignore: Option<Spanned<Vec<Spanned<String>>>>,
    only: Option<Spanned<Vec<Spanned<String>>>>,
    headers: Option<Vec<Spanned<String>>>,
}

/// A checked route: what it matches and the layer's settings for it.
pub(super) struct Route {
    pub(super) pattern: Pattern,
    pub(super) methods: Vec<Method>,
    pub(super) settings: Settings,
    /// One line on what the route does, for `--check-config`.
    pub(super) summary: String,
}

/// A path pattern: segments that match one segment each (a literal, or `{name}`), and
/// whether a last `*` takes the rest (one segment or more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pattern {
    /// As written: the route's name in traces.
    pub(super) text: String,
    segments: Vec<Segment>,
    rest: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err(format!("{text:?} must start with '/'"));
        };
        if text.contains(['?', '#']) {
            return Err(format!(
                "{text:?}: a path has no query or fragment; the route matches the path alone"
            ));
        }
        let mut segments = Vec::new();
        let mut rest = false;
        let parts: Vec<&str> = body.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if rest {
                return Err(format!("{text:?}: '*' goes last, for the rest of the path"));
            }
            if *part == "*" {
                if i + 1 != parts.len() {
                    return Err(format!("{text:?}: '*' goes last, for the rest of the path"));
                }
                rest = true;
            } else if part.starts_with('{') || part.ends_with('}') {
                let name = part
                    .strip_prefix('{')
                    .and_then(|p| p.strip_suffix('}'))
                    .filter(|name| !name.is_empty() && !name.contains(['{', '}']));
                if name.is_none() {
                    return Err(format!(
                        "{text:?}: a parameter is a whole segment, {{name}}"
                    ));
                }
                segments.push(Segment::Any);
            } else if part.contains(['*', '{', '}']) {
                return Err(format!("{text:?}: '*' and {{name}} are whole segments"));
            } else if !part.is_empty() {
                let literal = unreserved_decoded(part);
                if literal == "." || literal == ".." {
                    return Err(format!("{text:?}: no '.' or '..' segments in a route"));
                }
                segments.push(Segment::Literal(literal));
            }
        }
        Ok(Pattern {
            text: text.to_owned(),
            segments,
            rest,
        })
    }

    /// Whether `path` (a request's, without its query) matches, read as a backend
    /// that normalizes paths reads it ([`segments`]): `/orders/`, `//orders`,
    /// `/%6Frders` and `/x/../orders` all take the `/orders` route, so that no other
    /// spelling of a route's path escapes its rules. Case counts, as in the URL.
    pub(super) fn matches(&self, path: &str) -> bool {
        let Some(parts) = segments(path) else {
            return false;
        };
        let fixed = self.segments.len();
        let enough = if self.rest {
            parts.len() > fixed
        } else {
            parts.len() == fixed
        };
        enough
            && self
                .segments
                .iter()
                .zip(&parts)
                .all(|(segment, part)| match segment {
                    Segment::Any => true,
                    Segment::Literal(literal) => literal == part,
                })
    }
}

/// The segments of `path`: percent-encoded unreserved characters decoded (`%6F` is
/// `o`; `%2F` stays, a slash inside a segment), empty and `.` segments dropped, `..`
/// taking the segment before it away (RFC 3986 §5.2.4, §6.2.2). `None` for a path that
/// does not start with `/`.
fn segments(path: &str) -> Option<Vec<String>> {
    let body = path.strip_prefix('/')?;
    let mut out: Vec<String> = Vec::new();
    for raw in body.split('/') {
        let part = unreserved_decoded(raw);
        match part.as_str() {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(part),
        }
    }
    Some(out)
}

/// `text` with its percent-encoded unreserved characters (letters, digits, `-._~`)
/// decoded, hex digits of either case; every other escape left as it is.
fn unreserved_decoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let decoded = (c == '%')
            .then(|| rest.get(1..3))
            .flatten()
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        match decoded {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[3..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

/// Reads and checks the routes file at `path`, each route's settings made from
/// `defaults` (the flags') and what the route says. Every error names the file and
/// the line.
pub(super) fn load(path: &Path, defaults: &Settings) -> Result<Vec<Route>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&text, defaults).map_err(|(line, message)| match line {
        Some(line) => format!("{}:{line}: {message}", path.display()),
        None => format!("{}: {message}", path.display()),
    })
}

/// An error, with its line when it has one.
type Refusal = (Option<usize>, String);

fn parse(text: &str, defaults: &Settings) -> Result<Vec<Route>, Refusal> {
    let line_of = |span: std::ops::Range<usize>| {
        Some(
            text.get(..span.start)
                .unwrap_or(text)
                .bytes()
                .filter(|&b| b == b'\n')
                .count()
                + 1,
        )
    };
    let file: File = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().to_owned();
        (e.span().and_then(line_of), message)
    })?;
    if file.route.is_empty() {
        return Err((
            None,
            "no [[route]]: a routes file has one or more; without one, leave --routes out"
                .to_owned(),
        ));
    }
    let mut routes = Vec::with_capacity(file.route.len());
    for entry in file.route {
        let at = line_of(entry.span());
        let entry = entry.into_inner();
        routes.push(route(entry, defaults, &line_of).map_err(|(line, e)| (line.or(at), e))?);
    }
    Ok(routes)
}

fn route(
    entry: RouteEntry,
    defaults: &Settings,
    line_of: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<Route, Refusal> {
    let at = |span| line_of(span);
    let pattern = Pattern::parse(entry.path.get_ref())
        .map_err(|e| (at(entry.path.span()), format!("path: {e}")))?;
    let methods = match &entry.methods {
        None => defaults.methods.clone(),
        Some(methods) if methods.get_ref().is_empty() => {
            return Err((
                at(methods.span()),
                "methods: empty; name one or more (POST, PATCH, PUT, DELETE)".to_owned(),
            ));
        }
        Some(methods) => methods
            .get_ref()
            .iter()
            .map(|m| {
                Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()).map_err(|_| {
                    (
                        at(m.span()),
                        format!("methods: {:?} is not an HTTP method", m.get_ref()),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let mut settings = Settings {
        methods: methods.clone(),
        ..defaults.clone()
    };
    if let Some(required) = entry.require_key {
        settings.require_key = required;
    }
    if let Some(limit) = &entry.body_limit {
        if *limit.get_ref() == 0 {
            return Err((
                at(limit.span()),
                "body_limit: 0 bytes, needs at least 1".to_owned(),
            ));
        }
        settings.body_limit = *limit.get_ref();
    }
    if let Some(wait) = &entry.wait_in_flight {
        let ms = parse_duration(wait.get_ref())
            .map_err(|e| (at(wait.span()), format!("wait_in_flight: {e}")))?;
        settings.wait_in_flight = Some(Duration::from_millis(ms));
    }
    let duration = |field: &str, value: &Option<Spanned<String>>| {
        value
            .as_ref()
            .map(|v| {
                parse_duration(v.get_ref()).map_err(|e| (at(v.span()), format!("{field}: {e}")))
            })
            .transpose()
    };
    settings.terms = Terms {
        lease_ms: duration("lease", &entry.lease)?,
        retention_ms: duration("retention", &entry.retention)?,
    };
    let mut said = Vec::new();
    if let Some(fingerprint) = entry.fingerprint {
        if let (Some(_), Some(only)) = (&fingerprint.ignore, &fingerprint.only) {
            return Err((
                at(only.span()),
                "fingerprint: ignore and only together; name what is left out, or what alone counts"
                    .to_owned(),
            ));
        }
        if let Some(ignore) = &fingerprint.ignore {
            settings.ignored_json_paths = pointers("fingerprint.ignore", ignore, &at)?;
            said.push(format!(
                "the fingerprint without {}",
                settings.ignored_json_paths.join(", ")
            ));
        }
        if let Some(only) = &fingerprint.only {
            if only.get_ref().is_empty() {
                return Err((
                    at(only.span()),
                    "fingerprint.only: empty, so no field would count; name one or more".to_owned(),
                ));
            }
            let paths = pointers("fingerprint.only", only, &at)?;
            said.push(format!("the fingerprint of {} alone", paths.join(", ")));
            settings.only_json_paths = Some(paths);
        }
        if let Some(headers) = &fingerprint.headers {
            settings.fingerprint_headers = header_names("fingerprint.headers", headers, &at)?;
        }
    }
    if let Some(kept) = &entry.kept_headers {
        settings.kept_headers = header_names("kept_headers", kept, &at)?;
    }
    if settings.require_key {
        said.push("a key required".to_owned());
    }
    if !settings.fingerprint_headers.is_empty() {
        let names: Vec<&str> = settings
            .fingerprint_headers
            .iter()
            .map(HeaderName::as_str)
            .collect();
        said.push(format!("headers {} in the fingerprint", names.join(", ")));
    }
    if entry.kept_headers.is_some() {
        let names: Vec<&str> = settings
            .kept_headers
            .iter()
            .map(HeaderName::as_str)
            .collect();
        said.push(format!("replays headers {}", names.join(", ")));
    }
    if entry.body_limit.is_some() {
        said.push(format!("bodies up to {} bytes", settings.body_limit));
    }
    if let Some(wait) = &entry.wait_in_flight {
        said.push(format!("duplicates wait {}", wait.get_ref()));
    }
    if let Some(lease) = &entry.lease {
        said.push(format!("a lease of {}", lease.get_ref()));
    }
    if let Some(retention) = &entry.retention {
        said.push(format!("answers kept {}", retention.get_ref()));
    }
    let names: Vec<&str> = methods.iter().map(Method::as_str).collect();
    let summary = format!(
        "{} {}: {}",
        names.join("|"),
        entry.path.get_ref(),
        if said.is_empty() {
            "the flags' rules".to_owned()
        } else {
            said.join("; ")
        }
    );
    Ok(Route {
        pattern,
        methods,
        settings,
        summary,
    })
}

/// JSON Pointers, each checked as the fingerprint will use it.
fn pointers(
    field: &str,
    paths: &Spanned<Vec<Spanned<String>>>,
    at: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<Vec<String>, Refusal> {
    paths
        .get_ref()
        .iter()
        .map(|path| {
            let pointer = path.get_ref();
            idem_core::Fingerprint::canonical_json_selected(
                "{}",
                idem_core::JsonPaths::Ignored(&[pointer.as_str()]),
                64,
            )
            .map_err(|_| {
                (
                    at(path.span()),
                    format!(
                        "{field}: {pointer:?} is not a JSON Pointer (RFC 6901: \"/field/inner\", \"~1\" for '/', \"*\" for every member)"
                    ),
                )
            })?;
            Ok(pointer.clone())
        })
        .collect()
}

fn header_names(
    field: &str,
    names: &[Spanned<String>],
    at: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
) -> Result<Vec<HeaderName>, Refusal> {
    names
        .iter()
        .map(|name| {
            HeaderName::from_bytes(name.get_ref().as_bytes()).map_err(|_| {
                (
                    at(name.span()),
                    format!("{field}: {:?} is not an HTTP header name", name.get_ref()),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_literals_parameters_and_the_rest() {
        let cases: [(&str, &[&str], &[&str]); 5] = [
            (
                "/orders",
                &[
                    "/orders",
                    "/orders/",
                    "//orders",
                    "/%6Frders",
                    "/%6frders",
                    "/x/../orders",
                    "/./orders",
                ],
                &[
                    "/orders/1",
                    "/order",
                    "/",
                    "/Orders",
                    "/%2Forders",
                    "/orders%2F",
                    "orders",
                ],
            ),
            ("/a%7Eb/{id}", &["/a~b/1", "/a%7eb/1"], &["/a%7Fb/1"]),
            (
                "/payments/{id}/capture",
                &["/payments/p-1/capture"],
                &[
                    "/payments//capture",
                    "/payments/p-1",
                    "/payments/p-1/capture/x",
                ],
            ),
            (
                "/api/*",
                &["/api/a", "/api/a/b"],
                &["/api", "/api/", "/apix/a", "/api/a/../.."],
            ),
            ("/", &["/", "//", "/a/.."], &["/orders"]),
        ];
        for (pattern, yes, no) in cases {
            let parsed = Pattern::parse(pattern).unwrap();
            for path in yes {
                assert!(parsed.matches(path), "{pattern} {path}");
            }
            for path in no {
                assert!(!parsed.matches(path), "{pattern} {path}");
            }
        }
        for bad in [
            "orders", "/a/*/b", "/a/{id", "/a/x{id}", "/a/{}", "/a?b", "/a/b*", "/a/../b",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let defaults = Settings::default();
        let refused = |text: &str| match parse(text, &defaults) {
            Ok(_) => panic!("accepted: {text}"),
            Err(refusal) => refusal,
        };
        let (line, message) = refused(
            "[[route]]\npath = \"/orders\"\n\n[[route]]\npath = \"/refunds\"\nfingerprint.ignore = [\"timestamp\"]\n",
        );
        assert_eq!(line, Some(6));
        assert!(
            message.starts_with("fingerprint.ignore: \"timestamp\" is not a JSON Pointer"),
            "{message}"
        );
        let (line, message) = refused("[[route]]\npath = \"/orders\"\nlease_ms = 5\n");
        assert_eq!(line, Some(3));
        assert!(message.contains("unknown field `lease_ms`"), "{message}");
        let (line, message) = refused("[[route]]\npath = \"/orders\"\nretention = \"7 days\"\n");
        assert_eq!(line, Some(3));
        assert!(message.starts_with("retention: "), "{message}");
        let (line, message) = refused("[[route]]\npath = \"orders\"\n");
        assert_eq!(line, Some(2));
        assert!(message.contains("must start with '/'"), "{message}");
        let (line, message) =
            refused("[[route]]\npath = \"/o\"\nmethods = [\"POST\", \"P OST\"]\n");
        assert_eq!(line, Some(3));
        assert!(message.contains("not an HTTP method"), "{message}");
        let (line, message) = refused(
            "[[route]]\npath = \"/o\"\n[route.fingerprint]\nignore = [\"/a\"]\nonly = [\"/b\"]\n",
        );
        assert_eq!(line, Some(5));
        assert!(message.contains("ignore and only together"), "{message}");
        let (line, _) = refused("[[route]]\npath = \"/o\"\nkept_headers = [\"bad header\"]\n");
        assert_eq!(line, Some(3));
        let (line, message) = refused("[[route]\npath = \"/o\"\n");
        assert_eq!(line, Some(1), "{message}");
        let (line, message) = refused("# nothing\n");
        assert_eq!(line, None);
        assert!(message.contains("no [[route]]"), "{message}");
        let (line, message) = refused("[[route]]\nmethods = [\"POST\"]\n");
        assert_eq!(line, Some(1));
        assert!(message.contains("missing field `path`"), "{message}");
    }

    #[test]
    fn a_route_says_what_it_changes_and_keeps_the_flags_for_the_rest() {
        let defaults = Settings {
            body_limit: 1000,
            ..Settings::default()
        };
        let routes = parse(
            "[[route]]\npath = \"/orders\"\nmethods = [\"post\"]\nrequire_key = true\nfingerprint.only = [\"/amount\"]\nkept_headers = [\"X-Cost\"]\nwait_in_flight = \"5s\"\nlease = \"2m\"\nretention = \"7d\"\n[[route]]\npath = \"/api/*\"\n",
            &defaults,
        )
        .unwrap();
        let (orders, api) = (&routes[0], &routes[1]);
        assert_eq!(orders.methods, [Method::POST]);
        assert!(orders.settings.require_key);
        assert_eq!(
            orders.settings.only_json_paths.as_deref(),
            Some(&["/amount".to_owned()][..])
        );
        assert_eq!(
            orders.settings.kept_headers,
            [HeaderName::from_static("x-cost")]
        );
        assert_eq!(orders.settings.wait_in_flight, Some(Duration::from_secs(5)));
        assert_eq!(orders.settings.body_limit, 1000);
        assert_eq!(
            orders.summary,
            "POST /orders: the fingerprint of /amount alone; a key required; replays headers x-cost; duplicates wait 5s; a lease of 2m; answers kept 7d"
        );
        assert_eq!(
            orders.settings.terms,
            Terms {
                lease_ms: Some(120_000),
                retention_ms: Some(7 * 86_400_000)
            }
        );
        assert_eq!(api.settings.terms, Terms::default());
        assert_eq!(api.methods, [Method::POST, Method::PATCH]);
        assert_eq!(api.summary, "POST|PATCH /api/*: the flags' rules");
    }
}
