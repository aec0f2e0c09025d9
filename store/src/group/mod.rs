//! Group commit: the inputs of concurrent callers share one write transaction, and so
//! one fsync, and each caller is answered only after that commit.
//!
//! There is no committer thread. A caller puts its input (a [`Job`]) in the store's
//! queue; if no batch is running, it becomes the leader: it takes every input waiting
//! (at most [`MAX_BATCH`]), runs them one after the other in one write transaction,
//! commits once, and then hands every caller of the batch its answer. Callers who
//! arrive meanwhile queue up, and one of them leads the next batch. With one caller
//! this is one input per transaction, as before, plus a lock and two small allocations.
//!
//! Inputs run in queue order, so two inputs for the same key in one batch see each
//! other's writes, as they would in two transactions. One input's failure never fails
//! the others:
//!
//! - a protocol refusal (stale generation, wrong state) is decided before anything is
//!   written, so the transaction simply goes on;
//! - an input that fails after it may have written (the work of
//!   [`Store::execute_grouped`] returning an error or panicking, an outcome refused after
//!   the work ran, a storage error) has its answer fixed there; the transaction is rolled
//!   back and the other inputs run again, without it, in a fresh one. redb has no
//!   savepoints inside a transaction that has written (and no ephemeral savepoints at
//!   all in [`redb::ConcurrencyMode::MultiWriter`]), so running the others again is the
//!   honest way to undo exactly one input's writes.
//!
//! When the commit fails, every caller of the batch gets the error, and the store's
//! reopen rule applies to all of them: their outcome is unknown until it is reopened.

use std::collections::VecDeque;
use std::io;
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;

use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use redb::{CommitError, StorageError, WriteTransaction};
use serde::Serialize;

use crate::tables::Tables;
use crate::{Error, ExecuteError, Executed, Store};

mod jobs;

pub(crate) use jobs::Step;
use jobs::{Execution, Input, Job, Ran, Reply, Slot};

/// The most inputs one group transaction takes; the others wait for the next one, so
/// that one transaction never holds the write lock for long.
pub const MAX_BATCH: usize = 256;

/// How many times a new leader yields at most while callers keep coming back.
const GATHER_ROUNDS: usize = 16;

/// How many commits a [`Store`] made and how its inputs were grouped, since it was
/// opened. See [`Store::commit_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CommitCounts {
    /// Write transactions this store committed, on every path (each one fsync with
    /// the default durability).
    pub commits: u64,
    /// Group transactions run to their end: committed, or aborted because none of
    /// their inputs wrote anything.
    pub batches: u64,
    /// Inputs answered by those group transactions.
    pub batched_inputs: u64,
    /// The most inputs one group transaction answered.
    pub largest_batch: u64,
}

/// The queue of inputs and who leads the running batch; one per [`Store`].
///
/// Waiting callers park; a leader wakes exactly the callers it answered, and, when it
/// is done, the caller at the front of the queue to lead the next batch.
#[derive(Default)]
pub(crate) struct Committer {
    queue: Mutex<Queue>,
    commits: AtomicU64,
    batches: AtomicU64,
    batched_inputs: AtomicU64,
    largest_batch: AtomicU64,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Box<dyn Job>>,
    leading: bool,
    // Inputs the last batch took: how many callers may be coming back.
    last_batch: usize,
}

impl Queue {
    /// Wakes the caller at the front, if any, to lead the next batch.
    fn wake_next_leader(&self) {
        if let Some(next) = self.waiting.front() {
            next.caller().unpark();
        }
    }
}

impl Committer {
    /// Counts a successful commit of the store (any path).
    pub(crate) fn count_commit(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding the lock; a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before a batch starts: while callers of the previous batch are on their way back
    /// with their next input (they were just answered, so they are runnable, not yet
    /// queued), yields to let them join, as long as each yield brings more of them.
    /// With one caller, or when everyone is back, this costs nothing: one fsync per
    /// batch is what matters, and a batch that leaves half the callers for the next one
    /// pays it twice.
    fn gather<'q>(&'q self, mut queue: MutexGuard<'q, Queue>) -> MutexGuard<'q, Queue> {
        let expected = queue.last_batch.min(MAX_BATCH);
        let mut seen = queue.waiting.len();
        for _ in 0..GATHER_ROUNDS {
            if seen >= expected {
                break;
            }
            drop(queue);
            thread::yield_now();
            queue = self.queue();
            if queue.waiting.len() == seen {
                break;
            }
            seen = queue.waiting.len();
        }
        queue
    }

    fn count_batch(&self, inputs: usize) {
        let inputs = inputs as u64;
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched_inputs.fetch_add(inputs, Ordering::Relaxed);
        self.largest_batch.fetch_max(inputs, Ordering::Relaxed);
    }
}

/// Ends the leader's turn, also while a panic unwinds: the next waiting caller leads.
struct Leading<'c>(&'c Committer);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.queue();
        queue.leading = false;
        queue.wake_next_leader();
    }
}

impl Store {
    /// How many commits this store made since it was opened, and how group commit
    /// batched its inputs. `batched_inputs / batches` above 1 means callers shared
    /// fsyncs.
    #[must_use]
    pub fn commit_counts(&self) -> CommitCounts {
        let c = &self.committer;
        CommitCounts {
            commits: c.commits.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            batched_inputs: c.batched_inputs.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
        }
    }

    /// Runs one protocol input on `id` through group commit and returns its answer
    /// once the batch it ran in is durable.
    pub(crate) fn grouped_input<R: Send + 'static>(
        &self,
        id: &RecordId,
        step: impl Step<R>,
    ) -> Result<R, Error> {
        self.submit(|reply| {
            Box::new(Input {
                id_key: id.to_key_bytes(),
                step,
                reply,
            })
        })
    }

    /// Atomic execute, like [`Store::execute`], with the commit shared with concurrent
    /// callers: their claims, their work's writes and their settled records commit in
    /// one transaction, with one fsync, and each caller is answered after it.
    ///
    /// Use it when many threads execute at once; with one caller it costs what
    /// [`Store::execute`] costs. The work is the same as there (it writes its own
    /// tables in the transaction it gets and returns the verdict, the outcome and a
    /// value), with three differences that follow from sharing:
    ///
    /// - `work` may run on another caller's thread, so it is `Send + 'static`: move or
    ///   `Arc` what it needs.
    /// - `work` may run more than once. When another input of the same batch fails after
    ///   writing, the transaction is rolled back and the batch runs again without it;
    ///   only the run whose transaction commits counts. So `work` must take everything
    ///   from the transaction and its captures, and do nothing outside the transaction
    ///   (the rule of [`Store::execute`] already: no network I/O).
    /// - If `work` fails or panics, only its own writes and claim are rolled back; the
    ///   other callers of the batch commit. A panic is resumed on the caller's thread.
    ///
    /// A key that is settled, in progress, in conflict or unknown is answered from a
    /// read snapshot without entering a batch. Do not call the store from `work`: it
    /// runs while the batch holds the write lock (that deadlocks).
    ///
    /// # Errors
    ///
    /// As [`Store::execute`]: [`ExecuteError::Work`] with the work's error (rolled
    /// back); [`ExecuteError::Store`] for storage errors, a refused outcome, or the
    /// batch's failed commit ([`Error::CommitFailed`], for every caller of the batch).
    pub fn execute_grouped<T, E, W>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: W,
    ) -> Result<Executed<T>, ExecuteError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        W: FnMut(&WriteTransaction) -> Result<(Verdict, Outcome, T), E> + Send + 'static,
    {
        self.ensure_writable("execute_grouped")?;
        let id_key = id.to_key_bytes();
        let epoch = self.cache.epoch();
        if let Some(decision) = self.begin_from_snapshot(&id_key, fingerprint, now)? {
            return Ok(Executed::NotRun(decision));
        }
        let executed = self.submit(|reply| {
            Box::new(Execution {
                id_key: id_key.clone(),
                fingerprint,
                now,
                work,
                reply,
            })
        })?;
        // Answered only after its batch committed: a retry is answered from memory.
        if let Executed::Ran { record, .. } = &executed {
            self.cache.insert(&id_key, record, epoch);
        }
        Ok(executed)
    }

    /// Queues a job and waits for its answer, leading batches while no one else does.
    fn submit<R: 'static>(&self, job: impl FnOnce(Reply<R>) -> Box<dyn Job>) -> R {
        let slot: Slot<R> = Arc::default();
        let job = job(Reply::new(Arc::clone(&slot)));
        let committer = &self.committer;
        let mut queue = committer.queue();
        queue.waiting.push_back(job);
        loop {
            if let Some(answer) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                return answer.unwrap_or_else(|panicked| panic::resume_unwind(panicked));
            }
            if queue.leading {
                // Woken with the answer, or to lead; an unpark between the unlock and
                // the park is kept for the park, and a spurious wake-up only loops.
                drop(queue);
                thread::park();
                queue = committer.queue();
                continue;
            }
            queue.leading = true;
            queue = committer.gather(queue);
            let take = queue.waiting.len().min(MAX_BATCH);
            queue.last_batch = take;
            let batch: Vec<Box<dyn Job>> = queue.waiting.drain(..take).collect();
            drop(queue);
            let turn = Leading(committer);
            self.lead(batch);
            drop(turn);
            queue = committer.queue();
        }
    }

    /// Runs a batch in one transaction, commits it, and delivers every answer.
    fn lead(&self, mut batch: Vec<Box<dyn Job>>) {
        // Inputs that failed after writing: answered, rolled back, out of the batch.
        let mut failed = Vec::new();
        while !batch.is_empty() {
            // Every input was refused before it queued on a read-only store.
            let writing = match self.writing("write") {
                Ok(writing) => writing,
                Err(error) => {
                    fail_all(&mut batch, error);
                    break;
                }
            };
            let mut changed = false;
            let mut failed_at = None;
            let opened = Tables::open(&writing.txn).map(|mut tables| {
                for (i, job) in batch.iter_mut().enumerate() {
                    match job.run(self, &writing.txn, &mut tables) {
                        Ran::Unchanged => {}
                        Ran::Changed => changed = true,
                        Ran::Failed => {
                            failed_at = Some(i);
                            break;
                        }
                    }
                }
            });
            if let Err(error) = opened {
                fail_all(&mut batch, error);
                break;
            }
            if let Some(i) = failed_at {
                failed.push(batch.remove(i));
                if let Err(error) = self.finish(writing, false) {
                    fail_all(&mut batch, error);
                    break;
                }
                continue;
            }
            match self.finish(writing, changed) {
                Ok(()) => self.committer.count_batch(batch.len()),
                Err(error) => fail_all(&mut batch, error),
            }
            break;
        }
        for job in batch.into_iter().chain(failed) {
            job.deliver();
        }
    }
}

/// Gives every job of a failed batch the error: the first the error itself, the others
/// an equivalent one (redb's errors cannot be cloned).
fn fail_all(batch: &mut [Box<dyn Job>], error: Error) {
    let Some((first, rest)) = batch.split_first_mut() else {
        return;
    };
    for job in rest {
        job.fail(replicate(&error));
    }
    first.fail(error);
}

/// An error equal in variant and message to `error`, for another caller of its batch.
fn replicate(error: &Error) -> Error {
    match error {
        Error::Busy { waited } => Error::Busy { waited: *waited },
        Error::NeedsReopen => Error::NeedsReopen,
        Error::CommitFailed(CommitError::TransactionPoisoned) => {
            Error::CommitFailed(CommitError::TransactionPoisoned)
        }
        Error::CommitFailed(CommitError::Storage(storage)) => {
            Error::CommitFailed(CommitError::Storage(replicate_storage(storage)))
        }
        Error::Corrupt { detail } => Error::Corrupt {
            detail: detail.clone(),
        },
        Error::Refused(refusal) => Error::Refused(refusal.clone()),
        Error::Storage(redb::Error::TransactionPoisoned) => {
            Error::Storage(redb::Error::TransactionPoisoned)
        }
        Error::Storage(redb::Error::Io(e)) => Error::Storage(redb::Error::Io(copy_io(e))),
        Error::Io(e) => Error::Io(copy_io(e)),
        other => Error::Storage(redb::Error::Io(io::Error::other(other.to_string()))),
    }
}

fn replicate_storage(error: &StorageError) -> StorageError {
    match error {
        StorageError::Io(e) => StorageError::Io(copy_io(e)),
        StorageError::Corrupted(detail) => StorageError::Corrupted(detail.clone()),
        StorageError::PreviousIo => StorageError::PreviousIo,
        other => StorageError::Io(io::Error::other(other.to_string())),
    }
}

fn copy_io(error: &io::Error) -> io::Error {
    io::Error::new(error.kind(), error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn replicated_errors_keep_variant_and_message() {
        let io = || io::Error::new(io::ErrorKind::StorageFull, "no space left on device");
        let errors = [
            Error::Busy {
                waited: Duration::from_millis(7),
            },
            Error::NeedsReopen,
            Error::CommitFailed(CommitError::Storage(StorageError::Io(io()))),
            Error::CommitFailed(CommitError::TransactionPoisoned),
            Error::Storage(redb::Error::Io(io())),
            Error::Io(io()),
        ];
        for error in &errors {
            let copy = replicate(error);
            assert_eq!(copy.to_string(), error.to_string());
            assert_eq!(std::mem::discriminant(&copy), std::mem::discriminant(error));
        }
    }
}
