//! The store's write paths, timed on one store at a time.
//!
//! Two-phase, execute, group commit and entity moves, and group commit's own cost where
//! no fsync hides it.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
use idem_store::entity::EntityDecision;
use idem_store::entity::EntityId;
use idem_store::entity::Machine;
use idem_store::entity::MachineSpec;
use idem_store::redb::{ConcurrencyMode, Durability};
use idem_store::{ExecuteError, Executed, Receiver, Store};

use super::NOW;
use crate::measure::{BenchError, KeySequence, Row, Timing, measure};

/// The write measurements on one store.
pub(super) struct Writes<'s> {
    pub(super) store: &'s Arc<Store>,
    pub(super) outcome: Outcome,
    pub(super) keys: u32,
    // The store is in ConcurrencyMode::ExclusiveWriter.
    pub(super) single_process: bool,
    // A single-process store with its journal (the default there).
    pub(super) journal: bool,
}

impl Writes<'_> {
    fn id(operation: &str, callers: u32, keys: &KeySequence) -> Result<RecordId, BenchError> {
        Ok(RecordId::new(
            "bench",
            operation,
            &keys.next(&format!("c{callers}-")),
        )?)
    }

    /// begin then complete, each key by one caller; through group commit.
    pub(super) fn two_phase(&self, callers: u32) -> Result<Row, BenchError> {
        let before = self.store.commit_counts();
        let keys = KeySequence::default();
        let timing = measure(callers, self.keys, |_, _| {
            let id = Self::id("two-phase", callers, &keys)?;
            let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
            let Decision::Claimed { generation, .. } = self.store.begin(&id, fingerprint, NOW)?
            else {
                return Err(format!("{id} was not claimable").into());
            };
            self.store.complete(
                &id,
                generation,
                Verdict::Succeeded,
                self.outcome.clone(),
                NOW,
            )?;
            Ok(())
        })?;
        let commits = self.store.commit_counts().commits - before.commits;
        let name = if callers == 1 {
            "begin + complete, one input per transaction".to_string()
        } else {
            "begin + complete, group commit".to_string()
        };
        Ok(Row::new("two_phase", &name, callers, &timing)
            .with_commits(2 * timing.calls.len() as u64, commits))
    }

    /// begin then complete as [`Writes::two_phase`], from `callers` tasks on a tokio
    /// runtime through the receiver seam, as the HTTP layer calls the store: a task
    /// waits for its batch without a thread, and the store's driver thread leads the
    /// batches.
    pub(super) fn two_phase_tasks(&self, callers: u32) -> Result<Row, BenchError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let before = self.store.commit_counts();
        let keys = Arc::new(KeySequence::default());
        let per_caller = self.keys;
        let timing = runtime.block_on(async {
            let start_line = Arc::new(tokio::sync::Barrier::new(callers as usize + 1));
            let tasks: Vec<_> = (0..callers)
                .map(|_| {
                    let (store, keys) = (Arc::clone(self.store), Arc::clone(&keys));
                    let (start_line, outcome) = (Arc::clone(&start_line), self.outcome.clone());
                    tokio::spawn(async move {
                        start_line.wait().await;
                        let mut calls = Vec::with_capacity(per_caller as usize);
                        for _ in 0..per_caller {
                            let one = Instant::now();
                            let id = Self::id("two-phase-tasks", callers, &keys)?;
                            let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
                            let Decision::Claimed { generation, .. } =
                                Receiver::begin(&*store, &id, fingerprint, NOW).await?
                            else {
                                return Err(format!("{id} was not claimable").into());
                            };
                            let settled = outcome.clone();
                            Receiver::complete(
                                &*store,
                                &id,
                                generation,
                                Verdict::Succeeded,
                                settled,
                                NOW,
                            )
                            .await?;
                            calls.push(one.elapsed());
                        }
                        Ok::<_, BenchError>(calls)
                    })
                })
                .collect();
            start_line.wait().await;
            let start = Instant::now();
            let mut calls = Vec::with_capacity(callers as usize * per_caller as usize);
            for task in tasks {
                calls.extend(task.await.map_err(|_| "a measuring task panicked")??);
            }
            Ok::<_, BenchError>(Timing {
                total: start.elapsed(),
                calls,
            })
        })?;
        let commits = self.store.commit_counts().commits - before.commits;
        Ok(Row::new(
            "two_phase_tasks",
            "begin + complete, group commit, tasks on tokio",
            callers,
            &timing,
        )
        .with_commits(2 * timing.calls.len() as u64, commits))
    }

    /// [`Store::execute`]: every call its own transaction.
    pub(super) fn execute_alone(&self, callers: u32, per_caller: u32) -> Result<Row, BenchError> {
        let before = self.store.commit_counts();
        let keys = KeySequence::default();
        let timing = measure(callers, per_caller, |_, _| {
            let id = Self::id("execute", callers, &keys)?;
            let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
            let executed = self.store.execute(&id, fingerprint, NOW, |_| {
                Ok::<_, Infallible>((Verdict::Succeeded, self.outcome.clone(), ()))
            });
            ran(&id, executed)
        })?;
        let commits = self.store.commit_counts().commits - before.commits;
        let (id, name) = if self.single_process && !self.journal {
            (
                "execute_single_process_no_journal",
                "execute, one transaction per call, single process, no journal",
            )
        } else if self.single_process {
            (
                "execute_single_process",
                "execute, one transaction per call, single process",
            )
        } else {
            ("execute", "execute, one transaction per call")
        };
        Ok(Row::new(id, name, callers, &timing).with_commits(timing.calls.len() as u64, commits))
    }

    /// An entity move per call (docs/design.md §8): [`Store::transition`] in a transaction of
    /// its own, and [`Store::transition_in`] inside an atomic execute (the key's record
    /// and the move in one commit). One entity per row flips between two states, so
    /// every call is a real move that bumps the version.
    pub(super) fn transitions(&self) -> Result<[Row; 2], BenchError> {
        let machine = Machine::new(MachineSpec {
            states: vec!["even".into(), "odd".into()],
            initial: "even".into(),
            moves: vec![("even".into(), "odd".into()), ("odd".into(), "even".into())],
        })?;
        let target = |n: u32| if n % 2 == 0 { "odd" } else { "even" };
        let applied = |decision: EntityDecision| match decision {
            EntityDecision::Applied { .. } => Ok(()),
            other => Err(BenchError::from(format!(
                "the move was not applied: {other:?}"
            ))),
        };
        let alone = EntityId::new("bench", "account", "alone")?;
        self.store
            .transition(&machine, &alone, "even", None, NOW)
            .map(drop)?;
        let timing = measure(1, self.keys, |_, n| {
            applied(
                self.store
                    .transition(&machine, &alone, target(n), None, NOW)?,
            )
        })?;
        let inside = EntityId::new("bench", "account", "inside")?;
        self.store
            .transition(&machine, &inside, "even", None, NOW)
            .map(drop)?;
        let keys = KeySequence::default();
        let in_execute = measure(1, self.keys, |_, n| {
            let id = Self::id("transition", 1, &keys)?;
            let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
            let executed = self.store.execute(&id, fingerprint, NOW, |txn| {
                let decision =
                    self.store
                        .transition_in(txn, &machine, &inside, target(n), None, NOW)?;
                match decision {
                    EntityDecision::Applied { .. } => {
                        Ok((Verdict::Succeeded, self.outcome.clone(), ()))
                    }
                    other => Err(idem_store::Error::Corrupt {
                        detail: format!("the move was not applied: {other:?}"),
                    }),
                }
            });
            match executed {
                Ok(Executed::Ran { .. }) => Ok(()),
                Ok(Executed::NotRun(decision)) => {
                    Err(format!("{id} did not run: {decision:?}").into())
                }
                Err(ExecuteError::Store(e) | ExecuteError::Work(e)) => Err(e.into()),
            }
        })?;
        Ok([
            Row::new(
                "transition",
                "transition, one transaction per move",
                1,
                &timing,
            ),
            Row::new(
                "execute_transition",
                "execute with transition_in, one transaction per call",
                1,
                &in_execute,
            ),
        ])
    }

    /// [`Store::execute_grouped`] at `callers`.
    pub(super) fn execute_grouped(&self, callers: u32) -> Result<Row, BenchError> {
        let before = self.store.commit_counts();
        let keys = KeySequence::default();
        let timing = measure(callers, self.keys, |_, _| {
            let id = Self::id("grouped", callers, &keys)?;
            grouped(self.store, &id, &self.outcome)
        })?;
        let commits = self.store.commit_counts().commits - before.commits;
        let (id, name) = if self.single_process {
            (
                "execute_grouped_single_process",
                "execute_grouped, group commit, single process",
            )
        } else {
            ("execute_grouped", "execute_grouped, group commit")
        };
        Ok(Row::new(id, name, callers, &timing).with_commits(timing.calls.len() as u64, commits))
    }
}

/// One [`Store::execute_grouped`] of a fresh key.
pub(super) fn grouped(store: &Store, id: &RecordId, outcome: &Outcome) -> Result<(), BenchError> {
    let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
    let outcome = outcome.clone();
    let executed = store.execute_grouped(id, fingerprint, NOW, move |_| {
        Ok::<_, Infallible>((Verdict::Succeeded, outcome.clone(), ()))
    });
    ran(id, executed)
}

fn ran<T>(
    id: &RecordId,
    executed: Result<Executed<T>, ExecuteError<Infallible>>,
) -> Result<(), BenchError> {
    match executed {
        Ok(Executed::Ran { .. }) => Ok(()),
        Ok(Executed::NotRun(decision)) => Err(format!("{id} did not run: {decision:?}").into()),
        Err(ExecuteError::Store(e)) => Err(e.into()),
        Err(ExecuteError::Work(never)) => match never {},
    }
}

/// The cost of group commit itself at one caller, where no fsync hides it: a store
/// with [`Durability::None`] (which needs [`ConcurrencyMode::ExclusiveWriter`]). The
/// two kinds of call alternate, so that the file's growth and the machine's other work
/// weigh on both alike; each row's rate is over its own calls' time.
pub(super) fn overhead(dir: &Path, keys: u32) -> Result<[Row; 2], BenchError> {
    let store = Store::builder()
        .durability(Durability::None)
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .open(dir.join("no-fsync.redb"))?;
    let outcome = Outcome::new(200, vec![b'x'; 64]);
    let sequence = KeySequence::default();
    let mut alone = Vec::with_capacity(keys as usize);
    let mut shared = Vec::with_capacity(keys as usize);
    for _ in 0..keys {
        let id = RecordId::new("bench", "no-fsync", &sequence.next("k"))?;
        let one = Instant::now();
        let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
        ran(
            &id,
            store.execute(&id, fingerprint, NOW, |_| {
                Ok::<_, Infallible>((Verdict::Succeeded, outcome.clone(), ()))
            }),
        )?;
        alone.push(one.elapsed());
        let id = RecordId::new("bench", "no-fsync", &sequence.next("k"))?;
        let one = Instant::now();
        grouped(&store, &id, &outcome)?;
        shared.push(one.elapsed());
    }
    let timing = |calls: Vec<Duration>| Timing {
        total: calls.iter().sum(),
        calls,
    };
    Ok([
        Row::new(
            "execute_no_fsync",
            "execute, no fsync (durability None)",
            1,
            &timing(alone),
        ),
        Row::new(
            "execute_grouped_no_fsync",
            "execute_grouped, no fsync (durability None)",
            1,
            &timing(shared),
        ),
    ])
}
