//! [`BlockingStore`]: an [`AnyStore`] for a caller without an async runtime (a command
//! line tool, a script), each call run to its end on the calling thread. One wrapper
//! around the async calls, as the `postgres` crate wraps `tokio-postgres`.

use core::future::Future;
use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::ops::ControlFlow;

use idem_core::protocol::{Decision, Resolution};
use idem_core::token::Issue;
use idem_core::{
    Config, Entity, EntityDecision, Fingerprint, Generation, IssuedToken, Machine, Outcome, Record,
    RecordId, Timestamp, Verdict,
};

use super::{AnyOpenError, AnyStore, AnyStoreBuilder, Engine};
use crate::error::{Error, ImportError, MaintainError};
use crate::file::Store;
use crate::seam::entity::{Entities, EntityId, Uniqueness};
use crate::seam::filter::ListFilter;
use crate::seam::poll::block_on;
use crate::seam::receiver::Receiver;
use crate::seam::report::{
    Abandoned, Check, Consumed, ReconcileError, ReconcileReport, Stats, SweepReport, Transferred,
};
use crate::seam::token::Tokens;

/// An [`AnyStore`] whose calls block: the file's run on the calling thread, a
/// database's on a single-threaded runtime of this store's own. The methods are the
/// seam's ([`Receiver`], [`Entities`], [`Tokens`]), with the same arguments.
#[derive(Debug)]
pub struct BlockingStore {
    store: AnyStore,
    #[cfg(feature = "postgres")]
    runtime: Option<tokio::runtime::Runtime>,
}

impl AnyStoreBuilder {
    /// [`AnyStoreBuilder::open`] for a caller without an async runtime.
    ///
    /// # Errors
    ///
    /// As [`AnyStoreBuilder::open`]; [`AnyOpenError::Runtime`] when a database's runtime
    /// does not start.
    pub fn open_blocking(self, target: impl AsRef<OsStr>) -> Result<BlockingStore, AnyOpenError> {
        let target = target.as_ref();
        #[cfg(feature = "postgres")]
        if super::database_of(target).is_some() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(AnyOpenError::Runtime)?;
            let store = runtime.block_on(self.open(target))?;
            return Ok(BlockingStore {
                store,
                runtime: Some(runtime),
            });
        }
        Ok(BlockingStore {
            store: block_on(self.open(target))?,
            #[cfg(feature = "postgres")]
            runtime: None,
        })
    }
}

impl BlockingStore {
    /// Runs `future` to its end on this thread.
    fn run<F: Future>(&self, future: F) -> F::Output {
        #[cfg(feature = "postgres")]
        if let Some(runtime) = &self.runtime {
            return runtime.block_on(future);
        }
        block_on(future)
    }

    /// The store itself, for async callers and the seam's generic code.
    #[must_use]
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The store itself, for an async caller from here on. A database's calls then
    /// need the caller's tokio runtime.
    #[must_use]
    pub fn into_store(self) -> AnyStore {
        self.store
    }

    /// The engine's name: `file` or `postgres`.
    #[must_use]
    pub fn engine(&self) -> &'static str {
        self.store.engine()
    }

    /// See [`AnyStore::file`].
    ///
    /// # Errors
    ///
    /// As [`AnyStore::file`].
    pub fn file(&self, what: &'static str) -> Result<&Store, Error> {
        self.store.file(what)
    }

    /// See [`AnyStore::file_mut`].
    ///
    /// # Errors
    ///
    /// As [`AnyStore::file_mut`].
    pub fn file_mut(&mut self, what: &'static str) -> Result<&mut Store, Error> {
        self.store.file_mut(what)
    }

    /// See [`Receiver::config`].
    #[must_use]
    pub fn config(&self) -> &Config {
        Receiver::config(&self.store)
    }

    /// See [`Receiver::begin`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn begin(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Decision, Error> {
        self.run(Receiver::begin(&self.store, id, fingerprint, now))
    }

    /// See [`Receiver::heartbeat`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn heartbeat(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.run(Receiver::heartbeat(&self.store, id, generation, now))
    }

    /// See [`Receiver::complete`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn complete(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.run(Receiver::complete(
            &self.store,
            id,
            generation,
            verdict,
            outcome,
            now,
        ))
    }

    /// See [`Receiver::release`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.run(Receiver::release(&self.store, id, generation, now))
    }

    /// See [`Receiver::mark_unknown`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        self.run(Receiver::mark_unknown(&self.store, id, generation, now))
    }

    /// See [`Receiver::resolve`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        self.run(Receiver::resolve(&self.store, id, resolution, now))
    }

    /// See [`Receiver::get`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        self.run(Receiver::get(&self.store, id))
    }

    /// The records that match `filter`, each handed to `visit` in the order
    /// [`Receiver::list`] gives, until it breaks. A file streams them from one read
    /// snapshot; a database reads them first.
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn list(
        &self,
        filter: &ListFilter,
        visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        match &self.store.engine {
            Engine::File(store) => store.list(filter, visit),
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => {
                let mut visit = visit;
                for (id, record) in self.run(Receiver::list(&self.store, filter))? {
                    if visit(id, record).is_break() {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// See [`Receiver::stats`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        self.run(Receiver::stats(&self.store, now))
    }

    /// See [`Receiver::sweep`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn sweep(&self, now: Timestamp, limit: usize, dry_run: bool) -> Result<SweepReport, Error> {
        self.run(Receiver::sweep(&self.store, now, limit, dry_run))
    }

    /// See [`Receiver::recover_abandoned`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn recover_abandoned(&self, now: Timestamp, limit: usize) -> Result<Abandoned, Error> {
        self.run(Receiver::recover_abandoned(&self.store, now, limit))
    }

    /// See [`Receiver::reconcile`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    // The error carries the report of what was done before the checker failed.
    #[allow(clippy::result_large_err)]
    pub fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        self.run(Receiver::reconcile(&self.store, now, limit, checker))
    }

    /// See [`Receiver::export`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn export(&self, out: &mut (dyn Write + Send)) -> Result<Transferred, MaintainError> {
        self.run(Receiver::export(&self.store, out))
    }

    /// See [`Receiver::import`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Transferred, ImportError> {
        self.run(Receiver::import(&self.store, input))
    }

    /// See [`Entities::transition`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        self.run(Entities::transition(
            &self.store,
            machine,
            id,
            to,
            expected_version,
            now,
        ))
    }

    /// See [`Entities::get_entity`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        self.run(Entities::get_entity(&self.store, id))
    }

    /// See [`Entities::list_entities`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        self.run(Entities::list_entities(&self.store, kind, state, limit))
    }

    /// See [`Entities::claim_unique`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        self.run(Entities::claim_unique(
            &self.store,
            tenant,
            scope,
            value,
            by,
        ))
    }

    /// See [`Entities::release_unique`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        self.run(Entities::release_unique(&self.store, tenant, scope, value))
    }

    /// See [`Entities::unique_holder`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        self.run(Entities::unique_holder(&self.store, tenant, scope, value))
    }

    /// See [`Tokens::issue_token`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        self.run(Tokens::issue_token(
            &self.store,
            tenant,
            operation,
            ttl_ms,
            intent_id,
            random,
            now,
        ))
    }

    /// See [`Tokens::consume`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        self.run(Tokens::consume(&self.store, id, fingerprint, now))
    }

    /// See [`Tokens::get_token`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        self.run(Tokens::get_token(&self.store, id))
    }

    /// See [`Tokens::sweep_tokens`].
    ///
    /// # Errors
    ///
    /// As the engine's.
    pub fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        self.run(Tokens::sweep_tokens(&self.store, now, limit))
    }
}
