//! The measuring itself: timed calls, rows of rates and latencies, the table.
//!
//! [`measure`] times calls on several threads started together; [`Row`] turns a
//! [`Timing`] into a rate, a median and a 99th percentile; [`table`] prints rows for
//! people.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Any failure of a measurement, with its cause in the message.
pub type BenchError = Box<dyn StdError + Send + Sync>;

/// Numbers for keys in the order callers take them, so that a measurement's keys sort
/// by arrival, as the time-ordered keys (UUIDv7) of idem's sender ledger do. Both idem
/// and the SQLite baseline get their keys this way.
#[derive(Debug, Default)]
pub struct KeySequence(AtomicU64);

impl KeySequence {
    /// The next number.
    pub fn take(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }

    /// The next key: `prefix` and the next number, zero-padded to 10 digits.
    pub fn next(&self, prefix: &str) -> String {
        format!("{prefix}{:010}", self.take())
    }
}

/// The calls of one measurement, timed.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Wall time from the start of the first call to the end of the last.
    pub total: Duration,
    /// Each call's own time.
    pub calls: Vec<Duration>,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// A stable name for the measurement, for ratios and scripts.
    pub id: &'static str,
    /// What was measured, for people.
    pub measurement: String,
    /// Threads calling at once.
    pub callers: u32,
    /// Calls made (keys settled, lookups, decisions).
    pub ops: u64,
    /// Calls per second of wall time.
    pub per_second: f64,
    /// Median time of one call, in microseconds.
    pub median_us: f64,
    /// 99th percentile of one call, in microseconds.
    pub p99_us: f64,
    /// Inputs answered per commit (each commit one fsync), for write rows.
    pub inputs_per_commit: Option<f64>,
}

impl Row {
    /// A row from a timing.
    #[must_use]
    pub fn new(id: &'static str, measurement: &str, callers: u32, timing: &Timing) -> Row {
        let mut calls = timing.calls.clone();
        calls.sort_unstable();
        let at = |q: f64| -> f64 {
            if calls.is_empty() {
                return 0.0;
            }
            let i = ((calls.len() - 1) as f64 * q).round() as usize;
            calls[i].as_secs_f64() * 1e6
        };
        let ops = calls.len() as u64;
        Row {
            id,
            measurement: measurement.to_string(),
            callers,
            ops,
            per_second: ops as f64 / timing.total.as_secs_f64().max(1e-9),
            median_us: at(0.5),
            p99_us: at(0.99),
            inputs_per_commit: None,
        }
    }

    /// The same row with `inputs` inputs answered by `commits` commits.
    #[must_use]
    pub fn with_commits(mut self, inputs: u64, commits: u64) -> Row {
        self.inputs_per_commit = Some(inputs as f64 / commits.max(1) as f64);
        self
    }
}

/// Times `per_caller` calls on each of `callers` threads started together; `call` gets
/// the caller's number and the call's number.
///
/// # Errors
///
/// The first error a call returned; a call that panicked.
pub fn measure(
    callers: u32,
    per_caller: u32,
    call: impl Fn(u32, u32) -> Result<(), BenchError> + Sync,
) -> Result<Timing, BenchError> {
    let start_line = Barrier::new(callers as usize + 1);
    thread::scope(|scope| {
        let threads: Vec<_> = (0..callers)
            .map(|caller| {
                let (call, start_line) = (&call, &start_line);
                scope.spawn(move || -> Result<Vec<Duration>, BenchError> {
                    start_line.wait();
                    let mut calls = Vec::with_capacity(per_caller as usize);
                    for n in 0..per_caller {
                        let one = Instant::now();
                        call(caller, n)?;
                        calls.push(one.elapsed());
                    }
                    Ok(calls)
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        let mut calls = Vec::with_capacity(callers as usize * per_caller as usize);
        for thread in threads {
            calls.extend(thread.join().map_err(|_| "a measuring thread panicked")??);
        }
        Ok(Timing {
            total: start.elapsed(),
            calls,
        })
    })
}

/// Times `total` calls spread over `callers` tasks started together; `call` gets the
/// caller's number and the call's number, and its own of `state` (one per caller: a
/// connection of its own, or a clone of a shared handle). Each run's rate goes to stderr
/// as it ends.
///
/// # Errors
///
/// The first error a call returned; a task that panicked.
pub async fn measure_tasks<S, F>(
    callers: u32,
    total: u32,
    state: Vec<S>,
    call: impl Fn(Arc<S>, u32, u32) -> F + Send + Sync + 'static,
) -> Result<Timing, BenchError>
where
    S: Send + Sync + 'static,
    F: Future<Output = Result<(), BenchError>> + Send + 'static,
{
    let per_caller = (total / callers).max(1);
    let start = Arc::new(tokio::sync::Barrier::new(callers as usize + 1));
    let call = Arc::new(call);
    let tasks: Vec<_> = state
        .into_iter()
        .take(callers as usize)
        .enumerate()
        .map(|(caller, state)| {
            let (start, call, state) = (Arc::clone(&start), Arc::clone(&call), Arc::new(state));
            tokio::spawn(async move {
                start.wait().await;
                let began = Instant::now();
                let mut calls = Vec::with_capacity(per_caller as usize);
                for n in 0..per_caller {
                    let one = Instant::now();
                    call(Arc::clone(&state), caller as u32, n).await?;
                    calls.push(one.elapsed());
                }
                Ok::<_, BenchError>((began, Instant::now(), calls))
            })
        })
        .collect();
    start.wait().await;
    // From the first caller's start to the last caller's end.
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut calls = Vec::new();
    for task in tasks {
        let (began, ended, mine) = task.await??;
        first = Some(first.map_or(began, |f| f.min(began)));
        last = Some(last.map_or(ended, |l| l.max(ended)));
        calls.extend(mine);
    }
    let total = match (first, last) {
        (Some(first), Some(last)) => last - first,
        _ => std::time::Duration::ZERO,
    };
    eprintln!(
        "    {} calls in {:.2} s: {:.0}/s",
        calls.len(),
        total.as_secs_f64(),
        calls.len() as f64 / total.as_secs_f64()
    );
    Ok(Timing { total, calls })
}

/// The row of median rate among `rows`.
///
/// # Panics
///
/// When `rows` is empty.
#[must_use]
pub fn median(mut rows: Vec<Row>) -> Row {
    rows.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    rows.swap_remove(rows.len() / 2)
}

/// The median, over rounds, of `a`'s rate over `b`'s in the same round: runs side by
/// side in time are compared, so a drift of the machine across rounds cancels out.
///
/// # Panics
///
/// When `a` or `b` is empty.
#[must_use]
pub fn paired(a: &[Row], b: &[Row]) -> f64 {
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| a.per_second / b.per_second)
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// The number after `flag` on the command line, if the flag is there.
///
/// # Errors
///
/// A flag without a number after it, or one that does not parse.
pub fn argument(flag: &str) -> Result<Option<u32>, BenchError> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == flag) {
        Some(i) => Ok(Some(
            args.get(i + 1)
                .ok_or(format!("{flag} needs a number"))?
                .parse()
                .map_err(|e| format!("{flag}: {e}"))?,
        )),
        None => Ok(None),
    }
}

/// The rows as a text table, one line each under a header line.
#[must_use]
pub fn table(rows: &[Row]) -> String {
    let mut cells: Vec<[String; 7]> = vec![
        [
            "MEASUREMENT",
            "CALLERS",
            "OPS",
            "PER SECOND",
            "MEDIAN",
            "P99",
            "INPUTS/COMMIT",
        ]
        .map(String::from),
    ];
    for r in rows {
        cells.push([
            r.measurement.clone(),
            r.callers.to_string(),
            r.ops.to_string(),
            format!("{:.0}", r.per_second),
            micros(r.median_us),
            micros(r.p99_us),
            r.inputs_per_commit
                .map_or_else(String::new, |n| format!("{n:.1}")),
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, (w, cell)) in widths.iter().zip(row).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Microseconds, readable: ns below 1 µs, ms from 1,000 µs.
#[must_use]
pub fn micros(us: f64) -> String {
    if us >= 1_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else if us >= 1.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.0} ns", us * 1_000.0)
    }
}
