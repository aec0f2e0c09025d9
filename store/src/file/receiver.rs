//! `impl Receiver for Store`: the redb engine behind the seam. A protocol input joins
//! the store's group commit as a task's input, so its future holds no thread while its
//! batch runs; a begin dropped while it waits gives its claim back.

use std::io::{BufRead, Write};
use std::ops::ControlFlow;
use std::sync::Arc;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, Terms, Timestamp, Verdict,
};

use crate::error::{Error, ImportError, MaintainError};
use crate::file::group::{Orphan, Step};
use crate::file::store::{Shared, Store};
use crate::file::two_phase::steps as two_phase;
use crate::seam::filter::ListFilter;
use crate::seam::receiver::{GiveUp, Receiver};
use crate::seam::report::{
    Abandoned, Check, CommitCounts, ReconcileError, ReconcileReport, Stats, SweepReport,
    Transferred,
};

impl Receiver for Store {
    fn config(&self) -> &Config {
        Store::config(self)
    }

    fn commit_counts(&self) -> Option<CommitCounts> {
        Some(Store::commit_counts(self))
    }

    /// Reopens a store that failed (a full disk), if it can now: a health check
    /// follows the store back without a write.
    async fn ready(&self) -> bool {
        self.unready().await.is_none()
    }

    /// The cause a reopen failed with, named with the file (a full disk). Once open
    /// again, the claims whose commit failed and that landed are given back.
    async fn unready(&self) -> Option<String> {
        if let Err(e) = self.recover() {
            return Some(e.to_string());
        }
        if self.is_read_only() {
            return None;
        }
        self.give_back_in_doubt(crate::now());
        // Below the reserve, claims are refused: a load balancer sends them elsewhere.
        let room = self.shared.room.as_ref()?;
        room.for_claim().err().map(|e| e.to_string())
    }

    async fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Decision, Error> {
        let shared = self.shared();
        shared.writer.ensure_writable("begin")?;
        self.give_back_in_doubt(now);
        let id_key = id.to_key_bytes();
        if let Some(decision) = self.answer_before_batch(&id_key, fingerprint, now)? {
            return Ok(decision);
        }
        let epoch = shared.cache.epoch();
        let (step, tried) = self.claim_step(fingerprint);
        let answered = match shared.committer.input_async(
            shared,
            id,
            now,
            two_phase::under(terms, step),
            Some(give_back(shared, id, now)),
        ) {
            Ok(answer) => answer.await,
            Err(e) => Err(e),
        };
        let answered = self.noting_in_doubt(id, &tried, answered)?;
        Ok(self.begun(&id_key, answered, epoch))
    }

    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        let step = two_phase::under(terms, two_phase::heartbeat(generation));
        self.input_async("heartbeat", id, now, step).await
    }

    async fn complete_with(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        let epoch = self.shared().cache.epoch();
        let step = two_phase::under(terms, two_phase::complete(generation, verdict, outcome));
        let record = self.input_async("complete", id, now, step).await?;
        self.keep_settled(id, Some(&record), epoch);
        Ok(record)
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.input_async("release", id, now, two_phase::release(generation))
            .await
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.input_async("mark_unknown", id, now, two_phase::mark_unknown(generation))
            .await
    }

    async fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        let epoch = self.shared().cache.epoch();
        let step = two_phase::resolve(resolution);
        let record = self.input_async("resolve", id, now, step).await?;
        self.keep_settled(id, record.as_ref(), epoch);
        Ok(record)
    }

    fn give_up(&self, id: &RecordId, generation: Generation, how: GiveUp, now: Timestamp) {
        give_up_in_background(self.shared(), id.to_key_bytes(), generation, how, now);
    }

    async fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        Store::get(self, id)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<(RecordId, Record)>, Error> {
        let mut records = Vec::new();
        Store::list(self, filter, |id, record| {
            records.push((id, record));
            ControlFlow::Continue(())
        })?;
        Ok(records)
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        Store::stats(self, now)
    }

    async fn sweep(
        &self,
        now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        Store::sweep(self, now, limit, dry_run)
    }

    async fn recover_abandoned(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        self.recover_at_most(now, limit)
    }

    async fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        Store::reconcile(self, now, limit, checker)
    }

    async fn export(&self, out: &mut (dyn Write + Send)) -> Result<Transferred, MaintainError> {
        Store::export(self, out)
    }

    async fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Transferred, ImportError> {
        Store::import(self, input)
    }
}

impl Store {
    /// One protocol input of a task, refused on a read-only store as `operation`: its
    /// answer once its batch is durable, waited for without a thread.
    async fn input_async<R: Send + 'static>(
        &self,
        operation: &'static str,
        id: &RecordId,
        now: Timestamp,
        step: impl Step<R>,
    ) -> Result<R, Error> {
        let shared = self.shared();
        shared.writer.ensure_writable(operation)?;
        shared
            .committer
            .input_async(shared, id, now, step, None)?
            .await
    }
}

/// What a begin whose future was dropped does with its answer: a claim nobody received
/// is released in the background, so that a retry claims the key again.
fn give_back(
    shared: &Arc<Shared>,
    id: &RecordId,
    now: Timestamp,
) -> Orphan<Result<(Decision, Option<Record>), Error>> {
    let shared = Arc::downgrade(shared);
    let id_key = id.to_key_bytes();
    Box::new(move |answered| {
        if let (Ok((Decision::Claimed { generation, .. }, _)), Some(shared)) =
            (answered, shared.upgrade())
        {
            give_up_in_background(&shared, id_key, generation, GiveUp::Release, now);
        }
    })
}

fn give_up_in_background(
    shared: &Arc<Shared>,
    id_key: Vec<u8>,
    generation: Generation,
    how: GiveUp,
    now: Timestamp,
) {
    match how {
        GiveUp::Release => {
            let step = two_phase::release(generation);
            shared.committer.input_detached(shared, id_key, now, step);
        }
        GiveUp::MarkUnknown => {
            let step = two_phase::mark_unknown(generation);
            shared.committer.input_detached(shared, id_key, now, step);
        }
    }
}
