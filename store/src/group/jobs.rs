//! The inputs a batch runs: a protocol input on one record, or an atomic execute. Each
//! keeps its answer until the batch is durable, then hands it to its waiting caller.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, Thread};

use idem_core::{Config, Fingerprint, Outcome, Record, Timestamp, Verdict, Write};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::execute::{Executed, execute_in};
use crate::tables::Tables;

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
    /// The thread waiting for this job's answer.
    fn caller(&self) -> &Thread;
    /// The batch failed as a whole: the answer becomes `error`.
    fn fail(&mut self, error: Error);
    /// Hands the answer to the caller.
    fn deliver(self: Box<Self>);
}

/// The answer a caller waits for: its value, or the panic of its input.
type Answer<R> = thread::Result<R>;
pub(super) type Slot<R> = Arc<Mutex<Option<Answer<R>>>>;

/// A job's answer until delivery. Dropped undelivered (the leader panicked), it hands
/// the caller a panic instead: the batch's outcome is unknown. Either way the caller
/// is woken.
pub(super) struct Reply<R> {
    answer: Option<Answer<R>>,
    delivered: bool,
    slot: Slot<R>,
    caller: Thread,
}

impl<R> Reply<R> {
    /// A reply to the current thread, through `slot`.
    pub(super) fn new(slot: Slot<R>) -> Reply<R> {
        Reply {
            answer: None,
            delivered: false,
            slot,
            caller: thread::current(),
        }
    }

    fn set(&mut self, answer: Answer<R>) {
        self.answer = Some(answer);
    }

    fn deliver(mut self) {
        self.delivered = true;
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        let answer = match (self.delivered, self.answer.take()) {
            (true, Some(answer)) => answer,
            _ => Err(Box::new(ABANDONED) as Box<dyn Any + Send>),
        };
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
        self.caller.unpark();
    }
}

/// A protocol input on one record: `step` reads the record and returns the core's write
/// with the answer.
pub(super) struct Input<R, S> {
    pub(super) id_key: Vec<u8>,
    /// The caller's time; the step gets it raised to the clock floor.
    pub(super) now: Timestamp,
    pub(super) step: S,
    pub(super) reply: Reply<Result<R, Error>>,
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
            Ok(Err(error)) => (Ran::Failed, Ok(Err(error))),
            Err(panicked) => (Ran::Failed, Err(panicked)),
        };
        self.reply.set(answer);
        ran
    }

    fn caller(&self) -> &Thread {
        &self.reply.caller
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
    pub(super) reply: Reply<ExecutedReading<T, E>>,
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
            let (changed, executed, read) =
                execute_in(txn, tables, id_key, *fingerprint, *now, config, &mut *work)?;
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

    fn caller(&self) -> &Thread {
        &self.reply.caller
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
        let slot: Slot<u8> = Arc::default();
        let mut reply = Reply::new(Arc::clone(&slot));
        reply.set(Ok(7));
        drop(reply); // the leader unwound before the commit
        let answer = slot.lock().unwrap().take().unwrap();
        assert_eq!(
            answer.unwrap_err().downcast_ref::<&str>().copied(),
            Some(ABANDONED)
        );
        let mut reply = Reply::new(Arc::clone(&slot));
        reply.set(Ok(8));
        reply.deliver();
        assert_eq!(slot.lock().unwrap().take().unwrap().unwrap(), 8);
    }
}
