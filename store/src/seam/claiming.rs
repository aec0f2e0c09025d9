//! A begin on a server engine, as a future that gives back a claim nobody received: the
//! [`Receiver::begin`] cancellation rule, written once for the engines whose begin is
//! calls to a server (PostgreSQL, MariaDB, Redis); and the check of what a fenced input
//! of theirs wrote.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use idem_core::protocol::Decision;
use idem_core::{RecordId, Timestamp};
use tokio::runtime::Handle;

use crate::error::Error;
use crate::seam::receiver::Receiver;
use crate::seam::running::Running;

/// The record a fenced input that writes one wrote: idem-core decides a record for
/// heartbeat, complete and mark-unknown, never a delete.
#[cfg(any(feature = "mysql", feature = "redis"))]
pub(crate) fn written(record: Option<idem_core::Record>) -> Result<idem_core::Record, Error> {
    record.ok_or_else(|| Error::Corrupt {
        detail: "idem-core decided a delete where it writes a record".into(),
    })
}

/// A begin's calls, as a future that may move to a task of its own.
pub(crate) type BeginWork = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>;

/// A begin's calls, run in the caller's task. Dropped before they answered (the HTTP
/// client hung up), they finish in a task of their own on `runtime`, counted in
/// `background`, which gives back a claim they made: no key stays claimed by nobody.
pub(crate) struct Claiming<S: Receiver + Clone + Unpin> {
    store: S,
    id: RecordId,
    runtime: Handle,
    background: Running,
    work: Option<BeginWork>,
}

impl<S: Receiver + Clone + Unpin> Claiming<S> {
    /// `work`, the begin of `id` on `store`.
    pub(crate) fn new(
        store: S,
        id: RecordId,
        runtime: Handle,
        background: Running,
        work: BeginWork,
    ) -> Claiming<S> {
        Claiming {
            store,
            id,
            runtime,
            background,
            work: Some(work),
        }
    }
}

impl<S: Receiver + Clone + Unpin> Future for Claiming<S> {
    type Output = Result<Decision, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(Err(Error::Corrupt {
                detail: "a begin was polled after its answer".into(),
            }));
        };
        let decided = std::task::ready!(work.as_mut().poll(cx));
        // Answered: the caller has it, claim or not.
        self.work = None;
        Poll::Ready(decided)
    }
}

impl<S: Receiver + Clone + Unpin> Drop for Claiming<S> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        let (store, id) = (self.store.clone(), self.id.clone());
        let entered = self.background.enter();
        self.runtime.spawn(async move {
            let _entered = entered;
            if let Ok(Decision::Claimed { generation, .. }) = work.await {
                // A failure leaves the claim Pending; a retry after its lease finds it
                // as the protocol says.
                let _given_back = store.release(&id, generation, Timestamp(0)).await;
            }
        });
    }
}
