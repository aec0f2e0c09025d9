//! The store a receiver command works on: a redb file, or a PostgreSQL database shared by
//! a fleet (`--db postgres://…`). One set of calls for both, so each command is written
//! once; the file keeps its own synchronous calls, the database's run on a runtime of
//! the command's own.

use std::io::{BufRead, Write};
use std::ops::ControlFlow;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, Timestamp, Verdict};
use idem_store::entity::{Entity, EntityDecision, EntityId, Machine};
use idem_store::maintain::{Abandoned, Check, ReconcileError, ReconcileReport, Stats, SweepReport};
use idem_store::postgres::PgStore;
use idem_store::token::{Consumed, Issue, IssuedToken};
use idem_store::{Error, ImportError, ListFilter, MaintainError, Receiver, Store};

/// How many abandoned claims `idem reconcile` turns Unknown on a database in one run.
const RECOVER_LIMIT: usize = 100_000;

/// An open store.
pub(crate) enum Engine {
    /// A redb file.
    File(Store),
    /// A PostgreSQL database, with the runtime its calls run on.
    Postgres {
        /// The engine.
        store: PgStore,
        /// A current-thread runtime, for this one command.
        runtime: tokio::runtime::Runtime,
    },
}

impl Engine {
    pub(crate) fn begin(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Decision, Error> {
        match self {
            Engine::File(store) => store.begin(id, fingerprint, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::begin(store, id, fingerprint, now))
            }
        }
    }

    pub(crate) fn complete(
        &self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<Record, Error> {
        match self {
            Engine::File(store) => store.complete(id, generation, verdict, outcome, now),
            Engine::Postgres { store, runtime } => runtime.block_on(Receiver::complete(
                store, id, generation, verdict, outcome, now,
            )),
        }
    }

    pub(crate) fn release(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Error> {
        match self {
            Engine::File(store) => store.release(id, generation, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::release(store, id, generation, now))
            }
        }
    }

    pub(crate) fn heartbeat(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        match self {
            Engine::File(store) => store.heartbeat(id, generation, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::heartbeat(store, id, generation, now))
            }
        }
    }

    pub(crate) fn mark_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<Record, Error> {
        match self {
            Engine::File(store) => store.mark_unknown(id, generation, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::mark_unknown(store, id, generation, now))
            }
        }
    }

    pub(crate) fn resolve(
        &self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<Option<Record>, Error> {
        match self {
            Engine::File(store) => store.resolve(id, resolution, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::resolve(store, id, resolution, now))
            }
        }
    }

    pub(crate) fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        match self {
            Engine::File(store) => store.get(id),
            Engine::Postgres { store, runtime } => runtime.block_on(Receiver::get(store, id)),
        }
    }

    pub(crate) fn list(
        &self,
        filter: &ListFilter,
        mut visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        match self {
            Engine::File(store) => store.list(filter, visit),
            Engine::Postgres { store, runtime } => {
                for (id, record) in runtime.block_on(Receiver::list(store, filter))? {
                    if visit(id, record).is_break() {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    pub(crate) fn stats(&self, now: Timestamp) -> Result<Stats, MaintainError> {
        match self {
            Engine::File(store) => store.stats(now),
            Engine::Postgres { store, runtime } => runtime.block_on(Receiver::stats(store, now)),
        }
    }

    pub(crate) fn sweep(
        &self,
        now: Timestamp,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        match self {
            Engine::File(store) => store.sweep(now, limit, dry_run),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::sweep(store, now, limit, dry_run))
            }
        }
    }

    pub(crate) fn export(
        &self,
        out: &mut (dyn Write + Send),
    ) -> Result<idem_store::maintain::Transferred, MaintainError> {
        match self {
            Engine::File(store) => store.export(out),
            Engine::Postgres { store, runtime } => runtime.block_on(Receiver::export(store, out)),
        }
    }

    pub(crate) fn import(
        &self,
        input: &mut (dyn BufRead + Send),
    ) -> Result<idem_store::maintain::Transferred, ImportError> {
        match self {
            Engine::File(store) => store.import(input),
            Engine::Postgres { store, runtime } => runtime.block_on(Receiver::import(store, input)),
        }
    }

    pub(crate) fn recover_abandoned(&self, now: Timestamp) -> Result<Abandoned, Error> {
        match self {
            Engine::File(store) => store.recover_abandoned(now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(store.recover_abandoned(RECOVER_LIMIT))
            }
        }
    }

    pub(crate) fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        match self {
            Engine::File(store) => store.transition(machine, id, to, expected_version, now),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(store.transition(machine, id, to, expected_version))
            }
        }
    }

    pub(crate) fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        match self {
            Engine::File(store) => store.get_entity(id),
            Engine::Postgres { store, runtime } => runtime.block_on(store.get_entity(id)),
        }
    }

    pub(crate) fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        match self {
            Engine::File(store) => store.list_entities(kind, state, limit),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(store.list_entities(kind, state, limit))
            }
        }
    }

    pub(crate) fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        match self {
            Engine::File(store) => {
                store.issue_token(tenant, operation, ttl_ms, intent, random, now)
            }
            Engine::Postgres { store, runtime } => {
                runtime.block_on(store.issue_token(tenant, operation, ttl_ms, intent, random))
            }
        }
    }

    pub(crate) fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        match self {
            Engine::File(store) => store.consume(id, fingerprint, now),
            Engine::Postgres { store, runtime } => runtime.block_on(store.consume(id, fingerprint)),
        }
    }

    pub(crate) fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        match self {
            Engine::File(store) => store.get_token(id),
            Engine::Postgres { store, runtime } => runtime.block_on(store.get_token(id)),
        }
    }

    pub(crate) fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        match self {
            Engine::File(store) => store.sweep_tokens(now, limit),
            Engine::Postgres { store, runtime } => runtime.block_on(store.sweep_tokens(limit)),
        }
    }

    // The error carries the report of what was done before the checker failed, as the
    // store's own reconcile does.
    #[allow(clippy::result_large_err)]
    pub(crate) fn reconcile<E: Send>(
        &self,
        now: Timestamp,
        limit: usize,
        checker: impl FnMut(&RecordId, &Record) -> Result<Check, E> + Send,
    ) -> Result<ReconcileReport, ReconcileError<E>> {
        match self {
            Engine::File(store) => store.reconcile(now, limit, checker),
            Engine::Postgres { store, runtime } => {
                runtime.block_on(Receiver::reconcile(store, now, limit, checker))
            }
        }
    }
}
