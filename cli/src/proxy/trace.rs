//! Traces: the W3C trace context of each request (`traceparent`), its ids in the access
//! log, and, with the `otel` feature and the standard `OTEL_*` variables, a span per
//! request exported over OTLP/HTTP (`otel.rs`).
//!
//! Without an exporter the proxy changes nothing in the trace: `traceparent` goes to the
//! backend as it came, and the access log names its trace and the caller's span, whose
//! children the backend's spans are. With one, the proxy's own span joins the trace
//! between the caller and the backend (the backend's `traceparent` names it), and a
//! replay's span links to the span of the request that ran: the `traceparent` of that
//! request is kept with its outcome (the response header `idem-trace`, replayed with
//! it and removed before any answer leaves the proxy).

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::exit::Failure;

/// The response header that keeps, with an outcome, the trace context of the request
/// that ran: what a replay's span links to.
pub(super) const KEPT_TRACE: HeaderName = HeaderName::from_static("idem-trace");

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
#[cfg(feature = "otel")]
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// In a request's extensions when the proxy exports a span for it: the upstream then
/// hands the request's `traceparent` (the span's) back in [`KEPT_TRACE`], to be kept
/// with the outcome. A request without it keeps no trace: its `traceparent` is the
/// client's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exported;

/// A W3C trace context (`traceparent`, version 00).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TraceParent {
    pub(super) trace_id: [u8; 16],
    /// The span of the caller: the parent of whatever the receiver does.
    pub(super) span_id: [u8; 8],
    pub(super) flags: u8,
}

impl TraceParent {
    /// The `traceparent` of `headers`, when there is one valid one.
    pub(super) fn of(headers: &HeaderMap) -> Option<TraceParent> {
        let mut values = headers.get_all(TRACEPARENT).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        TraceParent::parse(value.to_str().ok()?)
    }

    /// Parses `00-<32 hex>-<16 hex>-<2 hex>`; all-zero ids are invalid.
    pub(super) fn parse(text: &str) -> Option<TraceParent> {
        let mut parts = text.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        // Version 00 has four fields; a later version may add some after them.
        if version != "00" && (version == "ff" || hex::<1>(version).is_none()) {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = hex::<16>(trace)?;
        let span_id = hex::<8>(span)?;
        let [flags] = hex::<1>(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Whether the caller records the trace (the `sampled` flag).
    // The exporter's sampler and propagation use these two; only `otel` builds it.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub(super) fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `traceparent` header of this context.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub(super) fn header(&self) -> HeaderValue {
        let text = format!(
            "00-{}-{}-{:02x}",
            to_hex(&self.trace_id),
            to_hex(&self.span_id),
            self.flags
        );
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// Lower-case hex of `bytes`.
pub(super) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from exactly `2N` lower-case hex digits.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// The proxy's tracing: the exporter when the `otel` feature is built and the
/// environment asks for one, else the trace context alone.
pub(super) struct Tracing {
    #[cfg(feature = "otel")]
    exporter: Option<super::otel::Exporter>,
}

/// One request's trace, from [`Tracing::begin`] to [`Tracing::end`].
pub(super) struct Traced {
    /// The trace, for the access log.
    pub(super) trace_id: Option<String>,
    /// The proxy's span when it is exported, else the caller's; for the access log.
    pub(super) span_id: Option<String>,
    #[cfg(feature = "otel")]
    span: Option<super::otel::OpenSpan>,
}

/// What ended a request, for its span.
// Read by the exporter alone, which only the `otel` feature builds.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(super) struct Ended<'a> {
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    /// The route's pattern, when a route of `--routes` took the request.
    pub(super) route: Option<&'a str>,
    pub(super) status: u16,
    pub(super) answer: &'static str,
    pub(super) key: Option<&'a str>,
    /// The trace context of the request whose outcome a replay is.
    pub(super) ran_in: Option<TraceParent>,
}

impl Tracing {
    /// The tracing the environment asks for: with the `otel` feature, an OTLP/HTTP
    /// exporter when an `OTEL_EXPORTER_OTLP_*ENDPOINT` is set (or `OTEL_TRACES_EXPORTER`
    /// is `otlp`); a setting it cannot follow is refused by name.
    pub(super) fn from_env() -> Result<Tracing, Failure> {
        Ok(Tracing {
            #[cfg(feature = "otel")]
            exporter: super::otel::Exporter::from_env()?,
        })
    }

    /// Whether spans are exported: then requests carry the proxy's span upstream and
    /// outcomes keep their trace context.
    pub(super) fn exporting(&self) -> bool {
        #[cfg(feature = "otel")]
        {
            self.exporter.is_some()
        }
        #[cfg(not(feature = "otel"))]
        {
            false
        }
    }

    /// Starts sending spans (on the runtime), once the proxy listens.
    pub(super) fn start(&self) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = &self.exporter {
            exporter.start();
        }
    }

    /// Sends the spans still waiting, within the export timeout: at the proxy's stop.
    pub(super) async fn flush(&self) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = &self.exporter {
            exporter.flush().await;
        }
    }

    /// Begins the trace of a request with `headers`: with an exporter whose sampler
    /// takes it, the proxy's span, whose context replaces the request's `traceparent`
    /// so that the backend's spans are its children.
    pub(super) fn begin<B>(&self, request: &mut http::Request<B>) -> Traced {
        let parent = TraceParent::of(request.headers());
        #[cfg(feature = "otel")]
        if let Some(exporter) = &self.exporter
            && let Some(span) = exporter.open(parent)
        {
            let headers = request.headers_mut();
            headers.insert(TRACEPARENT, span.context().header());
            if parent.is_none() {
                // A new trace: a vendor's state of another (or of none) does not go on.
                headers.remove(TRACESTATE);
            }
            request.extensions_mut().insert(Exported);
            return Traced {
                trace_id: Some(to_hex(&span.context().trace_id)),
                span_id: Some(to_hex(&span.context().span_id)),
                span: Some(span),
            };
        }
        Traced {
            trace_id: parent.map(|p| to_hex(&p.trace_id)),
            span_id: parent.map(|p| to_hex(&p.span_id)),
            #[cfg(feature = "otel")]
            span: None,
        }
    }

    /// Ends a request's trace: its span, if it has one, is exported.
    #[cfg_attr(not(feature = "otel"), allow(unused_variables, clippy::unused_self))]
    pub(super) fn end(&self, traced: Traced, ended: &Ended<'_>) {
        #[cfg(feature = "otel")]
        if let (Some(exporter), Some(span)) = (&self.exporter, traced.span) {
            exporter.close(span, ended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_w3c_trace_context_says() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(text).unwrap();
        assert_eq!(to_hex(&parent.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(to_hex(&parent.span_id), "00f067aa0ba902b7");
        assert!(parent.sampled());
        assert_eq!(parent.header().to_str().unwrap(), text);
        // A later version may carry more fields; version 00 may not.
        assert!(TraceParent::parse(&format!("01-{}-extra", &text[3..])).is_some());
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }
}
