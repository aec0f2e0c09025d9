//! The seam's traits for [`AnyStore`]: each call goes to the engine that was opened.

use std::io::{BufRead, Write};

use idem_core::protocol::{Decision, Resolution};
use idem_core::token::Issue;
use idem_core::{
    Config, Entity, EntityDecision, Fingerprint, Generation, IssuedToken, Machine, Outcome, Record,
    RecordId, Terms, Timestamp, Verdict,
};

use super::{AnyStore, Engine};
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::entity::{Entities, EntityId, Uniqueness};
use crate::seam::filter::ListFilter;
use crate::seam::receiver::{GiveUp, Receiver};
use crate::seam::report::{
    Abandoned, Check, CommitCounts, Consumed, ReconcileError, ReconcileReport, Stats, SweepReport,
    Transferred,
};
use crate::seam::token::Tokens;

/// `on!(self, store => call)`: `call` on the engine that was opened, as `store`.
macro_rules! on {
    ($any:expr, $store:ident => $call:expr) => {
        match &$any.engine {
            Engine::File($store) => $call,
            #[cfg(feature = "postgres")]
            Engine::Postgres($store) => $call,
            #[cfg(feature = "mysql")]
            Engine::MySql($store) => $call,
            #[cfg(feature = "redis")]
            Engine::Redis($store) => $call,
        }
    };
}

impl Receiver for AnyStore {
    fn config(&self) -> &Config {
        on!(self, store => Receiver::config(store))
    }

    async fn ready(&self) -> bool {
        on!(self, store => Receiver::ready(store).await)
    }

    async fn unready(&self) -> Option<String> {
        on!(self, store => Receiver::unready(store).await)
    }

    async fn degraded(&self) -> Option<String> {
        on!(self, store => Receiver::degraded(store).await)
    }

    async fn idle(&self) {
        on!(self, store => Receiver::idle(store).await);
    }

    fn accepted_risk(&self) -> Option<&str> {
        on!(self, store => Receiver::accepted_risk(store))
    }

    fn commit_counts(&self) -> Option<CommitCounts> {
        on!(self, store => Receiver::commit_counts(store))
    }

    async fn begin_with(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Decision, Error> {
        on!(self, store => Receiver::begin_with(store, id, fingerprint, now, terms).await)
    }

    async fn heartbeat_with(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
        terms: Terms,
    ) -> Result<Record, Error> {
        on!(self, store => Receiver::heartbeat_with(store, id, generation, now, terms).await)
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
        on!(self, store => Receiver::complete_with(store, id, generation, verdict, outcome, now, terms).await)
    }

    async fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        on!(self, store => Receiver::release(store, id, generation, now).await)
    }

    async fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        on!(self, store => Receiver::mark_unknown(store, id, generation, now).await)
    }

    async fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        on!(self, store => Receiver::resolve(store, id, resolution, now).await)
    }

    fn give_up(&self, id: &RecordId, generation: Generation, how: GiveUp, now: Timestamp) {
        on!(self, store => Receiver::give_up(store, id, generation, how, now));
    }

    async fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        on!(self, store => Receiver::get(store, id).await)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<(RecordId, Record)>, Error> {
        on!(self, store => Receiver::list(store, filter).await)
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        on!(self, store => Receiver::stats(store, now).await)
    }

    async fn unknown_keys(&self) -> Result<u64, MaintainError> {
        on!(self, store => Receiver::unknown_keys(store).await)
    }

    async fn sweep(
        &self,
        now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        on!(self, store => Receiver::sweep(store, now, limit, dry_run).await)
    }

    async fn recover_abandoned(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        on!(self, store => Receiver::recover_abandoned(store, now, limit).await)
    }

    async fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        on!(self, store => Receiver::reconcile(store, now, limit, checker).await)
    }

    async fn export(&self, out: &mut (dyn Write + Send)) -> Result<Transferred, MaintainError> {
        on!(self, store => Receiver::export(store, out).await)
    }

    async fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Transferred, ImportError> {
        on!(self, store => Receiver::import(store, input).await)
    }
}

impl Entities for AnyStore {
    async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        on!(self, store => Entities::transition(store, machine, id, to, expected_version, now).await)
    }

    async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        on!(self, store => Entities::get_entity(store, id).await)
    }

    async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        on!(self, store => Entities::list_entities(store, kind, state, limit).await)
    }

    async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        on!(self, store => Entities::claim_unique(store, tenant, scope, value, by).await)
    }

    async fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        on!(self, store => Entities::release_unique(store, tenant, scope, value).await)
    }

    async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        on!(self, store => Entities::unique_holder(store, tenant, scope, value).await)
    }
}

impl Tokens for AnyStore {
    async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        on!(self, store => Tokens::issue_token(store, tenant, operation, ttl_ms, intent_id, random, now).await)
    }

    async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        on!(self, store => Tokens::consume(store, id, fingerprint, now).await)
    }

    async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        on!(self, store => Tokens::get_token(store, id).await)
    }

    async fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        on!(self, store => Tokens::sweep_tokens(store, now, limit).await)
    }
}
