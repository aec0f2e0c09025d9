//! idem-store side by side with SQLite, in one run on this machine, with the ratios the
//! project's targets are stated in.
//!
//! `cargo bench -p idem-bench --bench compare --features sqlite [-- --ops N]` (default
//! 300 keys per caller, 100,000 records). Files go to a temporary directory under
//! `IDEM_BENCH_DIR` (default: the system's), which should be on the disk of interest.
//! Prints figures only: nothing here asserts a speed.

use std::error::Error;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use idem_bench::floor::{self, FloorPlan};
use idem_bench::io::{self, IoPlan, IoRow};
use idem_bench::measure::{BenchError, KeySequence, Row, Timing, measure, micros, table};
use idem_bench::sqlite::{Begun, Request, SqliteStore, Synchronous, wal_bytes};
use idem_bench::store::{self, Plan, Report};
use idem_core::Fingerprint;

const NOW: i64 = 1_750_000_000_000;

/// The records idem's sweep deletes per transaction, which SQLite's sweep takes too.
const SWEEP_BATCH: usize = 256;

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let ops = ops_argument()?;
    let plan = Plan::for_ops(ops);
    let base = std::env::var_os("IDEM_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(base)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "idem-bench compare: {cores} cores, load average {} at the start, files in {}; {} keys per caller, callers {:?}, {} records",
        load_average(),
        dir.path().display(),
        plan.keys_per_caller,
        plan.callers,
        plan.records
    );
    let started = Instant::now();
    let idem = store::run(dir.path(), &plan, &mut |step| eprintln!("  idem: {step}"))?;
    let sqlite = sqlite_rows(dir.path(), &plan)?;
    eprintln!("  bare redb commits");
    let floors = floor::rows(dir.path(), FloorPlan::default())?;
    let mut rows = idem.rows.clone();
    rows.extend(sqlite.rows.iter().cloned());
    rows.extend(floors);
    println!();
    print!("{}", table(&rows));
    println!("{}", idem.file);
    println!(
        "SQLite after {} rows: {} bytes, {:.0} bytes per row (after a WAL checkpoint); filled at {:.0} rows/s (64 per transaction, FULL)",
        sqlite.records, sqlite.file_bytes, sqlite.bytes_per_row, sqlite.fill_per_second
    );
    println!(
        "SQLite sweep of {} expired rows: {:.0} ms ({} per transaction, FULL)",
        sqlite.records, sqlite.sweep_ms, SWEEP_BATCH
    );
    eprintln!("  disk calls per commit (counted)");
    let io_plan = IoPlan::default();
    let io_rows = io::run(dir.path(), io_plan)?;
    let layout = io::layout(dir.path(), io_plan)?;
    let wal = sqlite_wal(dir.path(), io_plan)?;
    println!();
    print!("{}", io::io_table(&io_rows));
    print!("{}", io::layout_table(&layout));
    println!(
        "SQLite WAL FULL, bytes appended to the WAL per commit (checkpoints off, {} commits after {}): execute {:.0}, begin + complete {:.0}; one fsync per commit",
        io_plan.inputs, io_plan.warm_up, wal[0], wal[1]
    );
    println!();
    targets(&idem, &rows);
    io_targets(&io_rows, wal);
    println!(
        "\nwhole run: {:.0} s, load average {} at the end",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}

/// The 1-minute load average (Linux), since other work on the machine moves every
/// figure; "?" where unknown.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// `--ops N` among cargo's own arguments (`--bench`), else 300.
fn ops_argument() -> Result<u32, Box<dyn Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--ops") {
        Some(i) => {
            let value = args.get(i + 1).ok_or("--ops needs a number")?;
            let ops: u32 = value.parse().map_err(|e| format!("--ops {value}: {e}"))?;
            if ops == 0 {
                return Err("--ops: 0, must be at least 1".into());
            }
            Ok(ops)
        }
        None => Ok(300),
    }
}

/// The bytes SQLite WAL FULL appends to its WAL per commit, with checkpoints off: one
/// execute per transaction, then begin + complete (two transactions per key).
fn sqlite_wal(dir: &Path, plan: IoPlan) -> Result<[f64; 2], BenchError> {
    let outcome = vec![b'x'; 64];
    let fp = Fingerprint::of_bytes(b"sqlite").0;
    let keys = KeySequence::default();
    let mut per_commit = [0.0; 2];
    for (i, two_phase) in [false, true].into_iter().enumerate() {
        let path = dir.join(format!("sqlite-wal-{i}.db"));
        let mut db = SqliteStore::open(&path, Synchronous::Full)?;
        db.without_checkpoints()?;
        let one = |db: &mut SqliteStore| -> Result<(), BenchError> {
            let key = keys.next("wal-");
            let request = request(&key, &fp);
            if two_phase {
                let Begun::Claimed(generation) = db.begin(&request)? else {
                    return Err(format!("{key} was not claimable").into());
                };
                db.complete(&request, generation, 200, &outcome)?;
            } else if !db.execute(&request, 200, &outcome)? {
                return Err(format!("{key} did not run").into());
            }
            Ok(())
        };
        for _ in 0..plan.warm_up {
            one(&mut db)?;
        }
        let before = wal_bytes(&path)?;
        for _ in 0..plan.inputs {
            one(&mut db)?;
        }
        let commits = f64::from(plan.inputs) * if two_phase { 2.0 } else { 1.0 };
        per_commit[i] = (wal_bytes(&path)? - before) as f64 / commits;
    }
    Ok(per_commit)
}

/// The bytes target: a single-input commit writes at most twice SQLite's WAL bytes.
fn io_targets(rows: &[IoRow], wal: [f64; 2]) {
    let find = |id: &str| rows.iter().find(|r| r.id == id);
    for (id, what, sqlite) in [
        (
            "io_execute_journal",
            "execute, single process, synced (journal)",
            wal[0],
        ),
        (
            "io_execute_single_process",
            "execute, single process without the journal",
            wal[0],
        ),
        ("io_execute", "execute, multi-process mode", wal[0]),
        (
            "io_two_phase",
            "begin + complete, multi-process mode",
            wal[1],
        ),
    ] {
        let Some(row) = find(id) else { continue };
        let ratio = row.bytes_per_commit() / sqlite;
        println!(
            "  bytes written per commit / SQLite WAL's, {what}: {:.0} / {sqlite:.0} = {ratio:.2}x (target <= 2x): {}",
            row.bytes_per_commit(),
            if ratio <= 2.0 { "met" } else { "NOT met" }
        );
    }
}

/// The SQLite figures.
struct SqliteFigures {
    rows: Vec<Row>,
    records: u64,
    file_bytes: u64,
    bytes_per_row: f64,
    fill_per_second: f64,
    sweep_ms: f64,
}

/// One connection per caller, each behind its own (uncontended) lock, since a
/// connection is not shared between threads.
fn connections(
    path: &Path,
    sync: Synchronous,
    callers: u32,
) -> Result<Vec<Mutex<SqliteStore>>, BenchError> {
    (0..callers)
        .map(|_| Ok(Mutex::new(SqliteStore::open(path, sync)?)))
        .collect()
}

fn request<'a>(key: &'a str, fingerprint: &'a [u8; 32]) -> Request<'a> {
    Request {
        tenant: "bench",
        operation: "sqlite",
        key,
        fingerprint,
        now: NOW,
    }
}

/// The same protocol as idem's rows: begin + complete (two transactions) and the
/// atomic path (one), at one caller and at the plan's most callers.
fn sqlite_rows(dir: &Path, plan: &Plan) -> Result<SqliteFigures, BenchError> {
    let most = plan.callers.iter().copied().max().unwrap_or(1);
    let outcome = vec![b'x'; 64];
    let mut rows = Vec::new();
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let path = dir.join(format!("sqlite-{}.db", sync.pragma()));
        for callers in [1, most] {
            // With one writer at a time and no shared commits, more callers only wait:
            // the same keys in all, spread over them (NORMAL, being fast, gets 4 times
            // as many).
            let total = match sync {
                Synchronous::Full => plan.keys_per_caller,
                Synchronous::Normal => plan.keys_per_caller.saturating_mul(4),
            };
            let per_caller = if callers == 1 {
                total
            } else {
                total.div_ceil(callers).max(1)
            };
            eprintln!("  sqlite {}: {callers} callers", sync.pragma());
            let conns = connections(&path, sync, callers)?;
            let fp = Fingerprint::of_bytes(b"sqlite").0;
            let keys = KeySequence::default();
            let two_phase = measure(callers, per_caller, |caller, _| {
                let key = keys.next(&format!("2p-{callers}-"));
                let mut db = conns[caller as usize].lock().map_err(|_| "poisoned")?;
                let request = request(&key, &fp);
                let Begun::Claimed(generation) = db.begin(&request)? else {
                    return Err(format!("{key} was not claimable").into());
                };
                if !db.complete(&request, generation, 200, &outcome)? {
                    return Err(format!("{key}: stale").into());
                }
                Ok(())
            })?;
            rows.push(row(
                "sqlite_two_phase",
                sync,
                "begin + complete",
                callers,
                &two_phase,
            ));
            let execute = measure(callers, per_caller, |caller, _| {
                let key = keys.next(&format!("ex-{callers}-"));
                let mut db = conns[caller as usize].lock().map_err(|_| "poisoned")?;
                if !db.execute(&request(&key, &fp), 200, &outcome)? {
                    return Err(format!("{key} did not run").into());
                }
                Ok(())
            })?;
            rows.push(row(
                "sqlite_execute",
                sync,
                "claim + settle in one transaction",
                callers,
                &execute,
            ));
        }
    }

    // Size, lookups and sweep on as many rows as idem's file holds.
    eprintln!("  sqlite: {} rows", plan.records);
    let path = dir.join("sqlite-records.db");
    let mut db = SqliteStore::open(&path, Synchronous::Full)?;
    let fp = Fingerprint::of_bytes(b"record").0;
    let start = Instant::now();
    db.fill(&request("sale-", &fp), plan.records, 64, &outcome)?;
    let fill = start.elapsed();
    db.checkpoint()?;
    let file_bytes = std::fs::metadata(&path)?.len();
    let records = u64::from(plan.records.max(1));
    let keys: Vec<String> = (0..plan.lookups.max(1))
        .map(|n| format!("sale-{:08}", n.wrapping_mul(7_919) % plan.records.max(1)))
        .collect();
    // A connection cannot cross threads, so this one loop is timed here, as `measure`
    // times one caller.
    let mut calls = Vec::with_capacity(keys.len());
    let start = Instant::now();
    for key in &keys {
        let one = Instant::now();
        match db.lookup(&request(key, &fp))? {
            Some(stored) if stored.state == "succeeded" => {}
            other => return Err(format!("{key}: {other:?}").into()),
        }
        calls.push(one.elapsed());
    }
    let lookups = Timing {
        total: start.elapsed(),
        calls,
    };
    rows.push(Row::new(
        "sqlite_lookup",
        "SQLite lookup of a settled key (prepared SELECT)",
        1,
        &lookups,
    ));
    let start = Instant::now();
    let swept = db.sweep(NOW + db.retention_ms() + 1, SWEEP_BATCH)?;
    let sweep = start.elapsed();
    if swept != records {
        return Err(format!("SQLite swept {swept} of {records} rows").into());
    }
    Ok(SqliteFigures {
        rows,
        records,
        file_bytes,
        bytes_per_row: file_bytes as f64 / records as f64,
        fill_per_second: records as f64 / fill.as_secs_f64().max(1e-9),
        sweep_ms: sweep.as_secs_f64() * 1e3,
    })
}

fn row(id: &'static str, sync: Synchronous, what: &str, callers: u32, timing: &Timing) -> Row {
    let id = match (id, sync) {
        ("sqlite_two_phase", Synchronous::Full) => "sqlite_two_phase_full",
        ("sqlite_two_phase", Synchronous::Normal) => "sqlite_two_phase_normal",
        ("sqlite_execute", Synchronous::Full) => "sqlite_execute_full",
        (_, _) => "sqlite_execute_normal",
    };
    Row::new(
        id,
        &format!("SQLite WAL {}: {what}", sync.pragma()),
        callers,
        timing,
    )
}

/// The ratios of the targets, each with whether it is met.
fn targets(idem: &Report, rows: &[Row]) {
    let find = |id: &str, callers: u32| rows.iter().find(|r| r.id == id && r.callers == callers);
    let best = |id: &str| {
        rows.iter()
            .filter(|r| r.id == id)
            .max_by(|a, b| a.per_second.total_cmp(&b.per_second))
    };
    let rate = |r: Option<&Row>| r.map_or(f64::NAN, |r| r.per_second);
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let most = idem.plan.callers.iter().copied().max().unwrap_or(1);
    println!("targets (ratios of rates from this run)");
    for (what, grouped, alone) in [
        ("execute", "execute_grouped", "execute"),
        ("begin + complete", "two_phase", "two_phase"),
    ] {
        let ratio = rate(find(grouped, most)) / rate(find(alone, 1));
        println!(
            "  group commit at {most} callers / one input per transaction, {what}: {ratio:.1}x (target >= 10x): {}",
            verdict(ratio >= 10.0)
        );
    }
    for (what, grouped, sqlite) in [
        ("execute", "execute_grouped", "sqlite_execute_normal"),
        ("begin + complete", "two_phase", "sqlite_two_phase_normal"),
        (
            "execute, single process",
            "execute_grouped_single_process",
            "sqlite_execute_normal",
        ),
    ] {
        let baseline = best(sqlite);
        let ratio = rate(find(grouped, most)) / rate(baseline);
        println!(
            "  group commit at {most} callers / SQLite WAL NORMAL (its best, at {} callers), {what}: {ratio:.2}x (target >= 5x): {}",
            baseline.map_or(0, |r| r.callers),
            verdict(ratio >= 5.0)
        );
    }
    // redb's two-phase commit of the multi-process modes costs a second fsync.
    for (what, alone, sqlite, target) in [
        ("execute", "execute", "sqlite_execute_full", 0.6),
        (
            "begin + complete",
            "two_phase",
            "sqlite_two_phase_full",
            0.6,
        ),
        (
            "execute, single process",
            "execute_single_process",
            "sqlite_execute_full",
            1.0,
        ),
        (
            "execute, single process without the journal",
            "execute_single_process_no_journal",
            "sqlite_execute_full",
            1.0,
        ),
    ] {
        let ratio = rate(find(alone, 1)) / rate(find(sqlite, 1));
        println!(
            "  one input per transaction / SQLite WAL FULL, {what}, 1 caller: {ratio:.2}x (target >= {target}x): {}",
            verdict(ratio >= target)
        );
    }
    for (id, what, target) in [
        ("replay_begin", "begin on a settled key", 2.0),
        ("get", "get", 5.0),
        ("get_uncached", "get, replay cache off", 5.0),
        (
            "replay_begin_exclusive",
            "begin on a settled key, single process",
            2.0,
        ),
        ("get_exclusive", "get, single process", 2.0),
        (
            "get_uncached_exclusive",
            "get, replay cache off, single process",
            2.0,
        ),
    ] {
        let median = find(id, 1).map_or(f64::NAN, |r| r.median_us);
        println!(
            "  replay lookup median, {what}: {} (target <= {target} µs): {}",
            micros(median),
            verdict(median <= target)
        );
    }
    if let (Some(idem), Some(sqlite)) = (
        find("execute_no_fsync", 1),
        find("sqlite_execute_normal", 1),
    ) {
        println!(
            "  execute without fsync, median: {} (target <= 25 µs): {}; SQLite WAL NORMAL {} ({:.2}x, target >= 2.5x)",
            micros(idem.median_us),
            verdict(idem.median_us <= 25.0),
            micros(sqlite.median_us),
            sqlite.median_us / idem.median_us
        );
    }
    if let (Some(alone), Some(grouped)) = (
        find("execute_no_fsync", 1),
        find("execute_grouped_no_fsync", 1),
    ) {
        println!(
            "  group commit overhead at 1 caller without fsync: median {} vs {} ({:+.1} µs per call)",
            micros(grouped.median_us),
            micros(alone.median_us),
            grouped.median_us - alone.median_us
        );
    }
    floors(rows);
    if let Some(fsync) = find("fsync", 1) {
        println!(
            "  this disk's fsync: median {}, p99 {}",
            micros(fsync.median_us),
            micros(fsync.p99_us)
        );
    }
    if let (Some(contiguous), Some(scattered)) =
        (find("fsync-contiguous", 1), find("fsync-scattered", 1))
    {
        println!(
            "  a sync after 8 pages: {} contiguous (as a WAL appends), {} scattered (as a B-tree commit writes): {:.1}x",
            micros(contiguous.median_us),
            micros(scattered.median_us),
            scattered.median_us / contiguous.median_us
        );
    }
}

/// The bare redb commits beside the targets they bound: a store's commit on redb does at
/// least what the bare one does, so a floor's ratio is the most any store on redb could
/// reach in this run.
fn floors(rows: &[Row]) {
    let find = |id: &str| rows.iter().find(|r| r.id == id && r.callers == 1);
    let best = |id: &str| {
        rows.iter()
            .filter(|r| r.id == id)
            .max_by(|a, b| a.per_second.total_cmp(&b.per_second))
    };
    // A bare row's rate is in commits, and a group row's commits carry several inputs;
    // the store's rows are already in inputs.
    let floor_rate = |r: Option<&Row>| {
        r.map_or(f64::NAN, |r| {
            r.per_second * r.inputs_per_commit.unwrap_or(1.0)
        })
    };
    let rate = |r: Option<&Row>| r.map_or(f64::NAN, |r| r.per_second);
    println!("floors: bare redb commits, no store code (the most a store on redb could reach)");
    let full = rate(find("sqlite_execute_full"));
    for (floor, what, store, target) in [
        (
            "redb_floor_multi_1",
            "1 entry into 1 table, multi-process",
            "execute",
            0.6,
        ),
        (
            "redb_floor_multi_2",
            "1 entry into each of 2 tables, multi-process",
            "execute",
            0.6,
        ),
        (
            "redb_floor_single_2",
            "1 entry into each of 2 tables, single process",
            "execute_single_process_no_journal",
            1.0,
        ),
    ] {
        println!(
            "  one commit / SQLite WAL FULL, {what}: {:.2}x (the store: {:.2}x; target >= {target}x)",
            floor_rate(find(floor)) / full,
            rate(find(store)) / full,
        );
    }
    // Begin + complete is two commits per key, as SQLite's two transactions are.
    println!(
        "  two commits / SQLite WAL FULL begin + complete, 1 entry into each of 2 tables, multi-process: {:.2}x (the store: {:.2}x; target >= 0.6x)",
        floor_rate(find("redb_floor_multi_2")) / 2.0 / rate(find("sqlite_two_phase_full")),
        rate(find("two_phase")) / rate(find("sqlite_two_phase_full")),
    );
    let normal = rate(best("sqlite_execute_normal"));
    for (floor, what, store) in [
        (
            "redb_floor_group_multi_2",
            "multi-process",
            "execute_grouped",
        ),
        (
            "redb_floor_group_single_2",
            "single process",
            "execute_grouped_single_process",
        ),
    ] {
        let most = rows
            .iter()
            .filter(|r| r.id == store)
            .max_by_key(|r| r.callers);
        println!(
            "  {} inputs per commit / SQLite WAL NORMAL (its best), 2 tables, {what}: {:.2}x in inputs per second (the store at {} callers: {:.2}x; target >= 5x)",
            floor::GROUP,
            floor_rate(find(floor)) / normal,
            most.map_or(0, |r| r.callers),
            most.map_or(f64::NAN, |r| r.per_second) / normal,
        );
    }
    if let Some(bare) = find("redb_floor_no_fsync_2") {
        let store = find("execute_no_fsync").map_or(f64::NAN, |r| r.median_us);
        println!(
            "  one commit without fsync, 2 tables: median {} (the store's execute: {}, {} above it; target <= 25 µs)",
            micros(bare.median_us),
            micros(store),
            micros(store - bare.median_us),
        );
    }
}
