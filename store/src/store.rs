//! [`Store`]: the receiver protocol of idem-core driven inside redb write transactions.
//!
//! Every input runs in a write transaction: read the record, run the core, apply its
//! write, commit, and only then answer. The protocol inputs go through group commit
//! (`group.rs`): concurrent callers share one transaction and one fsync. A transaction
//! whose inputs change nothing (an InProgress or Replay answer, a refusal) is aborted
//! instead, so it costs no fsync; a begin that writes nothing is answered from a read
//! snapshot (`snapshot.rs`) without a write transaction at all.

use std::fmt;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::thread;
use std::time::Duration;

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, State, Timestamp, Transition,
    Verdict, Write,
};
use redb::{CommitError, Durability, ReadTransaction, ReadableTable, WriteTransaction};

use crate::cache::ReplayCache;
use crate::group::{Committer, Step};
use crate::handle::{Caller, Handle, guard_read};
use crate::lock::{Deadline, Gate, Turn, begin_write};
use crate::tables::{self, RECORDS, STATES, Tables};
use crate::{Error, ExecuteError, StoreBuilder};

/// The durable idempotency store: one redb file, shared by every thread of the process
/// (`&Store` or `Arc<Store>`) and, with the default [`redb::ConcurrencyMode::MultiWriter`],
/// by other processes that open the same file.
///
/// See the [crate documentation](crate) for the two ways to use it. A store opened with
/// [`StoreBuilder::read_only`] reads like any other and refuses every write with
/// [`Error::ReadOnly`].
pub struct Store {
    // Check takes it exclusively (redb's integrity check needs `&mut Database`); every
    // other operation shares it.
    db: RwLock<Handle>,
    // Opened with `StoreBuilder::read_only`: every write is refused.
    read_only: bool,
    // Serializes this process's write transactions, so that waiting for the redb write
    // lock only ever waits for another process; both waits are bounded.
    gate: Gate,
    // Set by a failed commit: redb refuses writes until the database is reopened.
    broken: AtomicBool,
    // The group-commit queue and the commit counters.
    pub(crate) committer: Committer,
    // Settled records in memory, for answers without a redb transaction (`cache.rs`).
    pub(crate) cache: ReplayCache,
    path: PathBuf,
    config: Config,
    durability: Durability,
    lock_timeout: Duration,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("read_only", &self.read_only)
            .field("config", &self.config)
            .field("durability", &self.durability)
            .field("lock_timeout", &self.lock_timeout)
            .field("needs_reopen", &self.broken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What [`Store::execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the outcome must be answered to the caller"]
pub enum Executed<T> {
    /// This call claimed the key and ran the work; its writes and the settled record
    /// committed together.
    Ran {
        /// What the work returned besides the outcome.
        value: T,
        /// The settled record, as committed.
        record: Record,
    },
    /// The work did not run: the key was settled ([`Decision::Replay`]), held by a
    /// two-phase executor ([`Decision::InProgress`]), live with another fingerprint
    /// ([`Decision::Conflict`]) or needs reconciliation
    /// ([`Decision::NeedsReconciliation`]). Never [`Decision::Claimed`].
    NotRun(Decision),
}

impl<T> Executed<T> {
    /// The settled verdict and outcome: the one just committed, or the one replayed.
    /// `None` when the work did not run and nothing is settled.
    #[must_use]
    pub fn outcome(&self) -> Option<(Verdict, &Outcome)> {
        match self {
            Executed::Ran { record, .. } => match &record.status {
                idem_core::Status::Settled {
                    verdict, outcome, ..
                } => Some((*verdict, outcome)),
                _ => None,
            },
            Executed::NotRun(Decision::Replay {
                verdict, outcome, ..
            }) => Some((*verdict, outcome)),
            Executed::NotRun(_) => None,
        }
    }
}

/// Which records [`Store::list`] visits. Every field narrows; the default visits all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only records in this state.
    pub state: Option<State>,
    /// Only records of this tenant.
    pub tenant: Option<String>,
    /// Only records of this operation.
    pub operation: Option<String>,
    /// Visit at most this many records.
    pub limit: Option<usize>,
}

impl ListFilter {
    fn matches(&self, id: &RecordId) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == id.tenant())
            && self
                .operation
                .as_deref()
                .is_none_or(|o| o == id.operation())
    }

    /// Refuses a tenant or operation that no record could have, naming the rule.
    fn validate(&self) -> Result<(), Error> {
        let tenant = self.tenant.as_deref().unwrap_or("t");
        let operation = self.operation.as_deref().unwrap_or("o");
        RecordId::new(tenant, operation, "k")?;
        Ok(())
    }
}

/// A write transaction with the guards that make it this process's only one.
pub(crate) struct Writing<'s> {
    // Declared first so it drops before the guards.
    pub(crate) txn: WriteTransaction,
    _turn: Turn<'s>,
    _db: RwLockReadGuard<'s, Handle>,
}

impl Store {
    /// Opens (or creates) the store file at `path` with the default options: see
    /// [`StoreBuilder`].
    ///
    /// # Errors
    ///
    /// [`crate::OpenError`]; the file is left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, crate::OpenError> {
        StoreBuilder::default().open(path)
    }

    /// Options for opening a store.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    pub(crate) fn from_parts(
        db: Handle,
        path: PathBuf,
        config: Config,
        durability: Durability,
        lock_timeout: Duration,
        replay_cache: usize,
    ) -> Store {
        Store {
            read_only: db.writable().is_none(),
            db: RwLock::new(db),
            gate: Gate::default(),
            broken: AtomicBool::new(false),
            committer: Committer::default(),
            cache: ReplayCache::new(replay_cache),
            path,
            config,
            durability,
            lock_timeout,
        }
    }

    /// The protocol settings this store applies.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The path the store was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True after a failed commit: writes are refused until the store is reopened.
    #[must_use]
    pub fn needs_reopen(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// True when the store was opened with [`StoreBuilder::read_only`]: it reads, and
    /// refuses every write with [`Error::ReadOnly`].
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `operation`, which writes, on a read-only store. Called first by every
    /// write, so that a read-only store refuses it the same way whatever the file holds.
    pub(crate) fn ensure_writable(&self, operation: &'static str) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::ReadOnly { operation });
        }
        Ok(())
    }

    pub(crate) fn database(&self) -> RwLockReadGuard<'_, Handle> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The database to itself, for redb's integrity check. Polls rather than queueing on
    /// the lock, so that a thread holding a shared guard (a `list` visitor, an `execute`
    /// closure) that reads again is never stuck behind this waiting writer.
    pub(crate) fn database_exclusive(&self) -> Result<RwLockWriteGuard<'_, Handle>, Error> {
        let deadline = Deadline::after(self.lock_timeout);
        loop {
            match self.db.try_write() {
                Ok(db) => return Ok(db),
                Err(TryLockError::Poisoned(poisoned)) => return Ok(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) if deadline.remaining().is_zero() => {
                    return Err(deadline.busy());
                }
                Err(TryLockError::WouldBlock) => thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    pub(crate) fn database_mut(&mut self) -> &mut Handle {
        self.db.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Begins this process's write transaction for `operation`, waiting for this
    /// process's other writers and then for other processes, until the lock timeout.
    pub(crate) fn writing(&self, operation: &'static str) -> Result<Writing<'_>, Error> {
        self.ensure_writable(operation)?;
        if self.needs_reopen() {
            return Err(Error::NeedsReopen);
        }
        let deadline = Deadline::after(self.lock_timeout);
        let db = self.database();
        let Some(writable) = db.writable() else {
            return Err(Error::ReadOnly { operation });
        };
        let turn = self.gate.enter(deadline)?;
        let mut txn = begin_write(writable, deadline)?;
        if !matches!(self.durability, Durability::Immediate) {
            txn.set_durability(self.durability)?;
        }
        Ok(Writing {
            txn,
            _turn: turn,
            _db: db,
        })
    }

    /// Commits, or marks the store as needing a reopen when the commit failed in a way
    /// redb says leaves the database unable to write.
    pub(crate) fn commit(&self, writing: Writing<'_>) -> Result<(), Error> {
        let Writing { txn, _turn, _db } = writing;
        match txn.commit() {
            Ok(()) => {
                self.committer.count_commit();
                Ok(())
            }
            Err(CommitError::TransactionPoisoned) => {
                Err(Error::Storage(CommitError::TransactionPoisoned.into()))
            }
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                Err(Error::CommitFailed(e))
            }
        }
    }

    /// Commits when `changed`, aborts otherwise.
    pub(crate) fn finish(&self, writing: Writing<'_>, changed: bool) -> Result<(), Error> {
        if changed {
            self.commit(writing)
        } else {
            let Writing { txn, _turn, _db } = writing;
            Ok(txn.abort()?)
        }
    }

    /// Runs one protocol input, `operation`: `step` reads and returns the core's write
    /// with the answer; the write is applied and committed, through group commit, before
    /// the answer is returned. `step` may run more than once (see `group.rs`).
    fn input<R: Send + 'static>(
        &self,
        operation: &'static str,
        id: &RecordId,
        step: impl Step<R>,
    ) -> Result<R, Error> {
        self.ensure_writable(operation)?;
        self.grouped_input(id, step)
    }

    /// A request with `fingerprint` arrives for `id`: the first step of the two-phase
    /// path. On [`Decision::Claimed`] the Pending record is committed before this returns;
    /// execute, then [`Store::complete`], [`Store::release`] or [`Store::mark_unknown`]
    /// with the generation.
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
        self.ensure_writable("begin")?;
        if let Some(decision) = self.begin_from_snapshot(&id.to_key_bytes(), fingerprint, now)? {
            return Ok(decision);
        }
        self.input("begin", id, move |tables, current, config| {
            let next = tables.next_generation()?;
            let Transition { decision, write } =
                protocol::begin(current, fingerprint, next, now, config);
            if let Decision::Claimed { generation, .. } = decision {
                tables.raise_generation(generation)?;
            }
            Ok((write, decision))
        })
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
        self.input("heartbeat", id, move |_, current, config| {
            let write = protocol::heartbeat(current, generation, now, config)?;
            let record = put_record(&write);
            Ok((write, record))
        })
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
        let epoch = self.cache.epoch();
        let record = self.input("complete", id, move |_, current, config| {
            let write =
                protocol::complete(current, generation, verdict, outcome.clone(), now, config)?;
            let record = put_record(&write);
            Ok((write, record))
        })?;
        // Committed: a retry is answered from memory.
        self.cache.insert(&id.to_key_bytes(), &record, epoch);
        Ok(record)
    }

    /// The executor holding `generation` did nothing: the record is deleted and a retry
    /// may claim the key.
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
        // The core's release needs no clock; `now` keeps the inputs uniform.
        let _ = now;
        self.input("release", id, move |_, current, _| {
            Ok((protocol::release(current, generation)?, ()))
        })
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
        self.input("mark_unknown", id, move |_, current, _| {
            let write = protocol::mark_unknown(current, generation, now)?;
            let record = put_record(&write);
            Ok((write, record))
        })
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
        let epoch = self.cache.epoch();
        let record = self.input("resolve", id, move |_, current, config| {
            let write = protocol::resolve(current, resolution.clone(), now, config)?;
            let record = match &write {
                Write::Put(record) => Some(record.clone()),
                Write::Delete | Write::Nothing => None,
            };
            Ok((write, record))
        })?;
        if let Some(record) = &record {
            self.cache.insert(&id.to_key_bytes(), record, epoch);
        }
        Ok(record)
    }

    /// Atomic execute: claims `id`, runs `work` inside the same write transaction, and
    /// commits the work's writes together with the settled record, or nothing.
    ///
    /// `work` gets the transaction to write its own tables (any name that does not start
    /// with `idem.`) and returns the verdict, the outcome to replay to every retry, and a
    /// value for this caller. No Pending record is ever visible on this path. If `work`
    /// returns an error (or panics), everything rolls back and the key stays claimable.
    ///
    /// `work` runs while this process holds the store's write lock: keep it short, do no
    /// network I/O in it, and do not call back into the store from it (that deadlocks).
    /// For effects outside the file, use the two-phase path ([`Store::begin`]).
    ///
    /// Each call commits on its own (one fsync); when many threads execute at once,
    /// [`Store::execute_grouped`] shares the commit between them.
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
        self.ensure_writable("execute")?;
        let id_key = id.to_key_bytes();
        let epoch = self.cache.epoch();
        if let Some(decision) = self.begin_from_snapshot(&id_key, fingerprint, now)? {
            return Ok(Executed::NotRun(decision));
        }
        let writing = self.writing("execute")?;
        let (current, pending) = {
            let mut tables = Tables::open(&writing.txn)?;
            let current = tables.get(&id_key)?;
            let next = tables.next_generation()?;
            let Transition { decision, write } =
                protocol::begin(current.as_ref(), fingerprint, next, now, &self.config);
            match (decision, write) {
                (Decision::Claimed { .. }, Write::Put(pending)) => (current, pending),
                (decision, write) => {
                    let changed = tables.apply(&id_key, current.as_ref(), &write)?;
                    drop(tables);
                    self.finish(writing, changed)?;
                    return Ok(Executed::NotRun(decision));
                }
            }
        };
        // Our tables are closed here: the work may open its own.
        let (verdict, outcome, value) = match work(&writing.txn) {
            Ok(done) => done,
            Err(e) => {
                self.finish(writing, false)?;
                return Err(ExecuteError::Work(e));
            }
        };
        let settled = match protocol::complete(
            Some(&pending),
            pending.generation,
            verdict,
            outcome,
            now,
            &self.config,
        ) {
            Ok(write) => put_record(&write),
            Err(refusal) => {
                self.finish(writing, false)?;
                return Err(ExecuteError::Store(refusal.into()));
            }
        };
        {
            let mut tables = Tables::open(&writing.txn)?;
            tables.raise_generation(pending.generation)?;
            tables.put(&id_key, current.as_ref(), &settled)?;
        }
        self.commit(writing)?;
        self.cache.insert(&id_key, &settled, epoch);
        Ok(Executed::Ran {
            value,
            record: settled,
        })
    }

    /// The record under `id`, if any.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        guard_read(|_| {
            let db = self.database();
            let txn = db.begin_read()?;
            let records = txn.open_table(RECORDS)?;
            tables::read_record(&records, &id.to_key_bytes())
        })
    }

    /// Reads the file in one read transaction, for the application's own tables (a
    /// balance, an outbox). Reads never wait for writers.
    ///
    /// # Errors
    ///
    /// Storage errors beginning the transaction; `read` reports its own in `R`.
    pub fn read<R>(&self, read: impl FnOnce(&ReadTransaction) -> R) -> Result<R, Error> {
        let db = self.database();
        let txn = db.begin_read()?;
        Ok(read(&txn))
    }

    /// Visits the records that match `filter`, from one consistent snapshot, streamed:
    /// records are decoded one at a time, never all held in memory.
    ///
    /// With a state, records come oldest `created_at` first; without, in key order
    /// (grouped by tenant, then operation). `visit` returns [`ControlFlow::Break`] to
    /// stop early. Do not call [`Store::check`] from `visit`.
    ///
    /// # Errors
    ///
    /// [`Error::Id`] for a filter tenant or operation that breaks the id rules; storage
    /// or decode errors.
    pub fn list(
        &self,
        filter: &ListFilter,
        visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        filter.validate()?;
        let limit = filter.limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(());
        }
        guard_read(|caller| self.list_guarded(filter, limit, caller, visit))
    }

    fn list_guarded(
        &self,
        filter: &ListFilter,
        limit: usize,
        caller: &mut Caller,
        mut visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        let db = self.database();
        let txn = db.begin_read()?;
        let records = txn.open_table(RECORDS)?;
        let mut seen = 0usize;
        let mut offer = |id_key: &[u8], bytes: &[u8]| -> Result<ControlFlow<()>, Error> {
            let id = tables::decode_id(id_key)?;
            if !filter.matches(&id) {
                return Ok(ControlFlow::Continue(()));
            }
            let record = tables::decode_record(id_key, bytes)?;
            seen += 1;
            let visited = caller.call(|| visit(id, record));
            if visited.is_none_or(|flow| flow.is_break()) || seen >= limit {
                return Ok(ControlFlow::Break(()));
            }
            Ok(ControlFlow::Continue(()))
        };
        match filter.state {
            Some(state) => {
                let index = txn.open_table(STATES[tables::state_index(state)])?;
                for entry in index.iter()? {
                    let (key, _) = entry?;
                    let (_, id_key) = tables::split_timed_key(key.value())?;
                    let Some(bytes) = records.get(id_key)? else {
                        return Err(Error::Corrupt {
                            detail: format!(
                                "{state} index names {}, which has no record",
                                tables::describe_key(id_key)
                            ),
                        });
                    };
                    if offer(id_key, bytes.value())?.is_break() {
                        break;
                    }
                }
            }
            None => {
                let prefix =
                    RecordId::prefix(filter.tenant.as_deref(), filter.operation.as_deref());
                for entry in records.range(prefix.as_slice()..)? {
                    let (key, bytes) = entry?;
                    if !key.value().starts_with(&prefix) {
                        break;
                    }
                    if offer(key.value(), bytes.value())?.is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The record of a write the core returns only as a put.
pub(crate) fn put_record(write: &Write) -> Record {
    match write {
        Write::Put(record) => record.clone(),
        // The core's heartbeat, complete and mark_unknown answer Ok only with a put: a
        // different write would be a core bug, not something a caller can cause.
        Write::Nothing | Write::Delete => {
            panic!("idem-core returned {write:?} where its contract promises a put")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn settle(store: &Store, id: &RecordId, fp: Fingerprint) {
        let ran = store
            .execute(id, fp, Timestamp(1), |_| {
                Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, id.key()), ()))
            })
            .unwrap();
        assert!(matches!(ran, Executed::Ran { .. }));
    }

    #[test]
    fn a_cached_replay_needs_no_redb_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("idem.redb")).unwrap();
        let id = RecordId::new("t", "o", "k").unwrap();
        let fp = Fingerprint::of_bytes(b"x");
        settle(&store, &id, fp);
        let stored = store.get(&id).unwrap().unwrap();
        // With the database taken exclusively, only the cache can answer.
        let db = store.database_exclusive().unwrap();
        let (send, answered) = mpsc::channel();
        thread::scope(|scope| {
            scope.spawn(|| {
                let replay = store.begin(&id, fp, Timestamp(2)).unwrap();
                let conflict = store
                    .begin(&id, Fingerprint::of_bytes(b"y"), Timestamp(2))
                    .unwrap();
                send.send((replay, conflict)).unwrap();
            });
            let (replay, conflict) = answered.recv_timeout(Duration::from_secs(10)).unwrap();
            drop(db);
            let expected = protocol::begin(
                Some(&stored),
                fp,
                stored.generation,
                Timestamp(2),
                &store.config,
            );
            assert_eq!(replay, expected.decision);
            assert!(matches!(replay, Decision::Replay { .. }));
            assert!(matches!(conflict, Decision::Conflict { .. }));
        });
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::builder()
            .replay_cache(8)
            .open(dir.path().join("idem.redb"))
            .unwrap();
        let ids: Vec<RecordId> = (0..50)
            .map(|n| RecordId::new("t", "o", &format!("k{n}")).unwrap())
            .collect();
        for id in &ids {
            settle(&store, id, Fingerprint::of_bytes(id.key().as_bytes()));
            assert!(store.cache.len() <= 8);
        }
        for id in ids.iter().rev() {
            let fp = Fingerprint::of_bytes(id.key().as_bytes());
            assert!(matches!(
                store.begin(id, fp, Timestamp(2)).unwrap(),
                Decision::Replay { .. }
            ));
            assert!(store.cache.len() <= 8);
        }
        assert_eq!(store.cache.len(), 8);
        let off = Store::builder()
            .replay_cache(0)
            .open(dir.path().join("off.redb"))
            .unwrap();
        settle(&off, &ids[0], Fingerprint::of_bytes(b"k0"));
        assert_eq!(off.cache.len(), 0);
    }

    #[test]
    fn after_a_failed_commit_writes_are_refused_and_reads_work() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("idem.redb")).unwrap();
        let id = RecordId::new("t", "o", "k").unwrap();
        let fp = Fingerprint::of_bytes(b"x");
        store.begin(&id, fp, Timestamp(1)).unwrap();
        // What `commit` records when redb reports a failed commit.
        store.broken.store(true, Ordering::Release);
        assert!(store.needs_reopen());
        assert!(matches!(
            store.begin(&id, fp, Timestamp(2)),
            Err(Error::NeedsReopen)
        ));
        assert!(matches!(
            store.execute(
                &id,
                fp,
                Timestamp(2),
                |_| -> Result<(Verdict, Outcome, ()), ()> {
                    unreachable!("a refused store runs no work")
                }
            ),
            Err(ExecuteError::Store(Error::NeedsReopen))
        ));
        assert!(matches!(store.compact(), Err(Error::NeedsReopen)));
        assert!(store.get(&id).unwrap().is_some());
        assert_eq!(store.stats(Timestamp(2)).unwrap().pending, 1);
        drop(store);
        let store = Store::open(dir.path().join("idem.redb")).unwrap();
        assert!(!store.needs_reopen());
        assert!(matches!(
            store.begin(&id, fp, Timestamp(3)),
            Ok(Decision::InProgress { .. })
        ));
    }
}
