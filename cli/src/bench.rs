//! `idem bench`: the store's measurements on this machine, printed as a table.
//!
//! The measurements are [`idem_bench::store`], the same code as the comparison harness, run
//! on temporary files. Rows time real calls with the store's default durability (every
//! commit waits for its fsync): one input per transaction, atomic execute, group commit at
//! 1, 8 and 64 callers, replay lookups, the pure core; then the file's bytes per record and
//! the time to sweep it; then (not in `--json`) the bytes written, write calls and syncs
//! per commit of each write path, counted ([`idem_bench::io`]). Nothing is extrapolated.

use idem_bench::io::{self, IoPlan};
use idem_bench::measure::table;
use idem_bench::store::{self, FileFigures, Plan};
use serde::Serialize;

use crate::exit::{Ending, Exit, Failure};
use crate::progress::{self, Unit};
use crate::session::Session;

/// The file figures as one JSON line, told apart from the rows by its id.
#[derive(Debug, Serialize)]
struct FileLine<'f> {
    id: &'static str,
    #[serde(flatten)]
    figures: &'f FileFigures,
}

/// Runs every measurement and prints the table.
pub(crate) fn run(session: &Session, ops: u32) -> Ending {
    if ops == 0 {
        return Err(Failure::usage("--ops: 0, must be at least 1"));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::runtime(format!("bench: temporary directory: {e}")))?;
    let plan = Plan::for_ops(ops);
    let spinner = progress::bar(None, "measuring", Unit::Items);
    let report = store::run(dir.path(), &plan, &mut |step| {
        spinner.set_message(step.to_string());
        spinner.tick();
    })
    .map_err(|e| Failure::runtime(format!("bench: {e}")))?;
    spinner.finish_and_clear();

    let printer = session.printer();
    if printer.json {
        for row in &report.rows {
            printer.json_line(row)?;
        }
        return printer
            .json_line(&FileLine {
                id: "file",
                figures: &report.file,
            })
            .map(|()| Exit::Done.code());
    }
    printer.line(&format!(
        "idem bench: temporary files in {}, durability Immediate (every commit waits for its fsync)",
        dir.path().display()
    ))?;
    printer.line(&format!(
        "{} keys per caller, callers {:?}, {} records, {} lookups, {} core decisions",
        plan.keys_per_caller, plan.callers, plan.records, plan.lookups, plan.decisions
    ))?;
    printer.line(table(&report.rows).trim_end())?;
    printer.line(&report.file.to_string())?;
    // Counts, unlike times, need few inputs: up to 500 after up to 2,000 of warm-up.
    let plan = IoPlan {
        warm_up: ops.saturating_mul(4).min(2_000),
        inputs: ops.min(500),
    };
    let spinner = progress::bar(None, "counting disk calls", Unit::Items);
    let counted = io::run(dir.path(), plan).map_err(|e| Failure::runtime(format!("bench: {e}")))?;
    spinner.finish_and_clear();
    printer.line(io::io_table(&counted).trim_end())?;
    Ok(Exit::Done.code())
}
