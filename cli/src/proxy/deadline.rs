//! The upstream's response body, cut at the upstream deadline.
//!
//! `--upstream-timeout` bounds a keyed request's whole answer, head and body, so an
//! upstream that sends its head and then stalls fails the request (the key Unknown: it may
//! have acted) instead of holding it, its claim and its connection for ever. A request
//! passed through (no key) streams its body as long as it takes: a download, a stream of
//! events.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use idem_core::http::Problem;
use idem_store::http::BodyFailed;
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body that fails once its deadline, if it has one, passes before its end.
pub(super) struct Deadline {
    body: Incoming,
    deadline: Option<Pin<Box<Sleep>>>,
    /// The whole answer's time, for the message.
    limit: Duration,
}

impl Deadline {
    /// `body`, due by `deadline` (`limit` after the request was sent), or whenever
    /// without one.
    pub(super) fn new(body: Incoming, deadline: Option<Instant>, limit: Duration) -> Deadline {
        Deadline {
            body,
            deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
            limit,
        }
    }
}

impl Body for Deadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let Some(deadline) = this.deadline.as_mut() else {
            return Poll::Pending;
        };
        match deadline.as_mut().poll(cx) {
            // Answered as a stalled head is: 504, the key Unknown.
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyFailed(Problem::new(
                504,
                "upstream-timeout",
                format!(
                    "the upstream's answer did not arrive whole within {} ms \
                     (--upstream-timeout): it may have acted, the outcome under this key is unknown",
                    this.limit.as_millis()
                ),
            )))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
