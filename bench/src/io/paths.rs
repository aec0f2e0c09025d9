//! The store's write paths, their disk calls counted.
//!
//! Execute, begin + complete and group commit, and in a single process the journal's
//! calls apart from the store file's.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::Path;
use std::thread;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
use idem_store::redb::ConcurrencyMode;
use idem_store::{Executed, Store};
use serde::Serialize;

use super::counting::{Calls, Counter, Counting};
use super::{IoPlan, NOW, PAGE, per};
use crate::measure::{BenchError, KeySequence};

/// The disk calls of one measured path, per commit and per input.
#[derive(Debug, Clone, Serialize)]
pub struct IoRow {
    /// A stable name, for scripts.
    pub id: &'static str,
    /// What was counted, for people.
    pub measurement: String,
    /// Inputs answered.
    pub inputs: u64,
    /// Write transactions committed.
    pub commits: u64,
    /// The calls over all of them.
    pub calls: Calls,
}

impl IoRow {
    /// Bytes written per commit.
    #[must_use]
    pub fn bytes_per_commit(&self) -> f64 {
        per(self.calls.bytes_written, self.commits)
    }

    /// Bytes written per input.
    #[must_use]
    pub fn bytes_per_input(&self) -> f64 {
        per(self.calls.bytes_written, self.inputs)
    }
}

/// The rows as a table for people: per commit, then per input.
#[must_use]
pub fn io_table(rows: &[IoRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<62} {:>7} {:>7} {:>9} {:>7} {:>6} {:>6} {:>9} {:>8}",
        "DISK CALLS (counted)",
        "inputs",
        "commits",
        "B/commit",
        "pages",
        "writes",
        "syncs",
        "B/input",
        "reads/in"
    );
    for row in rows {
        let c = row.calls;
        let _ = writeln!(
            out,
            "{:<62} {:>7} {:>7} {:>9.0} {:>7.1} {:>6.1} {:>6.2} {:>9.0} {:>8.2}",
            row.measurement,
            row.inputs,
            row.commits,
            row.bytes_per_commit(),
            row.bytes_per_commit() / PAGE as f64,
            per(c.writes, row.commits),
            per(c.syncs, row.commits),
            row.bytes_per_input(),
            per(c.reads, row.inputs),
        );
    }
    out
}

/// Counts the store's paths on fresh files in `dir`, `plan.inputs` inputs each (group
/// commit: 64 callers, `plan.inputs` each), after `plan.warm_up` inputs of the same kind.
///
/// # Errors
///
/// The first store or file error.
pub fn run(dir: &Path, plan: IoPlan) -> Result<Vec<IoRow>, BenchError> {
    let IoPlan { warm_up, inputs } = plan;
    let outcome = Outcome::new(200, vec![b'x'; 64]);
    let mut rows = Vec::new();
    for (id, mode, what) in [
        (
            "io_execute",
            ConcurrencyMode::MultiWriter,
            "execute, one per transaction (multi-process mode)",
        ),
        (
            "io_execute_single_process",
            ConcurrencyMode::ExclusiveWriter,
            "execute, one per transaction (single process)",
        ),
    ] {
        let (store, counter) = open(dir, id, mode)?;
        let keys = KeySequence::default();
        let each = |store: &Store| execute(store, &keys, &outcome);
        rows.push(count(id, what, &store, &counter, plan, each)?);
    }
    rows.extend(journaled(dir, plan, &outcome)?);
    let (store, counter) = open(dir, "io_two_phase", ConcurrencyMode::MultiWriter)?;
    let keys = KeySequence::default();
    rows.push(count(
        "io_two_phase",
        "begin + complete, two transactions (multi-process mode)",
        &store,
        &counter,
        plan,
        |store| {
            let id = RecordId::new("bench", "io", &keys.next("k"))?;
            let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
            let Decision::Claimed { generation, .. } = store.begin(&id, fingerprint, NOW)? else {
                return Err(format!("{id} was not claimable").into());
            };
            store.complete(&id, generation, Verdict::Succeeded, outcome.clone(), NOW)?;
            Ok(())
        },
    )?);
    drop(store);
    for (id, mode, what) in [
        (
            "io_grouped",
            ConcurrencyMode::MultiWriter,
            "execute_grouped, 64 callers (multi-process mode)",
        ),
        (
            "io_grouped_single_process",
            ConcurrencyMode::ExclusiveWriter,
            "execute_grouped, 64 callers (single process)",
        ),
    ] {
        let (store, counter) = open(dir, id, mode)?;
        let keys = KeySequence::default();
        grouped(&store, &keys, &outcome, 64, warm_up.div_ceil(64))?;
        let before = (counter.now(), store.commit_counts());
        grouped(&store, &keys, &outcome, 64, inputs)?;
        let after = store.commit_counts();
        rows.push(IoRow {
            id,
            measurement: what.into(),
            inputs: after.batched_inputs - before.1.batched_inputs,
            commits: after.commits - before.1.commits,
            calls: counter.now() - before.0,
        });
    }
    Ok(rows)
}

/// The single-process paths with the store's journal (what a store file in
/// ExclusiveWriter mode uses): the journal's calls (each commit's one sync) and the store
/// file's (written at each commit, synced at checkpoints), counted apart, over the same
/// commits.
fn journaled(dir: &Path, plan: IoPlan, outcome: &Outcome) -> Result<Vec<IoRow>, BenchError> {
    let IoPlan { warm_up, inputs } = plan;
    let mut rows = Vec::new();
    for grouped_64 in [false, true] {
        let name = if grouped_64 {
            "io_grouped_journal"
        } else {
            "io_execute_journal"
        };
        let (main, file_counter) = Counting::create(&dir.join(format!("{name}.redb")))?;
        let (journal, journal_counter) =
            Counting::create(&dir.join(format!("{name}.redb-journal")))?;
        let store = Store::builder()
            .concurrency(ConcurrencyMode::ExclusiveWriter)
            .open_on_backend_with_journal(main, journal)?;
        let keys = KeySequence::default();
        let run = |n: u32| -> Result<(), BenchError> {
            if grouped_64 {
                grouped(&store, &keys, outcome, 64, n)
            } else {
                (0..n).try_for_each(|_| execute(&store, &keys, outcome))
            }
        };
        run(if grouped_64 {
            warm_up.div_ceil(64)
        } else {
            warm_up
        })?;
        let before = (
            journal_counter.now(),
            file_counter.now(),
            store.commit_counts(),
        );
        run(inputs)?;
        let after = store.commit_counts();
        let (what, commits, counted) = if grouped_64 {
            (
                "execute_grouped, 64 callers (single process, journal)",
                after.commits - before.2.commits,
                after.batched_inputs - before.2.batched_inputs,
            )
        } else {
            (
                "execute, one per transaction (single process, journal)",
                after.commits - before.2.commits,
                u64::from(inputs),
            )
        };
        rows.push(IoRow {
            id: name,
            measurement: format!("{what}: journal"),
            inputs: counted,
            commits,
            calls: journal_counter.now() - before.0,
        });
        rows.push(IoRow {
            id: if grouped_64 {
                "io_grouped_journal_file"
            } else {
                "io_execute_journal_file"
            },
            measurement: format!("{what}: store file"),
            inputs: counted,
            commits,
            calls: file_counter.now() - before.1,
        });
    }
    Ok(rows)
}

fn open(dir: &Path, name: &str, mode: ConcurrencyMode) -> Result<(Store, Counter), BenchError> {
    let (backend, counter) = Counting::create(&dir.join(format!("{name}.redb")))?;
    let store = Store::builder()
        .concurrency(mode)
        .open_on_backend(backend)?;
    Ok((store, counter))
}

/// Runs `each` `plan.warm_up` times, then `plan.inputs` times counted.
fn count(
    id: &'static str,
    what: &str,
    store: &Store,
    counter: &Counter,
    IoPlan { warm_up, inputs }: IoPlan,
    mut each: impl FnMut(&Store) -> Result<(), BenchError>,
) -> Result<IoRow, BenchError> {
    for _ in 0..warm_up {
        each(store)?;
    }
    let before = (counter.now(), store.commit_counts().commits);
    for _ in 0..inputs {
        each(store)?;
    }
    Ok(IoRow {
        id,
        measurement: what.into(),
        inputs: u64::from(inputs),
        commits: store.commit_counts().commits - before.1,
        calls: counter.now() - before.0,
    })
}

fn execute(store: &Store, keys: &KeySequence, outcome: &Outcome) -> Result<(), BenchError> {
    let id = RecordId::new("bench", "io", &keys.next("k"))?;
    let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
    match store.execute(&id, fingerprint, NOW, |_| {
        Ok::<_, Infallible>((Verdict::Succeeded, outcome.clone(), ()))
    }) {
        Ok(Executed::Ran { .. }) => Ok(()),
        Ok(Executed::NotRun(decision)) => Err(format!("{id} did not run: {decision:?}").into()),
        Err(e) => Err(e.to_string().into()),
    }
}

/// `callers` threads, each running `per_caller` grouped executes of fresh keys.
fn grouped(
    store: &Store,
    keys: &KeySequence,
    outcome: &Outcome,
    callers: u32,
    per_caller: u32,
) -> Result<(), BenchError> {
    thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|_| {
                scope.spawn(|| -> Result<(), BenchError> {
                    for _ in 0..per_caller {
                        let id = RecordId::new("bench", "io", &keys.next("g"))?;
                        let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
                        let outcome = outcome.clone();
                        match store.execute_grouped(&id, fingerprint, NOW, move |_| {
                            Ok::<_, Infallible>((Verdict::Succeeded, outcome.clone(), ()))
                        }) {
                            Ok(Executed::Ran { .. }) => {}
                            Ok(Executed::NotRun(d)) => {
                                return Err(format!("{id} did not run: {d:?}").into());
                            }
                            Err(e) => return Err(e.to_string().into()),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| BenchError::from("a caller panicked"))?
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_commit_is_counted_with_its_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let plan = IoPlan {
            warm_up: 50,
            inputs: 20,
        };
        let rows = run(dir.path(), plan).unwrap();
        let find = |id: &str| rows.iter().find(|r| r.id == id).unwrap();
        let single = find("io_execute_single_process");
        assert_eq!((single.inputs, single.commits), (20, 20));
        // Durable commits: at least one sync each, and at least a page written.
        assert!(single.calls.syncs >= single.commits, "{single:?}");
        assert!(single.bytes_per_commit() >= PAGE as f64, "{single:?}");
        // With the journal: one journal sync per commit, the store file synced only at
        // checkpoints (none in 20 small commits), fewer bytes in the journal than in
        // the file.
        let journal = find("io_execute_journal");
        let file = find("io_execute_journal_file");
        assert_eq!((journal.inputs, journal.commits), (20, 20));
        assert_eq!(journal.calls.syncs, journal.commits, "{journal:?}");
        assert_eq!(file.calls.syncs, 0, "{file:?}");
        assert!(
            journal.calls.bytes_written < file.calls.bytes_written,
            "{journal:?} {file:?}"
        );
        let two_phase = find("io_two_phase");
        assert_eq!((two_phase.inputs, two_phase.commits), (20, 40));
        let grouped = find("io_grouped");
        assert_eq!(grouped.inputs, 64 * 20);
        assert!(grouped.commits < grouped.inputs, "{grouped:?}");
        assert!(io_table(&rows).starts_with("DISK CALLS"));
    }
}
