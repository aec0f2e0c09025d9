//! What a commit costs the disk: bytes written, write calls and syncs per commit, counted
//! by a redb [`StorageBackend`] that passes every call to a real file and counts it.
//!
//! Counts, unlike times, do not depend on the machine's load: the same run gives the same
//! figures. [`run`] counts the store's own paths (one execute per transaction in both
//! concurrency modes, begin + complete, and group commit at 64 callers); [`layout`]
//! counts bare redb commits that insert into one to four tables, which is what a commit
//! of the store pays per B-tree it modifies, and so what folding tables would save.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::redb::backends::FileBackend;
use idem_store::redb::{
    self, BackendError, ConcurrencyMode, Database, StorageBackend, TableDefinition,
};
use idem_store::{Executed, Store};
use serde::Serialize;

use crate::measure::{BenchError, KeySequence};

/// The time every input runs at.
const NOW: Timestamp = Timestamp(1_750_000_000_000);

/// The size of a redb page.
pub const PAGE: u64 = 4096;

/// Running totals of one storage's calls.
#[derive(Debug, Default)]
struct Totals {
    writes: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
}

/// Calls a storage received, from [`Counter::now`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Calls {
    /// `write` calls.
    pub writes: u64,
    /// Bytes those calls wrote.
    pub bytes_written: u64,
    /// `sync_data` calls (fsyncs).
    pub syncs: u64,
    /// `read` calls (those redb's page cache did not answer).
    pub reads: u64,
    /// Bytes those calls read.
    pub bytes_read: u64,
}

impl std::ops::Sub for Calls {
    type Output = Calls;

    fn sub(self, before: Calls) -> Calls {
        Calls {
            writes: self.writes - before.writes,
            bytes_written: self.bytes_written - before.bytes_written,
            syncs: self.syncs - before.syncs,
            reads: self.reads - before.reads,
            bytes_read: self.bytes_read - before.bytes_read,
        }
    }
}

/// Reads the totals of a [`Counting`] storage, which redb owns once the store is open.
#[derive(Debug, Clone)]
pub struct Counter(Arc<Totals>);

impl Counter {
    /// The calls so far.
    #[must_use]
    pub fn now(&self) -> Calls {
        let t = &self.0;
        Calls {
            writes: t.writes.load(Ordering::Relaxed),
            bytes_written: t.bytes_written.load(Ordering::Relaxed),
            syncs: t.syncs.load(Ordering::Relaxed),
            reads: t.reads.load(Ordering::Relaxed),
            bytes_read: t.bytes_read.load(Ordering::Relaxed),
        }
    }
}

/// A file, through redb's own [`FileBackend`] (locks included, so the multi-process
/// modes work), with every read, write and sync counted.
#[derive(Debug)]
pub struct Counting {
    file: FileBackend,
    totals: Arc<Totals>,
}

impl Counting {
    /// The file at `path`, created when missing, and the counter of its calls.
    ///
    /// # Errors
    ///
    /// Opening the file.
    pub fn create(path: &Path) -> io::Result<(Counting, Counter)> {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let totals = Arc::<Totals>::default();
        let counting = Counting {
            file: FileBackend::new(file).map_err(io::Error::other)?,
            totals: Arc::clone(&totals),
        };
        Ok((counting, Counter(totals)))
    }
}

impl StorageBackend for Counting {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.totals.reads.fetch_add(1, Ordering::Relaxed);
        self.totals
            .bytes_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.totals.syncs.fetch_add(1, Ordering::Relaxed);
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.totals.writes.fetch_add(1, Ordering::Relaxed);
        self.totals
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.file.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

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

fn per(count: u64, of: u64) -> f64 {
    count as f64 / of.max(1) as f64
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

/// How much [`run`] and [`layout`] do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IoPlan {
    /// Inputs (or bare commits) run before counting, so that the file has grown past its
    /// first allocations and the B-trees have more than one level.
    pub warm_up: u32,
    /// Inputs counted per path (group commit: per caller); bare commits counted.
    pub inputs: u32,
}

impl Default for IoPlan {
    /// 2,000 inputs of warm-up, 500 counted.
    fn default() -> IoPlan {
        IoPlan {
            warm_up: 2_000,
            inputs: 500,
        }
    }
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

/// One bare redb commit's disk calls when it inserts one entry into each of `tables`
/// tables, in `mode`: what the store's commit pays per B-tree it modifies.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutRow {
    /// Tables modified per commit.
    pub tables: usize,
    /// The concurrency mode, as redb names it.
    pub mode: String,
    /// Commits counted.
    pub commits: u64,
    /// Their calls.
    pub calls: Calls,
}

/// The table names of [`layout`], shaped like the store's: records, expiry, a state
/// index, meta.
const LAYOUT: [TableDefinition<&[u8], &[u8]>; 4] = [
    TableDefinition::new("records"),
    TableDefinition::new("expiry"),
    TableDefinition::new("state"),
    TableDefinition::new("meta"),
];

/// Commits into bare redb databases in `dir`: for 1 to 4 tables and both kinds of
/// commit, `plan.inputs` commits after `plan.warm_up`, each inserting one entry of the store's
/// sizes (a 150-byte record under a 25-byte key; 33-byte index keys; an 8-byte counter
/// rewritten in place) into each table.
///
/// # Errors
///
/// The first redb or file error.
pub fn layout(dir: &Path, plan: IoPlan) -> Result<Vec<LayoutRow>, BenchError> {
    let IoPlan {
        warm_up,
        inputs: commits,
    } = plan;
    let mut rows = Vec::new();
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        for tables in 1..=LAYOUT.len() {
            let path = dir.join(format!("layout-{tables}-{mode:?}.redb"));
            let (backend, counter) = Counting::create(&path)?;
            let db = Database::builder()
                .set_concurrency_mode(mode)
                .create_with_backend(backend)?;
            let mut n = 0u64;
            let mut commit = |db: &Database| -> Result<(), redb::Error> {
                n += 1;
                let key = format!("\x05bench\x06layout{n:010}");
                let timed = [&NOW.as_millis().to_be_bytes()[..], key.as_bytes()].concat();
                let txn = db.begin_write()?;
                for (i, table) in LAYOUT.iter().take(tables).enumerate() {
                    let mut table = txn.open_table(*table)?;
                    match i {
                        0 => table.insert(key.as_bytes(), &[0x5a; 150][..])?,
                        3 => table.insert(&b"generation"[..], &n.to_be_bytes()[..])?,
                        _ => table.insert(timed.as_slice(), &[][..])?,
                    };
                }
                txn.commit()?;
                Ok(())
            };
            for _ in 0..warm_up {
                commit(&db)?;
            }
            let before = counter.now();
            for _ in 0..commits {
                commit(&db)?;
            }
            rows.push(LayoutRow {
                tables,
                mode: format!("{mode:?}"),
                commits: u64::from(commits),
                calls: counter.now() - before,
            });
        }
    }
    Ok(rows)
}

/// The layout rows as a table for people.
#[must_use]
pub fn layout_table(rows: &[LayoutRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<62} {:>9} {:>7} {:>6} {:>6}",
        "BARE REDB COMMIT, one entry into each of N tables", "B/commit", "pages", "writes", "syncs"
    );
    for row in rows {
        let c = row.calls;
        let bytes = per(c.bytes_written, row.commits);
        let _ = writeln!(
            out,
            "{:<62} {:>9.0} {:>7.1} {:>6.1} {:>6.2}",
            format!("{} table(s), {}", row.tables, row.mode),
            bytes,
            bytes / PAGE as f64,
            per(c.writes, row.commits),
            per(c.syncs, row.commits),
        );
    }
    out
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

    #[test]
    fn a_bare_commit_into_more_tables_writes_more() {
        let dir = tempfile::tempdir().unwrap();
        let plan = IoPlan {
            warm_up: 50,
            inputs: 20,
        };
        let rows = layout(dir.path(), plan).unwrap();
        assert_eq!(rows.len(), 8);
        for pair in rows.windows(2).filter(|p| p[0].mode == p[1].mode) {
            assert!(
                pair[1].calls.bytes_written > pair[0].calls.bytes_written,
                "{pair:?}"
            );
        }
        assert!(layout_table(&rows).starts_with("BARE REDB COMMIT"));
    }
}
