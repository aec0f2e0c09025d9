//! What happens in the simulated world, and when: [`Event`] and the time-ordered [`Queue`].
//!
//! Time jumps from one event to the next, so a quiet hour costs nothing.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use idem_core::{Generation, Outcome, RecordId, Reply, Verdict};

use super::faults::Fault;

/// A request on the wire: one attempt of one intent.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The sender's index.
    pub sender: usize,
    /// The sender's incarnation that sent it; its reply goes back to that one.
    pub incarnation: u32,
    /// The idempotency key.
    pub key: Arc<str>,
    /// The intent's operation.
    pub operation: Arc<str>,
    /// The intent's payload.
    pub payload: Arc<[u8]>,
    /// Which attempt this is.
    pub attempt: u32,
}

/// A reply on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// The sender's index.
    pub sender: usize,
    /// The sender's incarnation the request came from.
    pub incarnation: u32,
    /// The idempotency key.
    pub key: Arc<str>,
    /// What the receiver answered.
    pub reply: Reply,
}

/// A two-phase execution in progress at the receiver.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The request being executed.
    pub request: Request,
    /// Its record id.
    pub id: RecordId,
    /// The claim's generation.
    pub generation: Generation,
    /// The receiver of the fleet running it (0 when there is one).
    pub replica: usize,
    /// That receiver's incarnation: a crash loses it.
    pub incarnation: u32,
}

/// One thing that happens at one time.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// A customer buys at a sender: a sale and its intent.
    Sale {
        /// The sender.
        sender: usize,
    },
    /// A sender's outbox asked to be woken at this time.
    Wake {
        /// The sender.
        sender: usize,
        /// The (true) time it was scheduled for; a later reschedule makes it stale.
        at: u64,
    },
    /// A sender's request timeout for one attempt.
    Timeout {
        /// The sender.
        sender: usize,
        /// The incarnation that sent the attempt.
        incarnation: u32,
        /// The intent.
        key: Arc<str>,
        /// The attempt number.
        attempt: u32,
    },
    /// A request arrives at the receiver.
    Request(Request),
    /// A reply arrives at a sender.
    Reply(Response),
    /// A two-phase executor calls the provider (after checking it still holds the key).
    Charge(Job),
    /// A two-phase executor settles the key with the provider's answer.
    Settle {
        /// The execution.
        job: Job,
        /// The provider's verdict.
        verdict: Verdict,
        /// The provider's answer.
        outcome: Outcome,
    },
    /// The receiver's periodic sweep.
    Sweep,
    /// The receiver's periodic reconciler.
    Reconcile,
    /// An injected fault.
    Fault(Fault),
}

impl Event {
    /// Periodic chores run only while something else is going on.
    fn is_chore(&self) -> bool {
        matches!(self, Event::Sweep | Event::Reconcile)
    }
}

struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Scheduled) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Scheduled) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    // Reversed: BinaryHeap is a max-heap, the earliest event must come out first; equal
    // times keep the order they were scheduled in.
    fn cmp(&self, other: &Scheduled) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Events by time, ties in scheduling order.
#[derive(Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    work: usize,
}

impl Queue {
    /// Schedules `event` at true time `at`.
    pub(crate) fn push(&mut self, at: u64, event: Event) {
        if !event.is_chore() {
            self.work += 1;
        }
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The earliest event and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, Event)> {
        let next = self.heap.pop()?;
        if !next.event.is_chore() {
            self.work -= 1;
        }
        Some((next.at, next.event))
    }

    /// True while an event other than a periodic chore is scheduled.
    #[must_use]
    pub(crate) fn has_work(&self) -> bool {
        self.work > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_ties_in_order_chores_are_not_work() {
        let mut q = Queue::default();
        q.push(5, Event::Sale { sender: 1 });
        q.push(3, Event::Sweep);
        q.push(5, Event::Sale { sender: 2 });
        assert!(q.has_work());
        assert!(matches!(q.pop(), Some((3, Event::Sweep))));
        assert!(matches!(q.pop(), Some((5, Event::Sale { sender: 1 }))));
        assert!(matches!(q.pop(), Some((5, Event::Sale { sender: 2 }))));
        assert!(!q.has_work());
        assert!(q.pop().is_none());
    }
}
