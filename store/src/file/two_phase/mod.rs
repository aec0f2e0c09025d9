//! The two-phase path, for an effect outside the file: begin, then complete, release or mark unknown; heartbeat and resolve.

pub(crate) mod steps;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, Timestamp, Verdict};

use crate::error::Error;
use crate::file::store::Store;

impl Store {
    /// A request with `fingerprint` arrives for `id`: the first step of the two-phase
    /// path. On [`Decision::Claimed`] the Pending record is committed before this returns;
    /// execute, then [`Store::complete`], [`Store::release`] or [`Store::mark_unknown`]
    /// with the generation. A key that is settled, in progress, in conflict or unknown is
    /// answered from the replay cache or a read snapshot, without waiting for any
    /// writer; except while batches follow one another in the multi-process modes,
    /// where a key the cache does not hold joins the next batch and is answered by it,
    /// waiting as a write does (up to the lock timeout for each batch it waits behind),
    /// and a settled record is then kept in the cache (a read snapshot per call there
    /// costs more than it saves: see `snapshot.rs`).
    ///
    /// # Errors
    ///
    /// [`Error`] from storage; the protocol itself never refuses a begin.
    pub fn begin(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Decision, Error> {
        self.shared.writer.ensure_writable("begin")?;
        self.give_back_in_doubt(now);
        let id_key = id.to_key_bytes();
        let answered = self.answer_before_batch(&id_key, fingerprint, now)?;
        if let Some(decision) = answered {
            return Ok(decision);
        }
        // Read before the batch reads the record.
        let epoch = self.shared.cache.epoch();
        let (step, tried) = self.claim_step(fingerprint);
        let answered =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step);
        let answered = self.noting_in_doubt(id, &tried, answered)?;
        Ok(self.begun(&id_key, answered, epoch))
    }

    /// A begin's step for the batch, which refuses a claim below the reserve, and
    /// where it notes the generation of a claim it made: a commit that fails leaves
    /// that claim in doubt until the reopen.
    pub(crate) fn claim_step(
        &self,
        fingerprint: Fingerprint,
    ) -> (
        impl crate::file::group::Step<(Decision, Option<Record>)> + use<>,
        Arc<AtomicU64>,
    ) {
        let tried = Arc::new(AtomicU64::new(0));
        let step = steps::begin_noting(fingerprint, Arc::clone(&tried), self.shared.room.clone());
        (step, tried)
    }

    /// `answered`, a begin's batch answer; when it failed in a way that needs the
    /// reopen after the step claimed, the claim is noted in doubt.
    pub(crate) fn noting_in_doubt<T>(
        &self,
        id: &RecordId,
        tried: &AtomicU64,
        answered: Result<T, Error>,
    ) -> Result<T, Error> {
        if answered.is_err() {
            let generation = tried.load(Ordering::Relaxed);
            if generation != 0 && self.needs_reopen() {
                self.shared.in_doubt.add(id, Generation(generation));
            }
        }
        answered
    }

    /// Gives back the claims whose commit failed and that the reopen shows landed
    /// (docs/design.md §16): their begin was answered with its error, so nobody runs
    /// them. Each is released by its generation, which refuses anything else under the
    /// key; one the store fails to release stays in doubt for a later call.
    pub(crate) fn give_back_in_doubt(&self, now: Timestamp) {
        if !self.shared.in_doubt.any() || self.recover().is_err() {
            return;
        }
        for (id, generation) in self.shared.in_doubt.take() {
            match self.release(&id, generation, now) {
                Ok(()) | Err(Error::Refused(_)) => {}
                Err(_) => self.shared.in_doubt.add(&id, generation),
            }
        }
    }

    /// The executor holding `generation` extends its lease to `now + lease`.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] with [`idem_core::Refusal::NotFound`] or
    /// [`idem_core::Refusal::Stale`]; storage errors.
    pub fn heartbeat(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("heartbeat")?;
        let step = steps::heartbeat(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// The executor holding `generation` settles the key; the outcome is replayed to
    /// every retry until its retention ends.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale, outcome too large); storage errors.
    pub fn complete(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("complete")?;
        let epoch = self.shared.cache.epoch();
        let step = steps::complete(generation, verdict, outcome);
        let record =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        self.keep_settled(id, Some(&record), epoch);
        Ok(record)
    }

    /// The executor holding `generation` did nothing: the record is deleted and a retry
    /// may claim the key. `now` raises the clock floor, as every write of a record
    /// does.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale); storage errors.
    pub fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.shared.writer.ensure_writable("release")?;
        let step = steps::release(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// The executor holding `generation` cannot tell whether its effect happened: the
    /// record becomes Unknown until [`Store::resolve`].
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, stale); storage errors.
    pub fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.shared.writer.ensure_writable("mark_unknown")?;
        let step = steps::mark_unknown(generation);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// A reconciler settles an Unknown record. Returns the settled record, or `None` for
    /// [`Resolution::NotExecuted`], which deletes it so a retry claims a fresh generation.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] (not found, not Unknown, outcome too large); storage errors.
    pub fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        self.shared.writer.ensure_writable("resolve")?;
        let epoch = self.shared.cache.epoch();
        let step = steps::resolve(resolution);
        let record =
            self.shared
                .committer
                .input(&self.shared.writer, &self.shared.config, id, now, step)?;
        self.keep_settled(id, record.as_ref(), epoch);
        Ok(record)
    }
}
