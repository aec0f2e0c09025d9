//! Power cuts under the store: the store runs on a simulated disk (`common/disk.rs`)
//! that keeps what was synced apart from what was only written; at every sync of a run,
//! and at random writes, the power is cut, and the store is reopened from the bytes that
//! survive (none, all, or a subset, torn at sector boundaries, of the unsynced writes).
//!
//! After every cut: the store opens, `check` finds nothing wrong, every answer given
//! before the cut is there, nothing half-done is visible (the tables hold exactly the
//! contents after the last answered step, or after the step in flight), the generation
//! counter never goes back, and the store writes again. Runs alternate between the
//! multi-process mode a store file uses (two-phase commits) and the exclusive mode of a
//! store on a backend (one-phase, checksummed commits).
//!
//! `IDEM_POWER_CUTS` sets how many distinct surviving images are checked (default
//! 10,000; the group-commit test checks an eighth as many). A failure names its seed and
//! run: `IDEM_SEED=<seed> IDEM_POWER_RUN=<run>` repeats that run alone (the group-commit
//! runs only as far as their threads' interleaving repeats).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::disk::{Cut, IoKind, SECTOR, SimDisk, Survival};
use crate::common::workload::{self, Contents, START, Workload, contents, credit, generation_in};
use crate::common::{Rng, accounts, fp, id, seed};
use idem_store::redb::ConcurrencyMode;
use idem_store::{ExecuteError, Executed, ListFilter, OpenError, State, Status, Timestamp};

/// Distinct surviving images checked by default.
const DEFAULT_CUTS: u64 = 10_000;
/// Store calls per run of the workload.
const STEPS: usize = 60;
/// Of the writes, the share at which a cut is also recorded (per 65,536).
const WRITE_CUTS: u64 = 4_096;

fn target() -> u64 {
    std::env::var("IDEM_POWER_CUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CUTS)
}

fn mode_of(run: u64) -> ConcurrencyMode {
    if run.is_multiple_of(2) {
        ConcurrencyMode::MultiWriter
    } else {
        ConcurrencyMode::ExclusiveWriter
    }
}

/// The seed of run `run` of a test seeded with `seed`.
fn run_seed(seed: u64, run: u64) -> u64 {
    Rng::new(seed ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64()
}

fn fingerprint_of(image: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    image.hash(&mut hasher);
    hasher.finish()
}

/// The survivals worth trying at `cut`: with nothing pending they are all the same.
fn survivals(cut: &Cut) -> Vec<Survival> {
    if cut.has_pending() {
        vec![
            Survival::Nothing,
            Survival::Everything,
            Survival::InOrder,
            Survival::Random,
            Survival::Random,
        ]
    } else {
        vec![Survival::Nothing]
    }
}

/// What the runs of a test counted.
#[derive(Default)]
struct Counts {
    runs: AtomicU64,
    points: AtomicU64,
    images: AtomicU64,
    second_cuts: AtomicU64,
    // The most inputs one group commit took, over the group-commit runs.
    largest_batch: AtomicU64,
}

impl Counts {
    fn done(&self, target: u64) -> bool {
        self.images.load(Ordering::Relaxed) >= target
    }
}

/// Runs `run` on two threads, run after run, until `target` images were checked; with
/// `IDEM_POWER_RUN`, that run alone.
fn run_until(target: u64, counts: &Counts, run: impl Fn(u64) + Sync) {
    if let Some(only) = std::env::var("IDEM_POWER_RUN")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        run(only);
        return;
    }
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                // A failing run stops the other thread too, once its run ends.
                let _stop = StopOnPanic(&failed);
                while !counts.done(target) && !failed.load(Ordering::Relaxed) {
                    run(next.fetch_add(1, Ordering::Relaxed));
                }
            });
        }
    });
}

struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

#[test]
fn power_cuts_lose_nothing_answered_and_show_nothing_half_done() {
    cut_runs("power_cuts", "power cuts", target(), false);
}

/// The same workload on a store whose commits go through its journal (one-phase
/// commits synced in the journal alone, the store's disk synced at checkpoints, here
/// every few commits): cuts of both disks at once, the journal's records torn or lost
/// like any write, and recoveries that replay the journal cut again.
#[test]
fn power_cuts_under_the_journal_lose_nothing_answered() {
    cut_runs(
        "power_cuts_journal",
        "journal power cuts",
        target() / 2,
        true,
    );
}

/// Runs of the workload (`journaled` or not) until `target` images were checked, seeded
/// from `name`; prints what was checked under `label`.
fn cut_runs(name: &str, label: &str, target: u64, journaled: bool) {
    let (counts, took) = checked_runs(name, target, |seed, run, counts| {
        workload_run(seed, run, counts, journaled)
    });
    eprintln!(
        "{label}: {} images checked (plus {} second cuts during recovery) from {} cut moments of {} runs of {STEPS} steps, in {took:.1?}",
        counts.images.load(Ordering::Relaxed),
        counts.second_cuts.load(Ordering::Relaxed),
        counts.points.load(Ordering::Relaxed),
        counts.runs.load(Ordering::Relaxed),
    );
}

/// Runs `run` (given the test's seed, from `name`, and the run's number) until `target`
/// images were checked, and asserts that some were; returns the counts and the time.
fn checked_runs(
    name: &str,
    target: u64,
    run: impl Fn(u64, u64, &Counts) + Sync,
) -> (Counts, Duration) {
    let seed = seed(name);
    let counts = Counts::default();
    let started = Instant::now();
    run_until(target, &counts, |n| run(seed, n, &counts));
    assert!(counts.images.load(Ordering::Relaxed) >= target.min(1));
    (counts, started.elapsed())
}

/// One run of the workload on a fresh disk (with `journaled`, a fresh pair), with every
/// recorded cut checked against the contents before and after the step it fell in.
fn workload_run(seed: u64, run: u64, counts: &Counts, journaled: bool) {
    let run_seed = run_seed(seed, run);
    let (store, disk, blank, mode) = fresh_store(run, journaled);
    // Cuts while a store is created are the subject of their own test.
    disk.record_cuts(Rng::new(run_seed ^ 1), WRITE_CUTS);
    let mut rng = Rng::new(run_seed ^ 2);
    let mut workload = Workload::new(store, run_seed);
    let mut before = contents(&workload.store);
    for step in 0..STEPS {
        let name = workload
            .step()
            .unwrap_or_else(|f| panic!("seed {seed}, run {run}, step {step}: {f:?}"));
        let after = contents(&workload.store);
        let mut seen = HashSet::new();
        for (i, cut) in disk.take_cuts().into_iter().enumerate() {
            counts.points.fetch_add(1, Ordering::Relaxed);
            for survival in survivals(&cut) {
                let image = blank.of(&cut, survival, &mut rng);
                if !seen.insert(fingerprint_of(&image)) {
                    continue;
                }
                let context = format!(
                    "seed {seed} (IDEM_SEED={seed} IDEM_POWER_RUN={run}), run {run} in {mode}, step {step} ({name}), cut {i} ({}), {survival:?}",
                    if cut.at_sync {
                        "at a sync"
                    } else {
                        "at a write"
                    }
                );
                recover(image, &[&before, &after], &context, &mut rng, counts);
                counts.images.fetch_add(1, Ordering::Relaxed);
            }
        }
        before = after;
    }
    counts.runs.fetch_add(1, Ordering::Relaxed);
}

/// A store for run `run` on a fresh disk, or with `journaled` a fresh pair: the store,
/// the disk whose list keeps the cuts, an empty image of the same kind, and the name of
/// what it runs on for failure messages.
fn fresh_store(run: u64, journaled: bool) -> (idem_store::Store, SimDisk, Image, String) {
    let mode = mode_of(run);
    let (store, disk, blank) = if journaled {
        let (disk, journal) = SimDisk::pair(Vec::new(), Vec::new());
        let store = open_journaled(disk.clone(), journal).unwrap();
        let blank = Image::Journaled {
            main: Vec::new(),
            journal: Vec::new(),
        };
        (store, disk, blank)
    } else {
        let disk = SimDisk::default();
        let store = workload::open(disk.clone(), mode).unwrap();
        (store, disk, Image::Alone(Vec::new(), mode))
    };
    let mode = if journaled {
        "the journal".to_string()
    } else {
        format!("{mode:?}")
    };
    (store, disk, blank, mode)
}

/// What survived a cut: a store's disk, opened in a mode, or a store's disk and its
/// journal's.
enum Image {
    Alone(Vec<u8>, ConcurrencyMode),
    Journaled { main: Vec<u8>, journal: Vec<u8> },
}

impl Hash for Image {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Image::Alone(image, _) => image.hash(state),
            Image::Journaled { main, journal } => (main, journal).hash(state),
        }
    }
}

impl Image {
    /// What survives `cut` of a disk like this one's, when `survival` decides.
    fn of(&self, cut: &Cut, survival: Survival, rng: &mut Rng) -> Image {
        match self {
            Image::Alone(_, mode) => Image::Alone(cut.image(survival, rng), *mode),
            Image::Journaled { .. } => Image::Journaled {
                main: cut.image(survival, rng),
                journal: cut
                    .journal_image(survival, rng)
                    .expect("a cut of a journaled store records its journal"),
            },
        }
    }

    /// A store on these bytes, and the disk whose list keeps the cuts.
    fn open(&self, record: Option<Rng>) -> Result<(idem_store::Store, SimDisk), OpenError> {
        let (store, disk) = match self {
            Image::Alone(image, mode) => {
                let disk = SimDisk::from_image(image.clone());
                if let Some(rng) = record {
                    disk.record_cuts(rng, 16_384);
                }
                (workload::open(disk.clone(), *mode), disk)
            }
            Image::Journaled { main, journal } => {
                let (disk, journal) = SimDisk::pair(main.clone(), journal.clone());
                if let Some(rng) = record {
                    disk.record_cuts(rng, 16_384);
                }
                (open_journaled(disk.clone(), journal), disk)
            }
        };
        Ok((store?, disk))
    }
}

/// A store on `main` with its journal on `journal`, which checkpoints after a few
/// commits (its smallest limit), so that runs cut checkpoints too.
fn open_journaled(main: SimDisk, journal: SimDisk) -> Result<idem_store::Store, OpenError> {
    idem_store::Store::builder()
        .config(workload::config())
        .journal_limit(0)
        .open_on_backend_with_journal(main, journal)
}

/// Opens the store on what survived a cut and checks it: it opens, `check` passes, its
/// contents are one of `allowed`, and it writes again with a new generation. One
/// recovery in eight is itself cut, at a random moment, and that image checked too.
fn recover(image: Image, allowed: &[&Contents], context: &str, rng: &mut Rng, counts: &Counts) {
    let cut_again = rng.below(8) == 0;
    let (store, disk) = image
        .open(cut_again.then(|| Rng::new(rng.next_u64())))
        .unwrap_or_else(|e| panic!("{context}: the store does not open after the cut: {e}"));
    let report = store
        .check()
        .unwrap_or_else(|e| panic!("{context}: check failed: {e}"));
    assert!(
        report.is_ok(),
        "{context}: check found {:?}",
        report.problems
    );
    if cut_again {
        disk.stop_recording();
        let cuts = disk.take_cuts();
        if !cuts.is_empty() {
            let cut = &cuts[rng.below(cuts.len() as u64) as usize];
            let survival = Survival::ALL[rng.below(4) as usize];
            let again = image.of(cut, survival, rng);
            let context = format!("{context}, then cut again while recovering ({survival:?})");
            let (store, _) = again.open(None).unwrap_or_else(|e| {
                panic!("{context}: the store does not open after the second cut: {e}")
            });
            let report = store.check().unwrap();
            assert!(
                report.is_ok(),
                "{context}: check found {:?}",
                report.problems
            );
            expect_one_of(&contents(&store), allowed, &context);
            counts.second_cuts.fetch_add(1, Ordering::Relaxed);
        }
    }
    let found = contents(&store);
    expect_one_of(&found, allowed, context);
    // The store writes again, above every generation it holds.
    let key = "written-after-the-cut";
    let ran = store.execute(
        &id("shop", "after", key),
        fp(key),
        Timestamp(START + 100_000_000),
        |txn| credit(txn, key, false),
    );
    match ran {
        Ok(Executed::Ran { record, .. }) => assert!(
            record.generation.0 > generation_in(&found),
            "{context}: generation {} after the cut, counter {}",
            record.generation,
            generation_in(&found)
        ),
        other => panic!("{context}: a write after the cut: {other:?}"),
    }
}

fn expect_one_of(found: &Contents, allowed: &[&Contents], context: &str) {
    if allowed.contains(&found) {
        return;
    }
    let mut why = String::new();
    for (i, candidate) in allowed.iter().enumerate() {
        why.push_str(&format!("\n  against candidate {i}:"));
        let names: BTreeSet<&String> = found.keys().chain(candidate.keys()).collect();
        for name in names {
            let (a, b) = (found.get(name), candidate.get(name));
            if a != b {
                why.push_str(&format!(
                    "\n    {name}: found {} entries, expected {}",
                    a.map_or(0, Vec::len),
                    b.map_or(0, Vec::len)
                ));
            }
        }
    }
    panic!("{context}: the tables after the cut match no state the store answered for:{why}");
}

/// Threads that execute at once through group commit; a cut's tag says how many of
/// their answers were given before it.
#[test]
fn power_cuts_under_group_commit_lose_no_answer() {
    grouped_runs(
        "power_cuts_group_commit",
        "group commit",
        target() / 8,
        false,
    );
}

/// The same behind the journal, where a batch's pages go to the store file unsynced and
/// only its journal record is synced before its callers are answered: every answer
/// survives, and the store opens after every cut, with the journal's checkpoints every
/// few batches cut too.
#[test]
fn power_cuts_under_group_commit_behind_the_journal_lose_no_answer() {
    grouped_runs(
        "power_cuts_group_commit_journal",
        "group commit behind the journal",
        target() / 2,
        true,
    );
}

/// Runs of [`grouped_run`] until `target` images were checked, seeded from `name`;
/// prints what was checked under `label`.
fn grouped_runs(name: &str, label: &str, target: u64, journaled: bool) {
    let (counts, took) = checked_runs(name, target, |seed, run, counts| {
        grouped_run(seed, run, counts, journaled)
    });
    let largest = counts.largest_batch.load(Ordering::Relaxed);
    eprintln!(
        "{label} power cuts: {} images checked from {} cut moments of {} runs (batches of up to {largest} inputs), in {took:.1?}",
        counts.images.load(Ordering::Relaxed),
        counts.points.load(Ordering::Relaxed),
        counts.runs.load(Ordering::Relaxed),
    );
    // Cuts of single-input batches alone would leave shared commits untested (asked of
    // a whole test, not of one run repeated alone, which may not group by chance).
    let runs = counts.runs.load(Ordering::Relaxed);
    if runs >= 4 && std::env::var_os("IDEM_POWER_RUN").is_none() {
        assert!(
            largest >= 2,
            "no run of {runs} grouped two inputs in one commit"
        );
    }
}

const THREADS: u64 = 4;
const PER_THREAD: u64 = 20;

fn grouped_key(thread: u64, i: u64) -> String {
    format!("g{thread}-{i:03}")
}

/// What the threads were answered, in the order they were: key and generation.
type Answers = Mutex<Vec<(String, u64)>>;

fn grouped_run(seed: u64, run: u64, counts: &Counts, journaled: bool) {
    let run_seed = run_seed(seed, run);
    let (store, disk, blank, mode) = fresh_store(run, journaled);
    let answered: Arc<AtomicU64> = Arc::default();
    disk.tag_with(answered.clone());
    disk.record_cuts(Rng::new(run_seed ^ 1), WRITE_CUTS);
    let answers: Answers = Mutex::default();
    let declined: Mutex<BTreeSet<String>> = Mutex::default();
    thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, answers, declined, answered) = (&store, &answers, &declined, &answered);
            scope.spawn(move || {
                let mut rng = Rng::new(run_seed ^ (thread + 10));
                for i in 0..PER_THREAD {
                    let key = grouped_key(thread, i);
                    let fail = rng.below(8) == 0;
                    let owned = key.clone();
                    let ran = store.execute_grouped(
                        &id("shop", "credit", &key),
                        fp(&key),
                        Timestamp(START + i),
                        move |txn| credit(txn, &owned, fail),
                    );
                    match ran {
                        Ok(Executed::Ran { record, .. }) => {
                            let mut answers = answers.lock().unwrap();
                            answers.push((key, record.generation.0));
                            answered.store(answers.len() as u64, Ordering::SeqCst);
                        }
                        Err(ExecuteError::Work(_)) => {
                            declined.lock().unwrap().insert(key);
                        }
                        other => panic!("seed {seed}, run {run}: {key}: {other:?}"),
                    }
                }
            });
        }
    });
    counts
        .largest_batch
        .fetch_max(store.commit_counts().largest_batch, Ordering::Relaxed);
    let answers = answers.into_inner().unwrap();
    let declined = declined.into_inner().unwrap();
    let mut rng = Rng::new(run_seed ^ 2);
    let mut seen = HashSet::new();
    for (i, cut) in disk.take_cuts().into_iter().enumerate() {
        counts.points.fetch_add(1, Ordering::Relaxed);
        let before_cut = &answers[..cut.tag as usize];
        for survival in survivals(&cut) {
            let image = blank.of(&cut, survival, &mut rng);
            if !seen.insert((cut.tag, fingerprint_of(&image))) {
                continue;
            }
            let context = format!(
                "seed {seed} (IDEM_SEED={seed} IDEM_POWER_RUN={run}), run {run} in {mode}, cut {i} after {} answers, {survival:?}",
                cut.tag
            );
            check_grouped(image, before_cut, &declined, &context);
            counts.images.fetch_add(1, Ordering::Relaxed);
        }
    }
    counts.runs.fetch_add(1, Ordering::Relaxed);
}

/// Every answer given before the cut is there with its generation and its one credit;
/// every record has its credit and every credit its record; declined work left nothing;
/// generations are distinct and within the counter; check passes.
fn check_grouped(
    image: Image,
    answered: &[(String, u64)],
    declined: &BTreeSet<String>,
    context: &str,
) {
    let (store, _) = image
        .open(None)
        .unwrap_or_else(|e| panic!("{context}: the store does not open after the cut: {e}"));
    let report = store.check().unwrap();
    assert!(
        report.is_ok(),
        "{context}: check found {:?}",
        report.problems
    );
    let mut records = BTreeMap::new();
    store
        .list(&ListFilter::default(), |id, record| {
            records.insert(id.key().to_string(), record);
            ControlFlow::Continue(())
        })
        .unwrap();
    let (credits, total) = accounts(&store);
    for (key, generation) in answered {
        let record = records
            .get(key)
            .unwrap_or_else(|| panic!("{context}: answered {key} is gone"));
        assert_eq!(record.generation.0, *generation, "{context}: {key}");
        match &record.status {
            Status::Settled { outcome, .. } => {
                assert_eq!(
                    outcome.body,
                    format!("credited {key}").into_bytes(),
                    "{context}"
                );
            }
            other => panic!("{context}: {key} is {other:?}"),
        }
    }
    for (key, record) in &records {
        assert_eq!(record.state(), State::Succeeded, "{context}: {key}");
        assert_eq!(credits.get(key), Some(&1), "{context}: {key} credits");
        assert!(
            !declined.contains(key),
            "{context}: declined {key} has a record"
        );
    }
    for (key, n) in &credits {
        assert_eq!(*n, 1, "{context}: {key} credited {n} times");
        assert!(
            records.contains_key(key),
            "{context}: {key} credited without a record"
        );
    }
    assert_eq!(total, records.len() as u64, "{context}: running total");
    let generations: BTreeSet<u64> = records.values().map(|r| r.generation.0).collect();
    assert_eq!(
        generations.len(),
        records.len(),
        "{context}: a generation repeats"
    );
    let counter = store.generation().unwrap().0;
    let highest_answered = answered.iter().map(|(_, g)| *g).max().unwrap_or(0);
    assert!(
        generations.last().is_none_or(|&g| g <= counter) && highest_answered <= counter,
        "{context}: counter {counter} went back"
    );
}

/// A power cut while a store is first made on an empty backend leaves either no store,
/// an empty one, or bytes that every open refuses as corrupt: it never opens a store
/// that holds anything, and never panics.
#[test]
fn a_cut_while_a_store_is_created_leaves_nothing_or_a_refused_header() {
    let seed = seed("power_cut_while_creating");
    let mut rng = Rng::new(seed);
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        let disk = SimDisk::default();
        disk.record_cuts(Rng::new(seed), 65_536);
        drop(workload::open(disk.clone(), mode).unwrap());
        for cut in disk.take_cuts() {
            for survival in Survival::ALL {
                let image = cut.image(survival, &mut rng);
                let context = format!("seed {seed}, {mode:?}, {survival:?}, {cut:?}");
                let outcome = match workload::open(SimDisk::from_image(image), mode) {
                    Ok(store) => {
                        assert!(store.check().unwrap().is_ok(), "{context}");
                        let found = contents(&store);
                        assert_eq!(store.stats(Timestamp(START)).unwrap().records(), 0);
                        assert_eq!(generation_in(&found), 0, "{context}");
                        "opens empty"
                    }
                    Err(OpenError::Corrupt { .. }) => "refused as corrupt",
                    Err(e) => panic!("{context}: {e}"),
                };
                *outcomes.entry(outcome).or_default() += 1;
            }
        }
    }
    eprintln!("cuts while creating: {outcomes:?}");
    assert!(outcomes.contains_key("opens empty"));
}

/// The disk model itself: a sync keeps everything written before it; a cut keeps the
/// synced bytes and, of each sector, a prefix of the writes to it; a failed write
/// changes nothing and a failed sync leaves its writes pending.
#[test]
fn the_simulated_disk_keeps_what_was_synced_and_tears_only_at_sectors() {
    use idem_store::redb::StorageBackend;
    let disk = SimDisk::default();
    disk.write(0, &[1; 3 * SECTOR]).unwrap();
    disk.sync_data().unwrap();
    disk.write(100, &[2; 2 * SECTOR]).unwrap();
    disk.set_len(5 * SECTOR as u64).unwrap();
    let cut = disk.cut_now();
    let mut rng = Rng::new(7);
    let mut synced = vec![1; 3 * SECTOR];
    assert_eq!(cut.image(Survival::Nothing, &mut rng), synced);
    let live = disk.live_image();
    assert_eq!(cut.image(Survival::Everything, &mut rng), live);
    let mut shapes = BTreeSet::new();
    for _ in 0..200 {
        for survival in [Survival::InOrder, Survival::Random] {
            let image = cut.image(survival, &mut rng);
            assert!(image.len() == 3 * SECTOR || image.len() == 5 * SECTOR);
            let mut shape = Vec::new();
            for (n, sector) in image.chunks(SECTOR).enumerate() {
                let old = synced.get(n * SECTOR..(n + 1) * SECTOR);
                let new = &live[n * SECTOR..(n + 1) * SECTOR];
                assert!(
                    Some(sector) == old
                        || sector == new
                        || (old.is_none() && sector == [0; SECTOR]),
                    "sector {n} of a {survival:?} image is neither before nor after"
                );
                if n < 3 {
                    shape.push(sector == new);
                }
            }
            shapes.insert(shape);
        }
    }
    // Torn: some images keep some sectors of the write and not the others.
    assert!(
        shapes
            .iter()
            .any(|s| s.contains(&true) && s.contains(&false))
    );
    assert!(shapes.len() > 3, "{shapes:?}");

    disk.fail(IoKind::Write, 2);
    assert!(disk.write(0, &[3; 10]).is_err());
    assert!(disk.faulted());
    assert_eq!(disk.live_image(), live);
    disk.fail(IoKind::Sync, 1);
    assert!(disk.sync_data().is_err());
    assert!(disk.has_pending());
    disk.sync_data().unwrap();
    synced = live;
    assert_eq!(disk.cut_now().image(Survival::Nothing, &mut rng), synced);
    assert_eq!(disk.counts(), (3, 3));
}
