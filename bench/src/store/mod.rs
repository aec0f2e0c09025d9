//! The store's measurements on this machine, for `idem bench` and the comparison harness.
//!
//! One implementation for both: the harness (`benches/compare.rs`) prints these same rows
//! beside SQLite's.
//!
//! Every figure is timed from real calls on real files in the directory given, with the
//! store's default durability unless a row says otherwise: each commit waits for its
//! fsync. Nothing is extrapolated; a row's rate is its calls over its wall time, and its
//! median and 99th percentile are of single calls.
//!
//! [`run`] takes the measurements in order: the disk's own fsync (`disk.rs`), the write
//! paths on one store at a time (`writes.rs`), a file filled with records and read back
//! (`file.rs`), and the pure core's decision (`pure.rs`).

mod disk;
mod file;
mod pure;
mod writes;

use std::path::Path;
use std::sync::Arc;

use idem_core::{Outcome, Timestamp};
use idem_store::Store;
use idem_store::redb::ConcurrencyMode;
use serde::Serialize;

use crate::measure::{BenchError, Row};
use disk::{fsync_pages, fsync_probe};
pub use file::FileFigures;
use file::file_figures;
use pure::core_decisions;
use writes::{Writes, overhead};

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
