//! Atomic execute, for an effect in the same file: the claim, the work's writes and the settled record commit together.

pub(crate) mod steps;

use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use redb::WriteTransaction;

use crate::error::ExecuteError;
use crate::file::store::Store;
use crate::seam::report::Executed;

impl Store {
    /// Atomic execute: claims `id`, runs `work` inside the same write transaction, and
    /// commits the work's writes together with the settled record, or nothing.
    ///
    /// `work` gets the transaction to write its own tables (any name that does not start
    /// with `idem.`) and to call the store's functions that take a transaction
    /// ([`crate::outbox::Outbox::enqueue_in`], [`Store::transition_in`], [`Store::claim_unique_in`]),
    /// and returns the verdict, the outcome to replay to every retry, and a value for
    /// this caller. No Pending record is ever visible on this path. If `work` returns an
    /// error (or panics), everything rolls back and the key stays claimable.
    ///
    /// `work` runs while this process holds the store's write lock: keep it short, do no
    /// network I/O in it, and write only through its transaction: the store's other
    /// writes called from it are refused at once with [`crate::Error::Reentrant`] (they would
    /// wait for the lock this call holds). For effects
    /// outside the file, use the two-phase path ([`Store::begin`]).
    ///
    /// Each call commits on its own (one fsync); when many threads execute at once,
    /// [`Store::execute_grouped`] shares the commit between them. Both run the same
    /// code in the transaction.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the work's error; [`ExecuteError::Store`] for storage
    /// errors, or [`idem_core::Refusal::OutcomeTooLarge`] (rolled back as well).
    pub fn execute<T, E>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
    ) -> Result<Executed<T>, ExecuteError<E>> {
        let Ok(executed) = steps::alone(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            "execute",
            &id.to_key_bytes(),
            fingerprint,
            now,
            steps::admit_all,
            work,
        )?;
        Ok(executed)
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
    /// A key that is settled, in progress, in conflict or unknown is answered as
    /// [`Store::begin`] answers it: without entering a batch, from the replay cache or a
    /// read snapshot, except that while batches follow one another in the
    /// multi-process modes a key the cache does not hold joins the next batch, which
    /// answers it. `work` runs while the batch holds the write lock on the leader's
    /// thread: a store write called from it (another execute, a begin, ...) is refused
    /// with [`crate::Error::Reentrant`] instead of waiting for itself.
    ///
    /// # Errors
    ///
    /// As [`Store::execute`]: [`ExecuteError::Work`] with the work's error (rolled
    /// back); [`ExecuteError::Store`] for storage errors, a refused outcome, or the
    /// batch's failed commit ([`crate::Error::CommitFailed`], for every caller of the batch).
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
        self.shared.writer.ensure_writable("execute_grouped")?;
        let id_key = id.to_key_bytes();
        let epoch = self.shared.cache.epoch();
        let answered = self.answer_before_batch(&id_key, fingerprint, now)?;
        if let Some(decision) = answered {
            return Ok(Executed::NotRun(decision));
        }
        let (executed, read) = self.shared.committer.execute(
            &self.shared.writer,
            &self.shared.config,
            id_key.clone(),
            fingerprint,
            now,
            work,
        )?;
        // Answered only after its batch committed: a retry is answered from memory (the
        // cache keeps settled records only).
        match (&executed, read) {
            (Executed::Ran { record, .. }, _) => self.shared.cache.insert(&id_key, record, epoch),
            (Executed::NotRun(_), Some(record)) => {
                self.shared.cache.insert(&id_key, &record, epoch)
            }
            (Executed::NotRun(_), None) => {}
        }
        Ok(executed)
    }
}
