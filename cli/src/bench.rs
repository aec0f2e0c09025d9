//! `idem bench`: a small, honest measurement on this machine, on a temporary file with
//! the store's default durability (every commit waits for its fsync).
//!
//! Each row times `ops` real calls one by one and reports the rate over the whole run
//! and the median and 99th percentile of single calls. Nothing is extrapolated.

use std::hint::black_box;
use std::time::{Duration, Instant};

use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Generation, Outcome, RecordId, Timestamp, Verdict};
use idem_store::Store;
use serde::Serialize;

use crate::exit::{Ending, Exit, Failure};
use crate::output::table;
use crate::progress::{self, Unit};
use crate::session::{Session, open_store, store_failure};

/// Pure core decisions per store operation: the core is cheap, so it gets more calls.
const CORE_FACTOR: u32 = 100;

/// One row of the table.
#[derive(Debug, Serialize)]
struct Row {
    measurement: &'static str,
    ops: u64,
    per_second: u64,
    median_us: f64,
    p99_us: f64,
}

impl Row {
    fn of(measurement: &'static str, total: Duration, mut samples: Vec<Duration>) -> Row {
        samples.sort_unstable();
        let at = |q: f64| {
            // Index of the q-quantile; samples is non-empty (ops >= 1).
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i].as_secs_f64() * 1e6
        };
        let ops = samples.len() as u64;
        Row {
            measurement,
            ops,
            per_second: (ops as f64 / total.as_secs_f64().max(1e-9)) as u64,
            median_us: at(0.5),
            p99_us: at(0.99),
        }
    }
}

/// Runs every measurement and prints the table.
pub(crate) fn run(session: &Session, ops: u32) -> Ending {
    if ops == 0 {
        return Err(Failure::usage("--ops: 0, must be at least 1"));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::runtime(format!("bench: temporary directory: {e}")))?;
    let store = open_store(&dir.path().join("bench.redb"), Config::default())?;
    let bar = progress::bar(Some(u64::from(ops) * 4), "measuring", Unit::Items);
    let now = session.now();
    let ids = (0..ops)
        .map(|i| RecordId::new("bench", "op", &format!("k-{i:08}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::runtime(format!("bench: {e}")))?;
    let fingerprint = Fingerprint::of_bytes(b"bench payload");
    let outcome = Outcome::new(200, vec![b'x'; 64]);

    let two_phase = timed(&ids, |id| {
        bar.inc(1);
        let Decision::Claimed { generation, .. } = store.begin(id, fingerprint, now)? else {
            return Err(idem_store::Error::Corrupt {
                detail: format!("bench: {id} was not claimable"),
            });
        };
        store
            .complete(id, generation, Verdict::Succeeded, outcome.clone(), now)
            .map(drop)
    })
    .map_err(store_failure)?;
    let replay = timed(&ids, |id| {
        bar.inc(1);
        store.begin(id, fingerprint, now).map(drop)
    })
    .map_err(store_failure)?;
    let read = timed(&ids, |id| {
        bar.inc(1);
        store.get(id).map(drop)
    })
    .map_err(store_failure)?;
    let atomic = atomic_execute(&store, ops, fingerprint, &outcome, now, &bar)?;
    bar.finish_and_clear();
    let rows = [
        Row::of(
            "begin + complete (two-phase, 2 fsyncs)",
            two_phase.0,
            two_phase.1,
        ),
        Row::of("execute (atomic, 1 fsync)", atomic.0, atomic.1),
        Row::of("replay: begin on a settled key", replay.0, replay.1),
        Row::of("get (read transaction)", read.0, read.1),
        core_decisions(ops.saturating_mul(CORE_FACTOR), fingerprint, now),
    ];
    print(session, &rows)?;
    Ok(Exit::Done.code())
}

fn timed<E>(
    ids: &[RecordId],
    mut call: impl FnMut(&RecordId) -> Result<(), E>,
) -> Result<(Duration, Vec<Duration>), E> {
    let mut samples = Vec::with_capacity(ids.len());
    let start = Instant::now();
    for id in ids {
        let one = Instant::now();
        call(id)?;
        samples.push(one.elapsed());
    }
    Ok((start.elapsed(), samples))
}

fn atomic_execute(
    store: &Store,
    ops: u32,
    fingerprint: Fingerprint,
    outcome: &Outcome,
    now: Timestamp,
    bar: &indicatif::ProgressBar,
) -> Result<(Duration, Vec<Duration>), Failure> {
    let ids = (0..ops)
        .map(|i| RecordId::new("bench", "atomic", &format!("k-{i:08}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::runtime(format!("bench: {e}")))?;
    timed(&ids, |id| {
        bar.inc(1);
        store
            .execute(id, fingerprint, now, |_| {
                Ok::<_, Failure>((Verdict::Succeeded, outcome.clone(), ()))
            })
            .map(drop)
            .map_err(|e| Failure::runtime(format!("bench: execute: {e}")))
    })
}

/// The pure core's begin on an absent key: the decision cost without any storage.
fn core_decisions(calls: u32, fingerprint: Fingerprint, now: Timestamp) -> Row {
    let config = Config::default();
    let mut samples = Vec::with_capacity(calls as usize);
    let start = Instant::now();
    for i in 0..calls {
        let one = Instant::now();
        let transition = protocol::begin(
            None,
            fingerprint,
            Generation(u64::from(i) + 1),
            now,
            &config,
        );
        drop(black_box(transition));
        samples.push(one.elapsed());
    }
    Row::of(
        "core begin decision (pure, no I/O)",
        start.elapsed(),
        samples,
    )
}

fn print(session: &Session, rows: &[Row]) -> Result<(), Failure> {
    let printer = session.printer();
    if printer.json {
        return rows.iter().try_for_each(|row| printer.json_line(row));
    }
    let mut cells = vec![
        ["MEASUREMENT", "OPS", "PER SECOND", "MEDIAN", "P99"]
            .map(String::from)
            .to_vec(),
    ];
    cells.extend(rows.iter().map(|r| {
        vec![
            r.measurement.to_string(),
            r.ops.to_string(),
            r.per_second.to_string(),
            micros(r.median_us),
            micros(r.p99_us),
        ]
    }));
    printer
        .line("idem bench: one temporary store file, durability Immediate (fsync per commit)")?;
    printer.line(&table(&cells))
}

fn micros(us: f64) -> String {
    if us >= 1_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else if us >= 1.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.0} ns", us * 1_000.0)
    }
}
