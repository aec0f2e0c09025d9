//! The commands over the whole store: list, stats, sweep, check, compact, export, import.

use idem_store::Receiver;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::Path;

use idem_core::{Config, Timestamp};
use idem_store::maintain::IntentCounts;
use idem_store::maintain::RecordView;
use idem_store::maintain::Stats;
use idem_store::maintain::SweepReport;
use idem_store::maintain::Transferred;
use idem_store::{ListFilter, MaintainError};
use serde::Serialize;

use crate::exit::{Ending, Exit, Failure};
use crate::progress::{self, CountingReader, Unit};
use crate::session::{Access, Session, import_failure, maintain_failure, store_failure};
use crate::time::{NOW_AHEAD_LIMIT_MS, format_instant, format_span};

/// Records swept per call while a progress bar is shown.
const SWEEP_STEP: usize = 1_024;

/// `idem list [--state S] [--tenant T] [--operation O] [--limit N]`
pub(crate) fn list(session: &Session, filter: ListFilter) -> Ending {
    // Check the filter before the file: a bad tenant is bad input even without a store.
    let probe = (
        filter.tenant.as_deref().unwrap_or("t"),
        filter.operation.as_deref().unwrap_or("o"),
    );
    idem_core::RecordId::new(probe.0, probe.1, "k")
        .map_err(|e| Failure::usage(format!("--{e}")))?;
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let printer = session.printer();
    let mut rows = Vec::new();
    let mut printed = Ok(());
    store
        .list(&filter, |id, record| {
            if !printer.json {
                rows.push((id, record));
                return ControlFlow::Continue(());
            }
            printed = printer.json_line(&RecordView::new(&id, &record));
            if printed.is_err() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(store_failure)?;
    printed?;
    if !printer.json {
        printer.records(&rows)?;
    }
    Ok(Exit::Done.code())
}

/// `idem schema`: the SQL of idem's schema on PostgreSQL, or on MariaDB when `--db`
/// names a `mysql://` database; idem's function library when it names a Redis server.
pub(crate) fn schema(session: &Session) -> Ending {
    let engine = match session.engine()? {
        "mysql" => "mysql",
        "redis" => "redis",
        _ => "postgres",
    };
    let (version, sql) = idem_store::any::database_schema(engine)
        .ok_or_else(|| Failure::runtime(format!("this build of idem has no {engine} engine")))?;
    session.printer().either(
        &serde_json::json!({
            "schema_version": version,
            "sql": sql,
        }),
        || sql.trim_end().to_owned(),
    )?;
    Ok(Exit::Done.code())
}

/// `idem stats`
pub(crate) fn stats(session: &Session) -> Ending {
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let stats = store
        .call(|s| s.stats(session.now()))
        .map_err(maintain_failure)?;
    let view = StatsView {
        stats: &stats,
        system_clock: idem_store::now(),
    };
    session.printer().either(&view, || {
        format!(
            "{}\n{}",
            stats_text(&stats),
            clock_text(stats.clock_floor, view.system_clock)
        )
    })?;
    Ok(Exit::Done.code())
}

/// What `idem stats --json` prints: the store's figures and the system clock, to compare
/// with the clock floor.
#[derive(Serialize)]
struct StatsView<'a> {
    #[serde(flatten)]
    stats: &'a Stats,
    system_clock: Timestamp,
}

/// The clock floor beside the system clock, and what a floor far ahead of it means.
fn clock_text(floor: Timestamp, system: Timestamp) -> String {
    let mut text = format!(
        "clock floor   {}  (the latest time a write used; writes never use an earlier one)\nsystem clock  {}",
        if floor == Timestamp(0) {
            "none yet".to_string()
        } else {
            format_instant(floor)
        },
        format_instant(system)
    );
    let ahead = floor.millis_since(system);
    if ahead > NOW_AHEAD_LIMIT_MS {
        text.push_str(&format!(
            "\nthe floor is {} ahead of the system clock: a clock was ahead (or is behind now); writes use the floor until the clock passes it",
            format_span(ahead)
        ));
    }
    text
}

/// The outbox's intents by state, the states that have any.
fn intents_note(counts: &IntentCounts) -> String {
    let parts: Vec<String> = [
        (counts.queued, "queued"),
        (counts.in_flight, "in flight"),
        (counts.completed, "completed"),
        (counts.failed, "failed"),
        (counts.conflict, "conflict"),
        (counts.expired, "expired, to reconcile"),
        (counts.unknown, "unknown at the receiver, to reconcile"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, name)| format!("{n} {name}"))
    .collect();
    parts.join(", ")
}

fn stats_text(stats: &Stats) -> String {
    let age =
        |ms: Option<u64>| ms.map_or_else(String::new, |ms| format!("oldest {}", format_span(ms)));
    let pending_note = match (
        stats.pending_lease_expired,
        age(stats.oldest_pending_age_ms),
    ) {
        (0, oldest) => oldest,
        (n, oldest) => format!("{n} with an expired lease, {oldest}"),
    };
    let rows = [
        ("pending", stats.pending.to_string(), pending_note),
        ("succeeded", stats.succeeded.to_string(), String::new()),
        ("failed", stats.failed.to_string(), String::new()),
        (
            "unknown",
            stats.unknown.to_string(),
            age(stats.oldest_unknown_age_ms),
        ),
        (
            "forgotten",
            stats.forgotten.to_string(),
            "tombstones: ran, outcome past retention".into(),
        ),
        (
            "expired",
            stats.expired.to_string(),
            "retention (or a tombstone's time) ended, awaiting sweep".into(),
        ),
        ("records", stats.records().to_string(), String::new()),
        (
            "generation",
            stats.generation.to_string(),
            "last handed out".into(),
        ),
        ("file", stats.file_bytes.to_string(), "bytes".into()),
        (
            "intents",
            stats.intents.total().to_string(),
            intents_note(&stats.intents),
        ),
    ];
    let count_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let lines: Vec<String> = rows
        .iter()
        .map(|(name, count, note)| {
            format!("{name:<10}  {count:>count_width$}  {note}")
                .trim_end()
                .to_string()
        })
        .collect();
    lines.join("\n")
}

/// `idem sweep [--limit N] [--dry-run]`
pub(crate) fn sweep(
    session: &Session,
    limit: Option<usize>,
    dry_run: bool,
    tombstones: u64,
) -> Ending {
    let config = Config {
        tombstone_retention_ms: tombstones,
        ..Config::default()
    };
    let store =
        session.open_receiver(config, if dry_run { Access::Read } else { Access::Write })?;
    let now = session.now();
    let limit = limit.unwrap_or(usize::MAX);
    let report = if dry_run {
        store
            .call(|s| s.sweep(now, limit, true))
            .map_err(store_failure)?
    } else {
        let expired = store
            .call(|s| s.stats(now))
            .map_err(maintain_failure)?
            .expired;
        let total = expired.min(u64::try_from(limit).unwrap_or(u64::MAX));
        let bar = if total == 0 {
            indicatif::ProgressBar::hidden()
        } else {
            progress::bar(Some(total), "sweeping", Unit::Items)
        };
        let mut report = SweepReport::default();
        loop {
            let done = report.removed + report.tombstoned;
            let left = limit.saturating_sub(usize::try_from(done).unwrap_or(usize::MAX));
            let step = store
                .call(|s| s.sweep(now, left.min(SWEEP_STEP), false))
                .map_err(store_failure)?;
            report.removed += step.removed;
            report.tombstoned += step.tombstoned;
            bar.inc(step.removed + step.tombstoned);
            report.remaining_expired = step.remaining_expired;
            if !step.remaining_expired || step.removed + step.tombstoned == 0 || left <= SWEEP_STEP
            {
                break;
            }
        }
        bar.finish_and_clear();
        report
    };
    let printer = session.printer();
    let value = serde_json::json!({
        "removed": report.removed,
        "tombstoned": report.tombstoned,
        "remaining_expired": report.remaining_expired,
        "dry_run": dry_run,
    });
    printer.either(&value, || {
        let (deleted, tombstoned) = if dry_run {
            ("would delete", "would leave")
        } else {
            ("deleted", "left")
        };
        let more = if report.remaining_expired {
            "; more expired records remain past --limit"
        } else {
            ""
        };
        format!(
            "{deleted} {} records, {tombstoned} {} tombstones{more}",
            report.removed, report.tombstoned
        )
    })?;
    Ok(Exit::Done.code())
}

/// `idem check`: exit 1 when a problem is found.
pub(crate) fn check(session: &Session) -> Ending {
    let store = session.open_file(Config::default(), Access::Write)?;
    let report = store
        .file("check")
        .and_then(|store| store.check())
        .map_err(store_failure)?;
    let printer = session.printer();
    if printer.json {
        printer.json_line(&report)?;
    } else {
        let repaired = if report.redb_repaired {
            "; redb found damage and repaired it"
        } else {
            ""
        };
        printer.line(&format!(
            "{} records and {} intents checked, {} problems{repaired}",
            report.records,
            report.intents,
            report.problems.len()
        ))?;
        for problem in &report.problems {
            printer.line(&format!("  {problem}"))?;
        }
    }
    if report.is_ok() {
        Ok(Exit::Done.code())
    } else {
        Err(Failure::runtime(format!(
            "{}: check found {} problems",
            session.db.display(),
            report.problems.len()
        )))
    }
}

/// `idem compact`
pub(crate) fn compact(session: &Session) -> Ending {
    let mut store = session.open_file(Config::default(), Access::Write)?;
    let before = file_size(&session.db)?;
    let moved = store
        .file_mut("compact")
        .map_err(store_failure)?
        .compact()
        .map_err(maintain_failure)?;
    drop(store);
    let after = file_size(&session.db)?;
    let value = serde_json::json!({ "compacted": moved, "file_bytes_before": before, "file_bytes_after": after });
    session.printer().either(&value, || {
        if moved {
            format!("compacted: {before} bytes before, {after} after")
        } else {
            format!("already compact: {after} bytes")
        }
    })?;
    Ok(Exit::Done.code())
}

/// `idem export [--out FILE]`: JSON lines to the file or stdout; the count is reported on
/// stdout with `--out`, on stderr without (stdout then carries the records).
pub(crate) fn export(session: &Session, out: Option<&Path>) -> Ending {
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let records = store
        .call(|s| s.stats(session.now()))
        .map_err(maintain_failure)?
        .records();
    let bar = progress::bar(Some(records), "exporting", Unit::Items);
    let count = match out {
        Some(path) => {
            let file = File::create(path).map_err(|e| {
                Failure::runtime(format!("--out: cannot create {}: {e}", path.display()))
            })?;
            let mut writer = BufWriter::new(CountingLines::new(file, bar.clone()));
            let count = store
                .call(|s| s.export(&mut writer))
                .map_err(maintain_failure)?;
            writer
                .flush()
                .map_err(|e| Failure::runtime(format!("--out: writing {}: {e}", path.display())))?;
            count
        }
        None => {
            let mut writer = BufWriter::new(CountingLines::new(io::stdout(), bar.clone()));
            let count = store.call(|s| s.export(&mut writer)).map_err(|e| match e {
                MaintainError::Export(e) => Failure::stdout(&e),
                other => maintain_failure(other),
            })?;
            writer.flush().map_err(|e| Failure::stdout(&e))?;
            count
        }
    };
    bar.finish_and_clear();
    let value = serde_json::json!({
        "exported": count.records,
        "intents": count.intents,
        "entities": count.entities,
        "unique": count.unique,
        "tokens": count.tokens,
    });
    let text = || format!("exported {}", transferred_text(&count));
    if out.is_some() {
        session.printer().either(&value, text)?;
    } else if session.json {
        eprintln!("{value}");
    } else {
        eprintln!("{}", text());
    }
    Ok(Exit::Done.code())
}

/// `idem import FILE`
pub(crate) fn import(session: &Session, file: &Path) -> Ending {
    // Open the input before the store: a missing file must not create an empty store.
    let count = if file == Path::new("-") {
        let store = session.open_receiver(Config::default(), Access::Create)?;
        let mut input = BufReader::new(io::stdin());
        store
            .call(|s| s.import(&mut input))
            .map_err(import_failure)?
    } else {
        let input = File::open(file)
            .map_err(|e| Failure::usage(format!("FILE: cannot read {}: {e}", file.display())))?;
        let size = input.metadata().map(|m| m.len()).ok();
        let bar = progress::bar(size, "importing", Unit::Bytes);
        let store = session.open_receiver(Config::default(), Access::Create)?;
        let mut input = BufReader::new(CountingReader::new(input, bar.clone()));
        let count = store
            .call(|s| s.import(&mut input))
            .map_err(import_failure)?;
        bar.finish_and_clear();
        count
    };
    session.printer().either(
        &serde_json::json!({
            "imported": count.records,
            "intents": count.intents,
            "entities": count.entities,
            "unique": count.unique,
            "tokens": count.tokens,
        }),
        || format!("imported {}", transferred_text(&count)),
    )?;
    Ok(Exit::Done.code())
}

/// `4 records, 6 intents, 1 entities, 2 claimed values and 0 tokens`.
fn transferred_text(count: &Transferred) -> String {
    format!(
        "{} records, {} intents, {} entities, {} claimed values and {} tokens",
        count.records, count.intents, count.entities, count.unique, count.tokens
    )
}

fn file_size(path: &Path) -> Result<u64, Failure> {
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))
}

/// A writer that advances a bar by the records written through it: every line after the
/// export's header line.
struct CountingLines<W> {
    inner: W,
    bar: indicatif::ProgressBar,
    header_done: bool,
}

impl<W> CountingLines<W> {
    fn new(inner: W, bar: indicatif::ProgressBar) -> CountingLines<W> {
        CountingLines {
            inner,
            bar,
            header_done: false,
        }
    }
}

impl<W: Write> Write for CountingLines<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let mut lines = buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        if !self.header_done && lines > 0 {
            self.header_done = true;
            lines -= 1;
        }
        self.bar.inc(lines);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
