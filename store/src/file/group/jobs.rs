//! The inputs a batch runs: a protocol input on one record, or an atomic execute. Each
//! keeps its answer until the batch is durable, then hands it to its waiting caller.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};

use idem_core::{Config, Fingerprint, Outcome, Record, Timestamp, Verdict, Write};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::file::execute::steps::{admit_all, execute_in};
use crate::file::schema::Tables;
use crate::seam::report::Executed;

/// What a caller whose batch was abandoned by a panicking leader gets: its own panic.
pub(super) const ABANDONED: &str = "idem-store: the thread committing this input's batch panicked \
                                    inside the store; the batch's outcome is unknown";

/// What running one input in the batch's transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ran {
    /// Answered; wrote nothing.
    Unchanged,
    /// Answered; wrote.
    Changed,
    /// Answered with a failure after it may have written: roll back, run the others
    /// again without it.
    Failed,
}

/// One caller's input, waiting in the queue or running in a batch.
pub(super) trait Job: Send {
    /// Runs the input under `config` in the batch's transaction, whose store tables are
    /// `tables`, and keeps its answer for delivery. Catches panics of the input, which
    /// then fails alone.
    fn run(&mut self, config: &Config, txn: &WriteTransaction, tables: &mut Tables<'_>) -> Ran;
    /// The thread waiting for this job's answer, which may lead the next batch; `None`
    /// for a task or for nobody, whose batches the store's driver thread leads.
    fn leader(&self) -> Option<&Thread>;
    /// The batch failed as a whole: the answer becomes `error`.
    fn fail(&mut self, error: Error);
    /// Hands the answer to the caller.
    fn deliver(self: Box<Self>);
}

/// The answer a caller waits for: its value, or the panic of its input.
type Answer<R> = thread::Result<R>;

/// What is done with an answer whose caller stopped waiting for it (a dropped
/// [`Answering`]): a claim nobody received is given back.
pub(crate) type Orphan<R> = Box<dyn FnOnce(R) + Send>;

/// Where a job's answer goes, shared by its [`Delivery`] and its caller.
pub(super) struct Slot<R> {
    state: Mutex<SlotState<R>>,
}

struct SlotState<R> {
    answer: Option<Answer<R>>,
    // The task to wake when the answer arrives.
    waker: Option<Waker>,
    // The caller is gone: the answer goes to `orphan`, or is dropped.
    gone: bool,
    orphan: Option<Orphan<R>>,
}

impl<R> Slot<R> {
    /// A slot for a caller that waits; `orphan` takes the answer if it stops waiting.
    pub(super) fn new(orphan: Option<Orphan<R>>) -> Arc<Slot<R>> {
        Arc::new(Slot {
            state: Mutex::new(SlotState {
                answer: None,
                waker: None,
                gone: false,
                orphan,
            }),
        })
    }

    /// A slot whose answer nobody waits for.
    pub(super) fn detached() -> Arc<Slot<R>> {
        let slot = Slot::new(None);
        slot.state().gone = true;
        slot
    }

    fn state(&self) -> MutexGuard<'_, SlotState<R>> {
        // Nothing panics while holding the lock; a poisoned slot is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer, if it has arrived.
    pub(super) fn take(&self) -> Option<Answer<R>> {
        self.state().answer.take()
    }
}

/// Hands an answer nobody will read to the orphan handler, outside the slot's lock.
fn orphaned<R>(orphan: Option<Orphan<R>>, answer: Answer<R>) {
    if let (Some(orphan), Ok(answer)) = (orphan, answer) {
        orphan(answer);
    }
}

/// A job's answer until delivery. Dropped undelivered (the leader panicked), it hands
/// the caller a panic instead: the batch's outcome is unknown. Either way the caller
/// is woken.
pub(super) struct Delivery<R> {
    answer: Option<Answer<R>>,
    delivered: bool,
    slot: Arc<Slot<R>>,
    // The waiting thread, which may lead; `None` for a task or nobody.
    thread: Option<Thread>,
}

impl<R> Delivery<R> {
    /// A reply to the current thread, through `slot`.
    pub(super) fn to_thread(slot: Arc<Slot<R>>) -> Delivery<R> {
        Delivery {
            answer: None,
            delivered: false,
            slot,
            thread: Some(thread::current()),
        }
    }

    /// A reply to whoever awaits `slot` (an [`Answering`]), or to nobody.
    pub(super) fn to_task(slot: Arc<Slot<R>>) -> Delivery<R> {
        Delivery {
            answer: None,
            delivered: false,
            slot,
            thread: None,
        }
    }

    fn set(&mut self, answer: Answer<R>) {
        self.answer = Some(answer);
    }

    fn deliver(mut self) {
        self.delivered = true;
    }
}

impl<R> Drop for Delivery<R> {
    fn drop(&mut self) {
        let answer = match (self.delivered, self.answer.take()) {
            (true, Some(answer)) => answer,
            _ => Err(Box::new(ABANDONED) as Box<dyn Any + Send>),
        };
        let mut state = self.slot.state();
        if state.gone {
            let orphan = state.orphan.take();
            drop(state);
            orphaned(orphan, answer);
            return;
        }
        state.answer = Some(answer);
        let waker = state.waker.take();
        drop(state);
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The answer of a job queued by a task: ready once its batch is durable. Dropped
/// before that, the answer goes to the slot's orphan handler when it comes.
pub(crate) struct Answering<R> {
    slot: Arc<Slot<R>>,
    done: bool,
}

impl<R> Answering<R> {
    pub(super) fn new(slot: Arc<Slot<R>>) -> Answering<R> {
        Answering { slot, done: false }
    }
}

impl<R> Future for Answering<R> {
    type Output = R;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let mut state = self.slot.state();
        match state.answer.take() {
            Some(answer) => {
                drop(state);
                self.done = true;
                Poll::Ready(answer.unwrap_or_else(|panicked| panic::resume_unwind(panicked)))
            }
            None => {
                match &mut state.waker {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => state.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl<R> Drop for Answering<R> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.slot.state();
        state.gone = true;
        state.waker = None;
        if let Some(answer) = state.answer.take() {
            let orphan = state.orphan.take();
            drop(state);
            orphaned(orphan, answer);
        }
    }
}

/// A protocol input on one record: `step` reads the record and returns the core's write
/// with the answer.
pub(super) struct Input<R, S> {
    pub(super) id_key: Vec<u8>,
    /// The caller's time; the step gets it raised to the clock floor.
    pub(super) now: Timestamp,
    pub(super) step: S,
    pub(super) reply: Delivery<Result<R, Error>>,
}

/// The protocol step of an [`Input`]: the store's tables, the record as this
/// transaction sees it, the store's config and the time to use (the caller's, never
/// behind the clock floor); returns the core's write and the answer.
pub(crate) trait Step<R>:
    FnMut(&mut Tables<'_>, Option<&Record>, &Config, Timestamp) -> Result<(Write, R), Error>
    + Send
    + 'static
{
}

impl<R, S> Step<R> for S where
    S: FnMut(&mut Tables<'_>, Option<&Record>, &Config, Timestamp) -> Result<(Write, R), Error>
        + Send
        + 'static
{
}

impl<R: Send + 'static, S: Step<R>> Job for Input<R, S> {
    fn run(&mut self, config: &Config, _: &WriteTransaction, tables: &mut Tables<'_>) -> Ran {
        let Input {
            id_key, now, step, ..
        } = self;
        let ran = panic::catch_unwind(AssertUnwindSafe(|| -> Result<(bool, R), Error> {
            let current = tables.get(id_key)?;
            let now = tables.effective(*now)?;
            let (write, answer) = step(tables, current.as_ref(), config, now)?;
            let changed = tables.apply(id_key, current.as_ref(), &write)?;
            if changed {
                tables.raise_floor(now)?;
            }
            Ok((changed, answer))
        }));
        let (ran, answer) = match ran {
            Ok(Ok((true, answer))) => (Ran::Changed, Ok(Ok(answer))),
            Ok(Ok((false, answer))) => (Ran::Unchanged, Ok(Ok(answer))),
            // The core refuses before anything is written.
            Ok(Err(refused @ Error::Refused(_))) => (Ran::Unchanged, Ok(Err(refused))),
            // A claim refused for want of room, before anything is written.
            Ok(Err(no_room @ Error::NoRoom { .. })) => (Ran::Unchanged, Ok(Err(no_room))),
            Ok(Err(error)) => (Ran::Failed, Ok(Err(error))),
            Err(panicked) => (Ran::Failed, Err(panicked)),
        };
        self.reply.set(answer);
        ran
    }

    fn leader(&self) -> Option<&Thread> {
        self.reply.thread.as_ref()
    }

    fn fail(&mut self, error: Error) {
        self.reply.set(Ok(Err(error)));
    }

    fn deliver(self: Box<Self>) {
        self.reply.deliver();
    }
}

/// What an atomic execute in a batch did, with the settled record (or tombstone) a
/// decision that ran no work was made from, for the replay cache, which keeps nothing
/// else.
pub(crate) type ExecutedReading<T, E> = Result<(Executed<T>, Option<Record>), ExecuteError<E>>;

/// An atomic execute whose work another caller's thread may run.
pub(super) struct Execution<T, E, W> {
    pub(super) id_key: Vec<u8>,
    pub(super) fingerprint: Fingerprint,
    pub(super) now: Timestamp,
    pub(super) work: W,
    pub(super) reply: Delivery<ExecutedReading<T, E>>,
}

impl<T, E, W> Job for Execution<T, E, W>
where
    T: Send + 'static,
    E: Send + 'static,
    W: FnMut(&WriteTransaction) -> Result<(Verdict, Outcome, T), E> + Send + 'static,
{
    fn run(&mut self, config: &Config, txn: &WriteTransaction, tables: &mut Tables<'_>) -> Ran {
        let Execution {
            id_key,
            fingerprint,
            now,
            work,
            ..
        } = self;
        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
            let (changed, executed, read) = execute_in(
                txn,
                tables,
                id_key,
                *fingerprint,
                *now,
                config,
                admit_all,
                &mut *work,
            )?;
            let Ok(executed) = executed;
            // Only settled records (and tombstones) are kept by the cache; a record the
            // decision changed (a lease run out, now Unknown) is not one.
            let read = read.filter(|record| !changed && record.expires_at().is_some());
            Ok((changed, (executed, read)))
        }));
        let (ran, answer) = match ran {
            Ok(Ok((true, executed))) => (Ran::Changed, Ok(Ok(executed))),
            Ok(Ok((false, executed))) => (Ran::Unchanged, Ok(Ok(executed))),
            // The work may have written before its error, or before the outcome was
            // refused: roll it back.
            Ok(Err(error)) => (Ran::Failed, Ok(Err(error))),
            Err(panicked) => (Ran::Failed, Err(panicked)),
        };
        self.reply.set(answer);
        ran
    }

    fn leader(&self) -> Option<&Thread> {
        self.reply.thread.as_ref()
    }

    fn fail(&mut self, error: Error) {
        self.reply.set(Ok(Err(ExecuteError::Store(error))));
    }

    fn deliver(self: Box<Self>) {
        self.reply.deliver();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undelivered_reply_answers_with_a_panic() {
        let slot: Arc<Slot<u8>> = Slot::new(None);
        let mut reply = Delivery::to_thread(Arc::clone(&slot));
        reply.set(Ok(7));
        drop(reply); // the leader unwound before the commit
        let answer = slot.take().unwrap();
        assert_eq!(
            answer.unwrap_err().downcast_ref::<&str>().copied(),
            Some(ABANDONED)
        );
        let mut reply = Delivery::to_thread(Arc::clone(&slot));
        reply.set(Ok(8));
        reply.deliver();
        assert_eq!(slot.take().unwrap().unwrap(), 8);
    }
}
