//! The deterministic simulation over many seeds: exactly-once end to end, on idem-store.
//!
//! `IDEM_SIM_SEED=<n>` runs the one seed `n`; `IDEM_SIM_SEEDS=<count>` runs seeds
//! `0..count` instead of the default set; `IDEM_SIM_DIR=<dir>` puts the store files
//! there (default: `/dev/shm` when it exists, else the system's temporary directory).
//! A failure prints its seed, the broken checks and the log of every intent concerned.
//! Run with `--nocapture` to see what each run covered.
//!
//! What the default run covers (measured; each test prints its own totals):
//! - on idem-store, 12 seeds: about 1,300 intents, 4,100 requests (3,000 copies
//!   arriving, 2,200 messages lost, 320 duplicated) and 1,600 faults (350 sender crashes
//!   of which 18 outages past the deadline, 200 receiver crashes that lost 53 executions
//!   in flight, 250 clock jumps, 480 partitions, 220 extra sweeps, failed sales, rolled
//!   back work, executions slower than the lease) over 24 simulated days;
//! - in memory, 100 seeds: about 12,000 intents, 40,000 requests, 13,600 faults over
//!   200 simulated days;
//! - a fleet (three receivers on one store, each with its own skewed clock and crashes):
//!   6 seeds on idem-store and 50 in memory, the same checks;
//! - the deadline guard: a duplicate found with the guard off, none with it on;
//! - the clock floor: with the receiver's clock reset half a day to a day and a half back
//!   for up to half an hour, a duplicate found with the floor off (an outcome settled at
//!   the reset clock expired when the clock was corrected, and a retry within its
//!   deadline ran the effect again), none with it on: seed 2 has the duplicate, and
//!   seeds 0 to 2 with the floor on make 80 claims at a reset clock, all kept.
//!
//! About a minute in a debug build on two cores (half of that on an idle machine).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

mod sim;

use sim::{Backend, Durable, Failure, FaultStats, InMemory, Report, SimConfig};

/// Seeds of the default run on idem-store: about a minute on two cores in a debug build.
const DEFAULT_SEEDS: u64 = 12;
/// Seeds of the default fleet run on idem-store.
const DEFAULT_FLEET_SEEDS: u64 = 6;
/// Seeds of the default run in memory.
const DEFAULT_MEMORY_SEEDS: u64 = 100;
/// The deadline-guard test gives up looking for a duplicate after this many seeds.
const GUARD_SEARCH: u64 = 30;
/// The clock-floor test gives up looking for a duplicate after this many seeds.
const FLOOR_SEARCH: u64 = 30;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// The seeds to run: `IDEM_SIM_SEED`, or `0..IDEM_SIM_SEEDS`, or `0..default`.
fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = env_u64("IDEM_SIM_SEED") {
        return vec![seed];
    }
    (0..env_u64("IDEM_SIM_SEEDS").unwrap_or(default)).collect()
}

fn store_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("IDEM_SIM_DIR") {
        return Some(dir.into());
    }
    // Crashes in the simulation are process crashes, which keep what reached the OS;
    // fsync costs time and checks nothing here (the store's crash tests cover power
    // loss), so use memory-backed files when there are some.
    let shm = PathBuf::from("/dev/shm");
    shm.is_dir().then_some(shm)
}

fn durable() -> Durable {
    Durable::new(store_dir().as_deref())
}

/// One seed's result; a panic inside the harness becomes a failure that names the seed.
type Run = Result<Report, String>;

fn run_one<B: Backend>(seed: u64, config: &SimConfig, backend: impl FnOnce() -> B) -> Run {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        sim::run(seed, config, &mut backend()).map_err(|f: Box<Failure>| f.to_string())
    }));
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(format!(
                "simulation seed {seed} panicked: {message}; rerun with IDEM_SIM_SEED={seed}"
            ))
        }
    }
}

/// Runs `seeds` on every core, in order of seed in the result.
fn run_all<B: Backend>(
    seeds: &[u64],
    config: impl Fn(u64) -> SimConfig + Sync,
    backend: impl Fn() -> B + Sync,
) -> Vec<(u64, Run)> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, usize::from);
    std::thread::scope(|scope| {
        for _ in 0..workers.min(seeds.len()) {
            scope.spawn(|| {
                while let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let run = run_one(seed, &config(seed), &backend);
                    results.lock().unwrap().push((seed, run));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(seed, _)| *seed);
    results
}

/// Prints every report and what the runs covered together; panics with every failure.
fn expect_exactly_once(name: &str, results: &[(u64, Run)], started: Instant) {
    let mut failures = Vec::new();
    let (mut intents, mut requests, mut arrivals, mut days) = (0, 0, 0, 0.0);
    let mut faults = FaultStats::default();
    let (mut dropped, mut duplicated) = (0, 0);
    for (_, run) in results {
        match run {
            Ok(report) => {
                println!("{report}");
                intents += report.traffic.intents;
                requests += report.traffic.attempts;
                arrivals += report.traffic.arrivals;
                faults.add(&report.faults);
                dropped += report.network.dropped + report.network.cut;
                duplicated += report.network.duplicated;
                days += report.simulated_ms as f64 / 86_400_000.0;
            }
            Err(failure) => failures.push(failure.clone()),
        }
    }
    println!(
        "{name}: {} seeds, {intents} intents, {requests} requests ({arrivals} arrivals), {dropped} messages lost, {duplicated} duplicated, {} faults, {days:.1} simulated days in {:.1?}\n  {faults:?}",
        results.len(),
        faults.total(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n")
    );
}

#[test]
fn exactly_once_on_idem_store() {
    let started = Instant::now();
    let results = run_all(&seeds(DEFAULT_SEEDS), SimConfig::for_seed, durable);
    expect_exactly_once("idem-store", &results, started);
}

/// A fleet: three receivers share the store, each request reaches one at random, each
/// receiver has its own skewed clock and crashes on its own. The oracle holds as with
/// one receiver.
#[test]
fn exactly_once_with_a_fleet_on_idem_store() {
    let started = Instant::now();
    let results = run_all(
        &seeds(DEFAULT_FLEET_SEEDS),
        SimConfig::fleet_scenario,
        durable,
    );
    expect_exactly_once("a fleet on idem-store", &results, started);
    let crashes: u64 = results
        .iter()
        .filter_map(|(_, run)| run.as_ref().ok())
        .map(|report| report.faults.replica_crashes)
        .sum();
    assert!(
        crashes > 0,
        "no receiver of a fleet crashed: the runs show nothing"
    );
}

#[test]
fn exactly_once_with_a_fleet_in_memory() {
    let started = Instant::now();
    let results = run_all(
        &seeds(DEFAULT_MEMORY_SEEDS / 2),
        SimConfig::fleet_scenario,
        || InMemory,
    );
    expect_exactly_once("a fleet in memory", &results, started);
}

#[test]
fn exactly_once_in_memory() {
    let started = Instant::now();
    let results = run_all(&seeds(DEFAULT_MEMORY_SEEDS), SimConfig::for_seed, || {
        InMemory
    });
    expect_exactly_once("in memory", &results, started);
}

/// With the deadline guard off, a sender keeps retrying past its deadline; when a retry
/// arrives after the receiver forgot the key (its retention ended and a sweep removed
/// it), the effect runs twice. The search must find such a seed; with the guard on, the
/// same seeds (and at least two) keep every promise, their stuck intents expiring instead.
#[test]
fn the_deadline_guard_is_load_bearing() {
    let started = Instant::now();
    let mut found = None;
    for seed in 0..GUARD_SEARCH {
        let config = SimConfig::deadline_scenario(seed, false);
        match sim::run(seed, &config, &mut durable()) {
            Err(failure) if failure.violations.iter().any(|v| v.check == "at-most-once") => {
                found = Some(failure);
                break;
            }
            Err(failure) => {
                panic!("unguarded seed {seed} failed other than by a duplicate:\n{failure}")
            }
            Ok(_) => {}
        }
    }
    let failure = found.unwrap_or_else(|| {
        panic!("no seed in 0..{GUARD_SEARCH} ran an effect twice with the deadline guard off")
    });
    let duplicate = failure
        .violations
        .iter()
        .find(|v| v.check == "at-most-once")
        .expect("found by check");
    println!("guard off, seed {}: {duplicate}", failure.seed);

    let guarded: Vec<u64> = (0..(failure.seed + 1).max(2)).collect();
    let results = run_all(
        &guarded,
        |seed| SimConfig::deadline_scenario(seed, true),
        durable,
    );
    let expired: u64 = results
        .iter()
        .filter_map(|(_, run)| run.as_ref().ok())
        .map(|r| r.tally.expired_ran + r.tally.expired_not_run)
        .sum();
    expect_exactly_once("deadline guard on", &results, started);
    assert!(
        expired > 0,
        "with the guard on, intents must expire instead"
    );
}

/// Tombstones are a layer of their own: the seeds that run an effect twice with the
/// deadline guard off keep every promise when the receiver keeps tombstones, the late
/// retries answered 410 Gone and their intents expired for reconciliation.
#[test]
fn tombstones_stop_the_late_retry_the_deadline_guard_stops() {
    let started = Instant::now();
    let duplicated: Vec<u64> = (0..GUARD_SEARCH)
        .filter(|&seed| {
            let config = SimConfig::deadline_scenario(seed, false);
            sim::run(seed, &config, &mut durable())
                .is_err_and(|f| f.violations.iter().any(|v| v.check == "at-most-once"))
        })
        .take(2)
        .collect();
    assert!(
        !duplicated.is_empty(),
        "no seed in 0..{GUARD_SEARCH} ran an effect twice with the deadline guard off"
    );
    let results = run_all(
        &duplicated,
        |seed| SimConfig::deadline_scenario(seed, false).with_tombstones(),
        durable,
    );
    expect_exactly_once("guard off, tombstones on", &results, started);
    let expired: u64 = results
        .iter()
        .filter_map(|(_, run)| run.as_ref().ok())
        .map(|r| r.tally.expired_ran)
        .sum();
    assert!(
        expired > 0,
        "the late retries must have met tombstones and expired their intents"
    );
}

/// With the clock floor off, a receiver whose clock was reset far back settles outcomes
/// that expire early: once the clock is corrected, a retry still within its sender's
/// deadline finds the outcome expired (or swept) and runs the effect again. The search
/// must find such a seed; with the floor on, the same seeds (and at least two) keep every
/// promise, with claims made while the clock was reset. A few seconds in a debug build.
#[test]
fn the_clock_floor_is_load_bearing() {
    let started = Instant::now();
    let mut found = None;
    for seed in 0..FLOOR_SEARCH {
        let config = SimConfig::clock_reset_scenario(seed, false);
        match sim::run(seed, &config, &mut durable()) {
            Err(failure) if failure.violations.iter().any(|v| v.check == "at-most-once") => {
                found = Some(failure);
                break;
            }
            Err(failure) => {
                panic!("unfloored seed {seed} failed other than by a duplicate:\n{failure}")
            }
            Ok(_) => {}
        }
    }
    let failure = found.unwrap_or_else(|| {
        panic!("no seed in 0..{FLOOR_SEARCH} ran an effect twice with the clock floor off")
    });
    let duplicate = failure
        .violations
        .iter()
        .find(|v| v.check == "at-most-once")
        .expect("found by check");
    println!("floor off, seed {}: {duplicate}", failure.seed);

    let floored: Vec<u64> = (0..(failure.seed + 1).max(2)).collect();
    let results = run_all(
        &floored,
        |seed| SimConfig::clock_reset_scenario(seed, true),
        durable,
    );
    let claims_in_reset: u64 = results
        .iter()
        .filter_map(|(_, run)| run.as_ref().ok())
        .map(|r| r.faults.claims_in_reset)
        .sum();
    expect_exactly_once("clock floor on", &results, started);
    assert!(
        claims_in_reset > 0,
        "with the floor on, the receiver must have claimed keys while its clock was reset"
    );
}
