//! The store's measurements on this machine, for `idem bench` and the comparison harness.
//!
//! One implementation for both: the harness (`benches/compare.rs`) prints these same rows
//! beside SQLite's.
//!
//! Every figure is timed from real calls on real files in the directory given, with the
//! store's default durability unless a row says otherwise: each commit waits for its
//! fsync. Nothing is extrapolated; a row's rate is its calls over its wall time, and its
//! median and 99th percentile are of single calls.

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt;
use std::fs;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Generation, Outcome, RecordId, Timestamp, Verdict};
use idem_store::entity::EntityDecision;
use idem_store::entity::EntityId;
use idem_store::entity::Machine;
use idem_store::entity::MachineSpec;
use idem_store::redb::{ConcurrencyMode, Durability};
use idem_store::{ExecuteError, Executed, Receiver, Store};
use serde::Serialize;

use crate::measure::{BenchError, KeySequence, Row, Timing, measure};

/// The time every measurement runs at.
const NOW: Timestamp = Timestamp(1_750_000_000_000);

/// How much each measurement does. Counts are printed with the figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Keys each caller settles in each write measurement.
    pub keys_per_caller: u32,
    /// The caller counts of the group-commit measurements (threads sharing one store).
    pub callers: Vec<u32>,
    /// Records written (with group commit) before the file size, lookup and sweep
    /// measurements.
    pub records: u32,
    /// Lookups timed in each lookup measurement.
    pub lookups: u32,
    /// Pure core decisions timed.
    pub decisions: u32,
}

impl Plan {
    /// The plan of `idem bench --ops N`: `ops` keys per caller, callers 1, 8 and 64,
    /// 400 records per op up to 100,000, 100 lookups and 1,000 decisions per op.
    #[must_use]
    pub fn for_ops(ops: u32) -> Plan {
        Plan {
            keys_per_caller: ops,
            callers: vec![1, 8, 64],
            records: ops.saturating_mul(400).min(100_000),
            lookups: ops.saturating_mul(100),
            decisions: ops.saturating_mul(1_000),
        }
    }
}

/// Figures of a file holding [`Plan::records`] settled records.
#[derive(Debug, Clone, Serialize)]
pub struct FileFigures {
    /// Records written.
    pub records: u64,
    /// Records written per second while filling (group commit, the plan's most callers).
    pub fill_per_second: f64,
    /// Size of the file after the fill.
    pub file_bytes: u64,
    /// `file_bytes` per record.
    pub bytes_per_record: f64,
    /// Bytes per record after [`Store::compact`].
    pub compacted_bytes_per_record: f64,
    /// Time to sweep every record once all expired (each leaves its tombstone, the
    /// default), in milliseconds.
    pub sweep_ms: f64,
    /// Records swept per second.
    pub sweep_per_second: f64,
}

/// The two lines printed under the table: size and fill rate, then the sweep.
impl fmt::Display for FileFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "file after {} records: {} bytes, {:.0} bytes per record ({:.0} after compact); filled at {:.0} records/s",
            self.records,
            self.file_bytes,
            self.bytes_per_record,
            self.compacted_bytes_per_record,
            self.fill_per_second
        )?;
        write!(
            f,
            "sweep of {} expired records: {:.0} ms ({:.0} records/s)",
            self.records, self.sweep_ms, self.sweep_per_second
        )
    }
}

/// Everything [`run`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The counts used.
    pub plan: Plan,
    /// The rates and latencies.
    pub rows: Vec<Row>,
    /// The file after the plan's records.
    pub file: FileFigures,
}

impl Report {
    /// The row `id` at `callers`, if measured.
    #[must_use]
    pub fn row(&self, id: &str, callers: u32) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.id == id && r.callers == callers)
    }
}

/// Runs every measurement on files in `dir` (which should be on the disk of interest)
/// and returns the figures; `progress` hears the name of each step as it starts.
///
/// # Errors
///
/// The first store error, with the step it happened in.
pub fn run(dir: &Path, plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Report, BenchError> {
    let mut rows = Vec::new();
    let most = plan.callers.iter().copied().max().unwrap_or(1);
    progress("fsync of this disk");
    rows.push(fsync_probe(dir, 50)?);
    progress("fsync of eight pages, contiguous and scattered");
    rows.extend(fsync_pages(dir, 8, 100)?);
    let store = Arc::new(Store::open(dir.join("writes.redb"))?);
    let bench = Writes {
        store: &store,
        outcome: Outcome::new(200, vec![b'x'; 64]),
        keys: plan.keys_per_caller,
        single_process: false,
        journal: false,
    };

    progress("begin + complete, one input per transaction");
    rows.push(bench.two_phase(1)?);
    progress("execute, one transaction each");
    rows.push(bench.execute_alone(1, plan.keys_per_caller)?);
    progress("entity moves, alone and inside execute");
    rows.extend(bench.transitions()?);
    for &callers in &plan.callers {
        progress(&format!("execute_grouped, {callers} callers"));
        rows.push(bench.execute_grouped(callers)?);
    }
    for &callers in plan.callers.iter().filter(|&&c| c > 1) {
        progress(&format!("begin + complete, {callers} callers"));
        rows.push(bench.two_phase(callers)?);
    }
    progress(&format!("begin + complete, {most} tasks on tokio"));
    rows.push(bench.two_phase_tasks(most)?);
    if most > 1 {
        // The same number of keys as the one-caller row, spread over the callers: each
        // waits for the write lock in turn and nothing is shared.
        progress(&format!("execute without group commit, {most} callers"));
        rows.push(bench.execute_alone(most, plan.keys_per_caller.div_ceil(most).max(1))?);
    }
    let outcome = bench.outcome.clone();
    drop(store);

    // The same in ConcurrencyMode::ExclusiveWriter: one process has the file to itself,
    // and redb commits in one phase (one fsync) instead of two.
    let store = Arc::new(
        Store::builder()
            .concurrency(ConcurrencyMode::ExclusiveWriter)
            .open(dir.join("single-process.redb"))?,
    );
    let bench = Writes {
        store: &store,
        outcome,
        keys: plan.keys_per_caller,
        single_process: true,
        journal: true,
    };
    progress("execute, one transaction each, single process");
    rows.push(bench.execute_alone(1, plan.keys_per_caller)?);
    progress(&format!("execute_grouped, {most} callers, single process"));
    rows.push(bench.execute_grouped(most)?);
    let outcome = bench.outcome.clone();
    drop(store);

    // The same without the journal: redb syncs each commit's scattered pages.
    let store = Store::builder()
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .journal(false)
        .open(dir.join("single-process-no-journal.redb"))
        .map(Arc::new)?;
    let bench = Writes {
        store: &store,
        outcome,
        keys: plan.keys_per_caller,
        single_process: true,
        journal: false,
    };
    progress("execute, one transaction each, single process, no journal");
    rows.push(bench.execute_alone(1, plan.keys_per_caller)?);
    drop(store);

    progress("group commit overhead, no fsync");
    rows.extend(overhead(dir, plan.keys_per_caller.saturating_mul(20))?);

    let (file, lookups) = file_figures(dir, plan, most, progress)?;
    rows.extend(lookups);
    progress("pure core decisions");
    rows.push(core_decisions(plan.decisions));
    Ok(Report {
        plan: plan.clone(),
        rows,
        file,
    })
}

/// What the disk under `dir` takes for one durable write: 4 KiB written in place,
/// then `fdatasync`. Every commit with the default durability pays at least this.
fn fsync_probe(dir: &Path, count: u32) -> Result<Row, BenchError> {
    use std::io::{Seek, SeekFrom, Write as _};
    let path = dir.join("fsync-probe");
    let mut file = fs::File::create(&path)?;
    let page = [0x5au8; 4096];
    let mut calls = Vec::with_capacity(count as usize);
    let start = Instant::now();
    for n in 0..count {
        let one = Instant::now();
        file.seek(SeekFrom::Start(u64::from(n % 16) * 4096))?;
        file.write_all(&page)?;
        file.sync_data()?;
        calls.push(one.elapsed());
    }
    let timing = Timing {
        total: start.elapsed(),
        calls,
    };
    drop(file);
    fs::remove_file(&path)?;
    Ok(Row::new(
        "fsync",
        "fsync of this disk (4 KiB write + fdatasync)",
        1,
        &timing,
    ))
}

/// What one `fdatasync` costs after `pages` 4 KiB pages were written in place, once
/// side by side and once scattered over a 16 MiB file (allocated and synced before).
/// A redb commit writes its pages where the B-trees' free pages are, a WAL appends: on
/// disks where a sync's cost grows with the number of separate extents, the same bytes
/// cost more scattered.
fn fsync_pages(dir: &Path, pages: u64, count: u32) -> Result<Vec<Row>, BenchError> {
    use std::os::unix::fs::FileExt as _;
    const FILE_PAGES: u64 = 4096;
    let path = dir.join("fsync-pages");
    let file = fs::File::create(&path)?;
    let chunk = vec![0xa5u8; 1 << 20];
    for n in 0..FILE_PAGES * 4096 / chunk.len() as u64 {
        file.write_all_at(&chunk, n * chunk.len() as u64)?;
    }
    file.sync_all()?;
    let page = [0x5au8; 4096];
    let run = vec![0x5au8; 4096 * usize::try_from(pages).unwrap_or(1)];
    // A fixed sequence (xorshift), so that every run scatters alike.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_page = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % FILE_PAGES
    };
    let mut rows = Vec::new();
    for scattered in [false, true] {
        let mut calls = Vec::with_capacity(count as usize);
        let start = Instant::now();
        for n in 0..u64::from(count) {
            let one = Instant::now();
            if scattered {
                for _ in 0..pages {
                    file.write_all_at(&page, next_page() * 4096)?;
                }
            } else {
                file.write_all_at(&run, (n * pages % (FILE_PAGES - pages)) * 4096)?;
            }
            file.sync_data()?;
            calls.push(one.elapsed());
        }
        let timing = Timing {
            total: start.elapsed(),
            calls,
        };
        rows.push(if scattered {
            Row::new(
                "fsync-scattered",
                &format!("fdatasync after {pages} scattered 4 KiB pages"),
                1,
                &timing,
            )
        } else {
            Row::new(
                "fsync-contiguous",
                &format!("fdatasync after {pages} contiguous 4 KiB pages"),
                1,
                &timing,
            )
        });
    }
    drop(file);
    fs::remove_file(&path)?;
    Ok(rows)
}

/// The write measurements on one store.
struct Writes<'s> {
    store: &'s Arc<Store>,
    outcome: Outcome,
    keys: u32,
    // The store is in ConcurrencyMode::ExclusiveWriter.
    single_process: bool,
    // A single-process store with its journal (the default there).
    journal: bool,
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
    fn two_phase(&self, callers: u32) -> Result<Row, BenchError> {
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
    fn two_phase_tasks(&self, callers: u32) -> Result<Row, BenchError> {
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
    fn execute_alone(&self, callers: u32, per_caller: u32) -> Result<Row, BenchError> {
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
    fn transitions(&self) -> Result<[Row; 2], BenchError> {
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
    fn execute_grouped(&self, callers: u32) -> Result<Row, BenchError> {
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
fn grouped(store: &Store, id: &RecordId, outcome: &Outcome) -> Result<(), BenchError> {
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
fn overhead(dir: &Path, keys: u32) -> Result<[Row; 2], BenchError> {
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

/// Fills a file with `plan.records` settled records, measures its size, the lookups
/// in both concurrency modes, compaction and the sweep of every record.
fn file_figures(
    dir: &Path,
    plan: &Plan,
    callers: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<(FileFigures, Vec<Row>), BenchError> {
    let path = dir.join("records.redb");
    let store = Store::open(&path)?;
    let outcome = Outcome::new(200, vec![b'x'; 64]);
    let records = plan.records.max(1);
    let id = |n: u32| RecordId::new("bench", "record", &format!("sale-{n:08}"));
    progress(&format!(
        "{records} records, execute_grouped at {callers} callers"
    ));
    let per_caller = records.div_ceil(callers);
    let sequence = KeySequence::default();
    let fill = measure(callers, per_caller, |_, _| {
        match u32::try_from(sequence.take()) {
            Ok(k) if k < records => grouped(&store, &id(k)?, &outcome),
            _ => Ok(()),
        }
    })?;
    let written = store.stats(NOW)?.records();
    let file_bytes = fs::metadata(&path)?.len();

    // Lookups of existing keys in a scattered order.
    let ids: Vec<RecordId> = (0..plan.lookups.max(1))
        .map(|n| id(n.wrapping_mul(7_919) % records))
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    progress("replay lookups");
    // Reopened with a replay cache that holds every looked-up key, so that the second
    // pass measures answers from memory and the first the reads from the file.
    drop(store);
    let store = Store::builder().replay_cache(ids.len()).open(&path)?;
    rows.extend(lookups(&store, &ids, "")?);
    drop(store);
    let exclusive = Store::builder()
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .replay_cache(ids.len())
        .open(&path)?;
    rows.extend(lookups(&exclusive, &ids, ", single process")?);
    drop(exclusive);
    // The same gets with the replay cache off: each reads the file.
    for (mode, id, name) in [
        (
            ConcurrencyMode::MultiWriter,
            "get_uncached",
            "get of a settled key, replay cache off",
        ),
        (
            ConcurrencyMode::ExclusiveWriter,
            "get_uncached_exclusive",
            "get of a settled key, replay cache off, single process",
        ),
    ] {
        let store = Store::builder()
            .concurrency(mode)
            .replay_cache(0)
            .open(&path)?;
        rows.push(Row::new(id, name, 1, &gets(&store, &ids)?));
    }

    let mut store = Store::open(&path)?;
    progress("compact");
    store.compact()?;
    let compacted = fs::metadata(&path)?.len();
    progress("sweep");
    let after = NOW.plus_millis(
        store
            .config()
            .success_retention_ms
            .max(store.config().failure_retention_ms)
            + 1,
    );
    let start = Instant::now();
    let swept = store.sweep(after, usize::MAX, false)?;
    let sweep = start.elapsed();
    // With the default settings each settled record leaves its tombstone.
    let taken = swept.removed + swept.tombstoned;
    if taken != written || swept.remaining_expired {
        return Err(format!("swept {taken} of {written} records").into());
    }
    let per_record = |bytes: u64| bytes as f64 / written.max(1) as f64;
    Ok((
        FileFigures {
            records: written,
            fill_per_second: written as f64 / fill.total.as_secs_f64().max(1e-9),
            file_bytes,
            bytes_per_record: per_record(file_bytes),
            compacted_bytes_per_record: per_record(compacted),
            sweep_ms: sweep.as_secs_f64() * 1e3,
            sweep_per_second: written as f64 / sweep.as_secs_f64().max(1e-9),
        },
        rows,
    ))
}

/// A begin that replays each id twice (the first from the file, which fills the replay
/// cache, the second from memory), and a get of each (which the cache, filled, serves),
/// on one caller. The store's replay cache must hold every id.
fn lookups(store: &Store, ids: &[RecordId], mode: &str) -> Result<[Row; 3], BenchError> {
    let count = u32::try_from(ids.len())?;
    let distinct = ids.iter().collect::<HashSet<_>>().len();
    let fingerprints: Vec<Fingerprint> = ids
        .iter()
        .map(|id| Fingerprint::of_bytes(id.key().as_bytes()))
        .collect();
    let replay = || {
        measure(1, count, |_, n| {
            let id = &ids[n as usize];
            match store.begin(id, fingerprints[n as usize], NOW)? {
                Decision::Replay { .. } => Ok(()),
                other => Err(format!("{id}: expected a replay, got {other:?}").into()),
            }
        })
    };
    let first = replay()?;
    let begin = replay()?;
    let get = gets(store, ids)?;
    let single = !mode.is_empty();
    Ok([
        Row::new(
            if single {
                "replay_begin_first_exclusive"
            } else {
                "replay_begin_first"
            },
            &format!("replay: first begin on a settled key, from the file{mode}"),
            1,
            &first,
        ),
        Row::new(
            if single {
                "replay_begin_exclusive"
            } else {
                "replay_begin"
            },
            &format!("replay: begin on a settled key, cached ({distinct} keys){mode}"),
            1,
            &begin,
        ),
        Row::new(
            if single { "get_exclusive" } else { "get" },
            &format!("get of a settled key{mode}"),
            1,
            &get,
        ),
    ])
}

/// A get of each id, on one caller.
fn gets(store: &Store, ids: &[RecordId]) -> Result<Timing, BenchError> {
    measure(1, u32::try_from(ids.len())?, |_, n| {
        let id = &ids[n as usize];
        match store.get(id)? {
            Some(record) => {
                black_box(record);
                Ok(())
            }
            None => Err(format!("{id} is missing").into()),
        }
    })
}

/// The pure core's begin on an absent key: the decision without any storage. Timed in
/// blocks of 100 calls, since one call is shorter than the clock's resolution.
fn core_decisions(calls: u32) -> Row {
    const BLOCK: u32 = 100;
    let config = Config::default();
    let fingerprint = Fingerprint::of_bytes(b"bench payload");
    let blocks = calls.div_ceil(BLOCK).max(1);
    let mut each = Vec::with_capacity(blocks as usize * BLOCK as usize);
    let start = Instant::now();
    for block in 0..blocks {
        let one = Instant::now();
        for i in 0..BLOCK {
            let next = Generation(u64::from(block * BLOCK + i) + 1);
            let transition = protocol::begin(None, black_box(fingerprint), next, NOW, &config);
            drop(black_box(transition));
        }
        let per_call = one.elapsed() / BLOCK;
        each.extend(std::iter::repeat_n(per_call, BLOCK as usize));
    }
    let timing = Timing {
        total: start.elapsed(),
        calls: each,
    };
    Row::new(
        "core_begin",
        "core begin decision (pure, no I/O)",
        1,
        &timing,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::table;

    #[test]
    fn a_small_plan_measures_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            keys_per_caller: 2,
            callers: vec![1, 3],
            records: 50,
            lookups: 20,
            decisions: 300,
        };
        let report = run(dir.path(), &plan, &mut |_| {}).unwrap();
        for (id, callers) in [
            ("fsync", 1),
            ("two_phase", 1),
            ("two_phase", 3),
            ("two_phase_tasks", 3),
            ("execute", 1),
            ("execute", 3),
            ("execute_grouped", 1),
            ("execute_grouped", 3),
            ("transition", 1),
            ("execute_transition", 1),
            ("execute_no_fsync", 1),
            ("execute_grouped_no_fsync", 1),
            ("execute_single_process", 1),
            ("execute_single_process_no_journal", 1),
            ("execute_grouped_single_process", 3),
            ("replay_begin_first", 1),
            ("replay_begin", 1),
            ("get", 1),
            ("replay_begin_first_exclusive", 1),
            ("replay_begin_exclusive", 1),
            ("get_exclusive", 1),
            ("get_uncached", 1),
            ("get_uncached_exclusive", 1),
            ("core_begin", 1),
        ] {
            let row = report
                .row(id, callers)
                .unwrap_or_else(|| panic!("no row {id} at {callers}"));
            assert!(row.per_second > 0.0, "{row:?}");
        }
        assert_eq!(report.row("execute_grouped", 3).unwrap().ops, 6);
        assert_eq!(report.file.records, 50);
        assert!(report.file.bytes_per_record > 0.0);
        let text = table(&report.rows);
        assert!(text.starts_with("MEASUREMENT"), "{text}");
        let file = report.file.to_string();
        assert!(file.starts_with("file after 50 records"), "{file}");
        assert!(file.contains("\nsweep of 50 expired records"), "{file}");
    }
}
