//! Group commit: the inputs of concurrent callers share one write transaction, and so
//! one fsync, and each caller is answered only after that commit.
//!
//! A thread that calls the store puts its input (a [`Job`]) in the store's queue; if no
//! batch is running, it becomes the leader: it takes every input waiting (at most
//! [`MAX_BATCH`]), runs them one after the other in one write transaction, takes in
//! those that queued while they ran (up to the same bound), commits once, and then
//! hands every caller of the batch its answer. Callers who arrive
//! meanwhile queue up, and one of them leads the next batch: as soon as the commit has
//! returned, so that the next batch runs while this one's callers are woken (a system
//! call each for a thread, which at many callers costs the leader as much as running
//! their inputs). With one caller this is one input per transaction, plus a lock and
//! two small allocations.
//!
//! A task (an HTTP request on tokio) cannot lead: a batch blocks on its fsync, and a
//! task must not block its runtime's thread. Its input goes in the same queue, and the
//! task waits for its answer as a future ([`Answering`]) that holds no thread. Batches
//! whose front input is a task's are led by the store's driver, one thread per store,
//! started with the first such input and stopped when the store is dropped, after it
//! has run what is queued. A task that stops waiting (its future dropped: a client that
//! hung up) still has its input run; its answer goes to the orphan handler given with
//! it, so that a claim nobody received is given back.
//!
//! Inputs run in queue order, so two inputs for the same key in one batch see each
//! other's writes, as they would in two transactions. One input's failure never fails
//! the others:
//!
//! - a protocol refusal (stale generation, wrong state) is decided before anything is
//!   written, so the transaction simply goes on;
//! - an input that fails after it may have written (the work of
//!   [`crate::Store::execute_grouped`] returning an error or panicking, an outcome refused after
//!   the work ran, a storage error) has its answer fixed there; the transaction is rolled
//!   back and the other inputs run again, without it, in a fresh one. redb has no
//!   savepoints inside a transaction that has written (and no ephemeral savepoints at
//!   all in [`redb::ConcurrencyMode::MultiWriter`]), so running the others again is the
//!   honest way to undo exactly one input's writes.
//!
//! When the commit fails, every caller of the batch gets the error, and the store's
//! reopen rule applies to all of them: their outcome is unknown until it is reopened.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::file::writer::Writer;
use crate::seam::report::CommitCounts;

mod failed;
mod jobs;

use failed::fail_all;
pub(crate) use jobs::{Answering, Orphan, Step};
use jobs::{Delivery, ExecutedReading, Execution, Input, Job, Ran, Slot};

/// The most inputs one group transaction takes; the others wait for the next one, so
/// that one transaction never holds the write lock for long.
pub(crate) const MAX_BATCH: usize = 256;

/// How many times a new leader yields at most while callers keep coming back.
const GATHER_ROUNDS: usize = 16;

/// How long a batch counts as running for [`Committer::is_batching`], from when its
/// leader took the lead (gathering, the inputs' work and the commit's syncs included):
/// a batch is one commit with its syncs, so a busy store's batches follow one another
/// within a few milliseconds on a disk with fast syncs. One that has run longer is most likely waiting for another process's write
/// lock, and a caller should not queue behind it for an answer a read snapshot gives at
/// once. On a disk whose syncs take longer, batches outlast it and callers read the
/// snapshot as before: correct, without the saving.
pub(crate) const BATCHING_FOR: Duration = Duration::from_millis(10);

/// The time `Committer::batch_started` counts from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Microseconds since [`EPOCH`], plus an hour: never 0, which means none, and a time
/// up to an hour before the epoch (a test pretends one) still counts from it.
fn micros_now() -> u64 {
    const HOUR: u64 = 3_600_000_000;
    u64::try_from(EPOCH.elapsed().as_micros())
        .unwrap_or(u64::MAX / 2)
        .saturating_add(HOUR)
}

/// The queue of inputs and who leads the running batch; one per store.
///
/// Waiting threads park, waiting tasks hold an [`Answering`]; a leader, once its commit
/// has returned, wakes the thread at the front of the queue (or the driver, for a
/// task's input) to lead the next batch, and then exactly the callers it answered.
#[derive(Default)]
pub(crate) struct Committer {
    queue: Mutex<Queue>,
    // The driver thread, once started; joined when the store is dropped.
    driver: Mutex<Option<JoinHandle<()>>>,
    // When the running batch's leader took the lead (`micros_now`); 0 while no batch
    // runs. Read without the lock ([`Committer::is_batching`]).
    batch_started: AtomicU64,
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
    // The driver thread, which leads batches for tasks; `None` until the first one.
    driver: Option<Thread>,
    // The store is being dropped: the driver runs what is queued, then ends.
    stopping: bool,
}

impl Queue {
    /// Wakes the caller at the front, if any, to lead the next batch: its thread, or
    /// the driver for a task's input.
    fn wake_next_leader(&self) {
        if let Some(next) = self.waiting.front() {
            match (next.leader(), &self.driver) {
                (Some(thread), _) | (None, Some(thread)) => thread.unpark(),
                // Only a task's input has no thread, and it started the driver.
                (None, None) => {}
            }
        }
    }
}

/// What the driver thread leads batches on: the store's committer, writer and config.
pub(crate) trait Batches: Send + Sync + 'static {
    /// The parts a batch runs with.
    fn parts(&self) -> (&Committer, &Writer, &Config);
}

impl Committer {
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

    /// Moves the inputs that queued while the running batch ran into it, before its
    /// commit, up to [`MAX_BATCH`]: their callers would otherwise wait for the whole
    /// next commit. Inputs that come back after a round trip of their own (a proxy's
    /// claim, forwarded upstream, returning with its outcome) arrive spread over a
    /// commit's time; those that arrive before this one syncs share its sync. False
    /// when none was waiting.
    fn join_late(&self, batch: &mut Vec<Box<dyn Job>>) -> bool {
        let mut queue = self.queue();
        let take = queue
            .waiting
            .len()
            .min(MAX_BATCH.saturating_sub(batch.len()));
        batch.extend(queue.waiting.drain(..take));
        take > 0
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
        self.0.batch_started.store(0, Ordering::Relaxed);
        queue.wake_next_leader();
    }
}

impl Committer {
    /// Whether a batch is running now, and began less than [`BATCHING_FOR`] ago: a hint,
    /// already out of date when read, for choosing how to answer before joining one
    /// (`snapshot::before_batch`).
    pub(crate) fn is_batching(&self) -> bool {
        let started = self.batch_started.load(Ordering::Relaxed);
        started != 0
            && micros_now().saturating_sub(started)
                < u64::try_from(BATCHING_FOR.as_micros()).unwrap_or(u64::MAX)
    }

    /// Makes [`Committer::is_batching`] answer as if a batch had begun `ago`, or with
    /// `None`, as if one were running for the next minute (a start in the future, so
    /// that a test descheduled for a while still sees it running).
    #[cfg(test)]
    pub(crate) fn pretend_batching(&self, ago: Option<Duration>) {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let started = match ago {
            Some(ago) => micros_now().saturating_sub(micros(ago)).max(1),
            None => micros_now().saturating_add(micros(Duration::from_secs(60))),
        };
        self.batch_started.store(started, Ordering::Relaxed);
    }

    /// The counts of this committer, with the `commits` of its writer on every path.
    pub(crate) fn counts(&self, commits: u64) -> CommitCounts {
        CommitCounts {
            commits,
            batches: self.batches.load(Ordering::Relaxed),
            batched_inputs: self.batched_inputs.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
        }
    }

    /// Runs one protocol input on `id` at the caller's `now` and returns its answer once
    /// the batch it ran in is durable. `step` may run more than once (see the module
    /// documentation).
    pub(crate) fn input<R: Send + 'static>(
        &self,
        writer: &Writer,
        config: &Config,
        id: &RecordId,
        now: Timestamp,
        step: impl Step<R>,
    ) -> Result<R, Error> {
        // The leader of a batch runs works on its thread: it cannot also wait for one.
        if writer.writing_here() {
            return Err(Error::Reentrant);
        }
        self.submit(writer, config, |reply| {
            Box::new(Input {
                id_key: id.to_key_bytes(),
                now,
                step,
                reply,
            })
        })
    }

    /// Runs an atomic execute on `id_key` (see [`crate::file::execute::steps`]) and returns what it
    /// did once the batch it ran in is durable, with the settled record a decision that
    /// ran no work was made from. `work` may run more than once.
    pub(crate) fn execute<T, E, W>(
        &self,
        writer: &Writer,
        config: &Config,
        id_key: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: W,
    ) -> ExecutedReading<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        W: FnMut(&WriteTransaction) -> Result<(Verdict, Outcome, T), E> + Send + 'static,
    {
        if writer.writing_here() {
            return Err(ExecuteError::Store(Error::Reentrant));
        }
        self.submit(writer, config, |reply| {
            Box::new(Execution {
                id_key,
                fingerprint,
                now,
                work,
                reply,
            })
        })
    }

    /// [`Committer::input`] for a task: the answer as a future that holds no thread
    /// while the batch runs; `orphan` takes an answer whose future was dropped.
    pub(crate) fn input_async<R: Send + 'static, B: Batches>(
        &self,
        batches: &Arc<B>,
        id: &RecordId,
        now: Timestamp,
        step: impl Step<R>,
        orphan: Option<Orphan<Result<R, Error>>>,
    ) -> Result<Answering<Result<R, Error>>, Error> {
        let (_, writer, _) = batches.parts();
        if writer.writing_here() {
            return Err(Error::Reentrant);
        }
        Ok(self.submit_async(batches, orphan, |reply| {
            Box::new(Input {
                id_key: id.to_key_bytes(),
                now,
                step,
                reply,
            })
        }))
    }

    /// Queues one protocol input that nobody waits for (a claim given back by a guard
    /// dropped outside a runtime's reach): the driver runs it in the next batch.
    pub(crate) fn input_detached<R: Send + 'static, B: Batches>(
        &self,
        batches: &Arc<B>,
        id_key: Vec<u8>,
        now: Timestamp,
        step: impl Step<R>,
    ) {
        let job = Box::new(Input {
            id_key,
            now,
            step,
            reply: Delivery::to_task(Slot::detached()),
        });
        self.queue_for_driver(batches, job);
    }

    /// Queues a job and waits for its answer, leading batches while no one else does.
    fn submit<R: 'static>(
        &self,
        writer: &Writer,
        config: &Config,
        job: impl FnOnce(Delivery<R>) -> Box<dyn Job>,
    ) -> R {
        let slot = Slot::new(None);
        let job = job(Delivery::to_thread(Arc::clone(&slot)));
        let mut queue = self.queue();
        queue.waiting.push_back(job);
        loop {
            if let Some(answer) = slot.take() {
                return answer.unwrap_or_else(|panicked| panic::resume_unwind(panicked));
            }
            // With the queue empty, this caller's input is in a batch whose leader will
            // deliver its answer (one that has committed hands the lead on first).
            if queue.leading || queue.waiting.is_empty() {
                // Woken with the answer, or to lead; an unpark between the unlock and
                // the park is kept for the park, and a spurious wake-up only loops.
                drop(queue);
                thread::park();
                queue = self.queue();
                continue;
            }
            queue = self.lead_next(writer, config, queue);
        }
    }

    /// Queues a task's job and returns its answer as a future; the driver of `batches`
    /// leads its batch unless a thread already does. With `orphan`, an answer whose
    /// future was dropped goes there; without, it is dropped.
    fn submit_async<R: 'static, B: Batches>(
        &self,
        batches: &Arc<B>,
        orphan: Option<Orphan<R>>,
        job: impl FnOnce(Delivery<R>) -> Box<dyn Job>,
    ) -> Answering<R> {
        let slot = Slot::new(orphan);
        self.queue_for_driver(batches, job(Delivery::to_task(Arc::clone(&slot))));
        Answering::new(slot)
    }

    /// Queues `job` and makes sure a leader will take it: a running batch's leader
    /// hands on to the next when it is done; with none running, the driver is woken
    /// (started, the first time).
    fn queue_for_driver<B: Batches>(&self, batches: &Arc<B>, job: Box<dyn Job>) {
        let mut queue = self.queue();
        queue.waiting.push_back(job);
        if queue.driver.is_none() {
            let weak = Arc::downgrade(batches);
            let spawned = thread::Builder::new()
                .name("idem-store-commit".into())
                .spawn(move || drive(&weak));
            match spawned {
                Ok(handle) => {
                    queue.driver = Some(handle.thread().clone());
                    *self.driver.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
                }
                // Without a thread to lead, the task's input fails alone.
                Err(e) => {
                    if let Some(mut job) = queue.waiting.pop_back() {
                        drop(queue);
                        job.fail(Error::Storage(redb::Error::Io(e)));
                        job.deliver();
                    }
                    return;
                }
            }
        }
        if !queue.leading {
            queue.wake_next_leader();
        }
    }

    /// Leads the next batch: takes the waiting inputs, runs and commits them with the
    /// queue unlocked, hands the lead on, and answers their callers. Returns the queue
    /// locked again.
    fn lead_next<'q>(
        &'q self,
        writer: &Writer,
        config: &Config,
        mut queue: MutexGuard<'q, Queue>,
    ) -> MutexGuard<'q, Queue> {
        queue.leading = true;
        self.batch_started.store(micros_now(), Ordering::Relaxed);
        queue = self.gather(queue);
        let take = queue.waiting.len().min(MAX_BATCH);
        queue.last_batch = take;
        let batch: Vec<Box<dyn Job>> = queue.waiting.drain(..take).collect();
        drop(queue);
        let turn = Leading(self);
        let answered = self.lead(writer, config, batch);
        // The batch is durable (or failed): the next one may start while its callers
        // are woken, one system call each for threads.
        drop(turn);
        for job in answered {
            job.deliver();
        }
        self.queue()
    }

    /// Stops the driver, if one was started, once it has run every queued input, and
    /// waits for it to end. Called when the store is dropped.
    pub(crate) fn stop_driver(&self) {
        let mut queue = self.queue();
        queue.stopping = true;
        if let Some(driver) = &queue.driver {
            driver.unpark();
        }
        drop(queue);
        let handle = self
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            // A panic of the driver was a panic of a batch, answered to its callers.
            let _ = handle.join();
        }
    }

    /// Runs a batch in one transaction and commits it; returns its jobs, each with its
    /// answer, for the caller to deliver.
    fn lead(
        &self,
        writer: &Writer,
        config: &Config,
        mut batch: Vec<Box<dyn Job>>,
    ) -> Vec<Box<dyn Job>> {
        // Inputs that failed after writing: answered, rolled back, out of the batch.
        let mut failed = Vec::new();
        while !batch.is_empty() {
            // Every input was refused before it queued on a read-only store.
            let ran = writer.transact("write", |txn, tables| {
                let mut changed = false;
                let mut from = 0;
                loop {
                    for (i, job) in batch.iter_mut().enumerate().skip(from) {
                        match job.run(config, txn, tables) {
                            Ran::Unchanged => {}
                            Ran::Changed => changed = true,
                            // Roll back; the others run again without it.
                            Ran::Failed => return Ok((Some(i), false)),
                        }
                    }
                    from = batch.len();
                    if !self.join_late(&mut batch) {
                        break;
                    }
                }
                Ok::<_, Error>((None, changed))
            });
            match ran {
                Ok(Some(i)) => {
                    failed.push(batch.remove(i));
                    continue;
                }
                Ok(None) => self.count_batch(batch.len()),
                Err(error) => fail_all(&mut batch, error),
            }
            break;
        }
        batch.extend(failed);
        batch
    }
}

/// The driver thread: leads the batches whose front input is a task's, until the store
/// is dropped and nothing is queued.
fn drive<B: Batches>(batches: &Weak<B>) {
    loop {
        thread::park();
        let Some(batches) = batches.upgrade() else {
            return;
        };
        let (committer, writer, config) = batches.parts();
        // Inputs' panics are caught in their batch; one outside them (in the store's own
        // code) has answered its batch's callers with it by unwinding, and the driver
        // goes on leading the next batches.
        let done = panic::catch_unwind(AssertUnwindSafe(|| {
            let mut queue = committer.queue();
            while !queue.leading && !queue.waiting.is_empty() {
                queue = committer.lead_next(writer, config, queue);
            }
            queue.stopping && queue.waiting.is_empty() && !queue.leading
        }));
        if done.unwrap_or(false) {
            return;
        }
    }
}
