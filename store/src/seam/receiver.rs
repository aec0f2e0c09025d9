//! The receiver seam: what the HTTP layer, `idem proxy`, the reconciler and the
//! operator need of a store, as one trait an engine implements. The redb
//! [`crate::Store`] implements it in `file/receiver.rs`, `crate::postgres::PgStore` in
//! `postgres/receiver.rs`, [`crate::any::AnyStore`] in `any/receiver.rs`.
//!
//! The protocol is idem-core's ([`idem_core::protocol`]): an engine reads a record,
//! hands it to the core and applies the write the core returns, in one transaction
//! (or, on a server database, as a write conditioned on what it read). No engine
//! decides a rule of its own.
//!
//! The inputs are futures: a caller on an async runtime waits for its commit without
//! holding a thread. On the redb store, a protocol input joins the store's group
//! commit and its future is woken once its batch is durable; the batch itself runs on
//! the store's driver thread. The reads and the maintenance calls of the redb store
//! (get, list, stats, sweep, reconcile, export, import) run on the thread that polls
//! them: call those from a blocking context when their work is large.

use std::future::Future;
use std::io::{BufRead, Write};

use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, Terms, Timestamp, Verdict,
};

use crate::error::{Error, ImportError, MaintainError};
use crate::seam::filter::ListFilter;
use crate::seam::report::{
    Abandoned, Check, CommitCounts, ReconcileError, ReconcileReport, Stats, SweepReport,
    Transferred,
};

/// What becomes of a claim whose holder gives it up without settling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// Nothing was executed: the claim is deleted and a retry may claim the key.
    Release,
    /// The holder may have acted and cannot tell: the key becomes Unknown.
    MarkUnknown,
}

/// A store of idempotency records, as a receiver uses it: the protocol's inputs
/// (docs/design.md §2), the reads, and the operator's maintenance.
///
/// Every time is the caller's `now`; an engine may keep a clock of its own that
/// never goes backwards (the redb store's clock floor), and uses it as the protocol
/// says. Errors are the store's [`Error`] family, so that a caller tells a refusal of
/// the protocol ([`Error::Refused`]) from a failure of the engine on every engine.
///
/// # Cancellation
///
/// A future of an input may be dropped before it is answered (an HTTP client hung up).
/// The input may still take effect; [`Receiver::begin`] then gives back a claim that
/// nobody received (it is released, so a retry claims the key again), and the other
/// inputs are settlements whose effect is the caller's intent anyway.
pub trait Receiver: Send + Sync + 'static {
    /// The protocol settings the engine applies.
    fn config(&self) -> &Config;

    /// True when the engine can take inputs now (the file needs no reopen; the
    /// database answers): what a load balancer's health check asks.
    fn ready(&self) -> impl Future<Output = bool> + Send;

    /// Why the engine cannot take inputs now (the disk is full, the database does not
    /// answer), or `None` when it can: what a health check shows. By default, from
    /// [`Receiver::ready`] without a cause.
    fn unready(&self) -> impl Future<Output = Option<String>> + Send {
        async {
            if self.ready().await {
                None
            } else {
                Some("the store cannot take requests".to_owned())
            }
        }
    }

    /// Why answers are less durable than the server's settings promise at this moment,
    /// though the engine takes inputs (a semi-synchronous primary that fell back to
    /// asynchronous replication: a failover now can lose an answered request), or `None`:
    /// what a health check shows as degraded. By default, never.
    fn degraded(&self) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }

    /// The durability risk this engine runs under by its operator's choice: a server
    /// setting that can lose an answered request, accepted at connect
    /// (`accept_unsafe_durability`), named with its value; `None` when there is none. What
    /// a health check and a metric show, so that the choice stays seen.
    fn accepted_risk(&self) -> Option<&str> {
        None
    }

    /// Ready once nothing this engine started in the background is still running (a
    /// claim given back after its caller left, a give-up): what a server waits for
    /// before it exits. An engine that finishes such work before it is dropped (the
    /// file's, whose driver is joined) is idle at once.
    fn idle(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// How many commits this engine made and how its group commit batched inputs, since
    /// it was opened: what a metric shows beside the request rate. `None` for an engine
    /// whose commits are the database's (each statement commits on its own).
    fn commit_counts(&self) -> Option<CommitCounts> {
        None
    }

    /// A request with `fingerprint` arrives for `id`: claim it, or answer it (replay,
    /// in progress, conflict, unknown, forgotten). On [`Decision::Claimed`] the Pending
    /// record is durable before the future is ready.
    fn begin(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.begin_with(id, fingerprint, now, Terms::default())
    }

    /// [`Receiver::begin`] under a caller's `terms`: a claim gets the terms' lease where
    /// they give one (a route of an HTTP server with a lease of its own).
    fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        terms: Terms,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// The holder of `generation` extends its lease.
    fn heartbeat(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> impl Future<Output = Result<Record, Error>> + Send {
        self.heartbeat_with(id, generation, now, Terms::default())
    }

    /// [`Receiver::heartbeat`] under a caller's `terms`: the lease is extended by the
    /// terms' where they give one.
    fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
        terms: Terms,
    ) -> impl Future<Output = Result<Record, Error>> + Send;

    /// The holder of `generation` settles the key with `verdict` and `outcome`.
    fn complete(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> impl Future<Output = Result<Record, Error>> + Send {
        self.complete_with(id, generation, verdict, outcome, now, Terms::default())
    }

    /// [`Receiver::complete`] under a caller's `terms`: the outcome is kept for the
    /// terms' retention where they give one.
    fn complete_with(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
        terms: Terms,
    ) -> impl Future<Output = Result<Record, Error>> + Send;

    /// The holder of `generation` did nothing: the claim is deleted.
    fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The holder of `generation` cannot tell whether it acted: the key becomes
    /// Unknown.
    fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> impl Future<Output = Result<Record, Error>> + Send;

    /// A reconciler settles an Unknown record; `None` for [`Resolution::NotExecuted`].
    fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<Record>, Error>> + Send;

    /// Gives up the claim of `generation` without waiting: the engine applies `how` in
    /// the background. For a guard dropped where nothing can be awaited (a task torn
    /// down by its runtime); a failure leaves the claim Pending, and a retry after its
    /// lease finds it as the protocol says.
    fn give_up(&self, id: &RecordId, generation: Generation, how: GiveUp, now: Timestamp);

    /// The record of `id`, if there is one.
    fn get(&self, id: &RecordId) -> impl Future<Output = Result<Option<Record>, Error>> + Send;

    /// The records that match `filter`, in the order [`ListFilter`] says.
    fn list(
        &self,
        filter: &ListFilter,
    ) -> impl Future<Output = Result<Vec<(RecordId, Record)>, Error>> + Send;

    /// Counts by state and ages, for alerting.
    fn stats(&self, now: Timestamp) -> impl Future<Output = Result<Stats, MaintainError>> + Send;

    /// How many keys are Unknown and wait for a reconciler: what a metric polls. An
    /// engine that can count them alone (an index) answers without counting the rest,
    /// as [`Receiver::stats`] does.
    fn unknown_keys(&self) -> impl Future<Output = Result<u64, MaintainError>> + Send {
        async move { Ok(self.stats(crate::seam::clock::now()).await?.unknown) }
    }

    /// Sweeps settled records past their retention, at most `limit`.
    fn sweep(
        &self,
        now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> impl Future<Output = Result<SweepReport, Error>> + Send;

    /// Finds the claims whose lease ran out at `now` (their executor went silent), at
    /// most `limit`: under [`idem_core::LeaseExpiry::Unknown`] each turns Unknown, as a
    /// begin on its key would; under [`idem_core::LeaseExpiry::Takeover`] they are only
    /// reported. A claim renewed or settled meanwhile is left alone.
    fn recover_abandoned(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<Abandoned, Error>> + Send;

    /// Shows Unknown records to `checker`, oldest first, and settles those it answers.
    fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> impl Future<Output = Result<ReconcileReport, ReconcileError<E>>> + Send;

    /// Writes every record as the export's JSON lines.
    fn export(
        &self,
        out: &mut (dyn Write + Send),
    ) -> impl Future<Output = Result<Transferred, MaintainError>> + Send;

    /// Reads an export's JSON lines into the store.
    fn import(
        &self,
        input: &mut (dyn BufRead + Send),
    ) -> impl Future<Output = Result<Transferred, ImportError>> + Send;
}
