//! Work a receiver started in the background, counted, so a server can wait for it
//! before it exits: a claimed request whose client hung up, a claim given back.
// Public through `http::Running`; the server engines alone use it inside the crate.
#![cfg_attr(not(feature = "http"), allow(unreachable_pub))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A count of background work, shared by clones; [`Running::idle`] waits for zero.
#[derive(Debug, Clone, Default)]
pub struct Running {
    inner: Arc<Count>,
}

#[derive(Debug, Default)]
struct Count {
    now: AtomicUsize,
    idle: Notify,
}

/// One piece of work, counted until it is dropped.
#[derive(Debug)]
pub(crate) struct Entered(Arc<Count>);

impl Running {
    /// Counts one more piece of work until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Entered {
        self.inner.now.fetch_add(1, Ordering::SeqCst);
        Entered(Arc::clone(&self.inner))
    }

    /// How many pieces of work are running.
    #[must_use]
    pub fn count(&self) -> usize {
        self.inner.now.load(Ordering::SeqCst)
    }

    /// Ready once no work is running (at once when none is).
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the count is read: a drop to zero after the read wakes it.
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.now.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_the_last_piece_of_work() {
        let running = Running::default();
        running.idle().await; // none: at once
        let (first, second) = (running.enter(), running.enter());
        assert_eq!(running.count(), 2);
        let waiting = tokio::spawn({
            let running = running.clone();
            async move { running.idle().await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one is still running");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("idle once the last is dropped")
            .unwrap();
        assert_eq!(running.count(), 0);
    }
}
