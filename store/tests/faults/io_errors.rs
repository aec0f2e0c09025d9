//! I/O errors under the store: the simulated disk (`common/disk.rs`) fails one chosen
//! write or sync of a run with EIO or ENOSPC, or fills up (ENOSPC at every write and sync until
//! space is freed). The call that met it returns an error, never a success; the store
//! then reopens itself at its next call, without its caller dropping it, and holds
//! exactly the contents after the last answered step or after the failed one (also after
//! a power cut of the disk), passes `check`, and writes on. A store with its journal runs
//! on a pair of disks (the store's and the journal's), and the fault hits one of them.

use std::convert::Infallible;
use std::time::Instant;

use crate::common::disk::{IoKind, SimDisk, Survival};
use crate::common::workload::{self, Contents, START, Workload, contents, ledger};
use crate::common::{Rng, fp, id, seed};
use idem_core::protocol::Decision;
use idem_store::redb::ConcurrencyMode;
use idem_store::{Error, Executed, Outcome, Store, Timestamp, Verdict};

/// Store calls per run.
const STEPS: usize = 40;
/// Of the writes of a run, every this many is failed in a run of its own; every sync is.
const WRITE_STRIDE: u64 = 7;

/// How a run's store keeps its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// One disk, in a concurrency mode.
    Alone(ConcurrencyMode),
    /// A disk and its journal's, the fault on the journal's when `on_journal`.
    Journaled { on_journal: bool },
}

/// A run's disks: the store's, and its journal's with a journal.
struct Disks {
    main: SimDisk,
    journal: Option<SimDisk>,
}

impl Disks {
    fn new(setup: Setup) -> Disks {
        Disks::from_images(setup, Vec::new(), Vec::new())
    }

    fn from_images(setup: Setup, main: Vec<u8>, journal: Vec<u8>) -> Disks {
        match setup {
            Setup::Alone(_) => Disks {
                main: SimDisk::from_image(main),
                journal: None,
            },
            Setup::Journaled { .. } => {
                let (main, journal) = SimDisk::pair(main, journal);
                Disks {
                    main,
                    journal: Some(journal),
                }
            }
        }
    }

    /// The disk a fault hits.
    fn faulty(&self, setup: Setup) -> &SimDisk {
        match (setup, &self.journal) {
            (Setup::Journaled { on_journal: true }, Some(journal)) => journal,
            _ => &self.main,
        }
    }

    fn open(&self, setup: Setup) -> Result<Store, idem_store::OpenError> {
        match (setup, &self.journal) {
            (Setup::Alone(mode), _) => workload::open(self.main.clone(), mode),
            (Setup::Journaled { .. }, Some(journal)) => Store::builder()
                .config(workload::config())
                .journal_limit(0)
                .open_on_backend_with_journal(self.main.clone(), journal.clone()),
            (Setup::Journaled { .. }, None) => unreachable!("a journaled setup has a journal"),
        }
    }

    /// The disks after a power cut now, with `survival` of their unsynced writes.
    fn after_a_cut(&self, setup: Setup, survival: Survival, rng: &mut Rng) -> Disks {
        let cut = self.main.cut_now();
        let main = cut.image(survival, rng);
        let journal = cut.journal_image(survival, rng).unwrap_or_default();
        Disks::from_images(setup, main, journal)
    }
}

/// The contents after each step of a run without faults, and the faulty disk's counts
/// of writes and syncs when each step began.
struct Reference {
    contents: Vec<Contents>,
    counts: Vec<(u64, u64)>,
}

fn reference(seed: u64, setup: Setup) -> Reference {
    let disks = Disks::new(setup);
    let mut workload = Workload::new(disks.open(setup).unwrap(), seed);
    let disk = disks.faulty(setup);
    let mut reference = Reference {
        contents: vec![contents(&workload.store)],
        counts: Vec::new(),
    };
    for step in 0..STEPS {
        reference.counts.push(disk.counts());
        workload
            .step()
            .unwrap_or_else(|f| panic!("seed {seed}, step {step}: {f:?}"));
        reference.contents.push(contents(&workload.store));
    }
    reference.counts.push(disk.counts());
    reference
}

#[test]
fn a_failed_write_or_sync_fails_its_call_and_the_store_reopens_itself() {
    let seed = seed("io_errors");
    let started = Instant::now();
    let (mut runs, mut syncs, mut writes) = (0, 0, 0);
    for setup in [
        Setup::Alone(ConcurrencyMode::MultiWriter),
        Setup::Alone(ConcurrencyMode::ExclusiveWriter),
        Setup::Journaled { on_journal: true },
        Setup::Journaled { on_journal: false },
    ] {
        let reference = reference(seed, setup);
        let (first_write, first_sync) = reference.counts[0];
        let (last_write, last_sync) = reference.counts[STEPS];
        let faults = (first_sync..last_sync).map(|n| (IoKind::Sync, n)).chain(
            (first_write..last_write)
                .step_by(WRITE_STRIDE as usize)
                .map(|n| (IoKind::Write, n)),
        );
        for (kind, n) in faults {
            fault_run(seed, setup, &reference, kind, n, false);
            runs += 1;
            match kind {
                IoKind::Sync => syncs += 1,
                IoKind::Write => writes += 1,
            }
            if kind == IoKind::Sync {
                fault_run(seed, setup, &reference, kind, n, true);
                runs += 1;
            }
        }
    }
    eprintln!(
        "io errors: {runs} runs, each with one failed write ({writes}) or sync ({syncs} syncs, twice: pending kept, pending lost), in {:.1?}",
        started.elapsed()
    );
}

/// Runs the workload with write or sync `n` failing, and checks what follows. With
/// `lost`, the failed sync drops the writes it did not make durable while reads still
/// see them (Linux after an fsync error): the reopen in the same process reads them,
/// the disk never gets them.
fn fault_run(seed: u64, setup: Setup, reference: &Reference, kind: IoKind, n: u64, lost: bool) {
    let context = format!(
        "seed {seed} (IDEM_SEED={seed}), {setup:?}, {kind:?} {n} fails{}",
        if lost { ", its writes lost" } else { "" }
    );
    let disks = Disks::new(setup);
    let mut workload = Workload::new(disks.open(setup).unwrap(), seed);
    let disk = disks.faulty(setup);
    // Every other fault is a full disk at that call (ENOSPC), the rest EIO.
    if n.is_multiple_of(2) {
        disk.fail_full(kind, n);
    } else {
        disk.fail(kind, n);
    }
    if lost {
        disk.lose_unsynced_on_failed_sync();
    }
    let mut step = 0;
    let result = loop {
        let result = workload.step();
        if disk.faulted() {
            break result;
        }
        result.unwrap_or_else(|f| panic!("{context}: step {step} failed before the fault: {f:?}"));
        step += 1;
        assert!(step < STEPS, "{context}: the fault never happened");
    };
    let context = format!("{context} during step {step}");
    let failure = match result {
        Ok(name) => panic!("{context}: {name} answered as if nothing failed"),
        Err(failure) => failure,
    };
    assert!(
        workload.store.needs_reopen(),
        "{context}: after {failure:?} the store does not ask for a reopen"
    );

    let allowed = [&reference.contents[step], &reference.contents[step + 1]];
    let mut rng = Rng::new(seed ^ n);
    // The power fails right after the error.
    for survival in [Survival::Nothing, Survival::Random] {
        let store = disks
            .after_a_cut(setup, survival, &mut rng)
            .open(setup)
            .unwrap_or_else(|e| panic!("{context}: no store after a power cut: {e}"));
        holds_one_of(&store, &allowed, &format!("{context}, cut ({survival:?})"));
    }
    // Or the application goes on with the same store, which reopens itself.
    let store = workload.store;
    holds_one_of(&store, &allowed, &format!("{context}, reopened by itself"));
    assert!(!store.needs_reopen(), "{context}: still failed");
    assert_eq!(store.reopens(), 1, "{context}: reopens");
    writes_on_and_keeps_it_through_a_cut(&store, &disks, setup, &mut rng, &context);
}

/// Five writes on `store`, answered; then a power cut of `disks` keeps them all.
fn writes_on_and_keeps_it_through_a_cut(
    store: &Store,
    disks: &Disks,
    setup: Setup,
    rng: &mut Rng,
    context: &str,
) {
    for k in 0..5 {
        let key = format!("after-the-reopen-{k}");
        let ran = store.execute(
            &id("shop", "after", &key),
            fp(&key),
            Timestamp(START + 10_000_000 + k),
            |txn| workload::credit(txn, &key, false),
        );
        assert!(
            matches!(ran, Ok(Executed::Ran { .. })),
            "{context}: a write after the reopen: {ran:?}"
        );
    }
    let answered = contents(store);
    for survival in [Survival::Nothing, Survival::Random] {
        let store = disks
            .after_a_cut(setup, survival, rng)
            .open(setup)
            .unwrap_or_else(|e| panic!("{context}: no store after the reopen and a cut: {e}"));
        holds_one_of(
            &store,
            &[&answered],
            &format!("{context}, reopened, written, cut ({survival:?})"),
        );
    }
}

/// A disk that fills up under a workload: every write and sync fails with ENOSPC. The
/// call that met it fails; while the disk stays full, every write fails and nothing it
/// tried lands; once space comes back, the same store (never dropped by its caller)
/// reopens itself within its backoff, holds what it answered, and writes on.
#[test]
fn a_full_disk_fails_writes_until_space_comes_back_and_the_store_recovers_by_itself() {
    let seed = seed("full_disk");
    let mut runs = 0;
    for setup in [
        Setup::Alone(ConcurrencyMode::MultiWriter),
        Setup::Alone(ConcurrencyMode::ExclusiveWriter),
        Setup::Journaled { on_journal: true },
        Setup::Journaled { on_journal: false },
    ] {
        let reference = reference(seed, setup);
        for fill_at in [0, 7, 19, 31] {
            let context =
                format!("seed {seed} (IDEM_SEED={seed}), {setup:?}, full at step {fill_at}");
            let disks = Disks::new(setup);
            let mut workload = Workload::new(disks.open(setup).unwrap(), seed);
            for step in 0..fill_at {
                workload
                    .step()
                    .unwrap_or_else(|f| panic!("{context}: step {step}: {f:?}"));
            }
            let disk = disks.faulty(setup);
            disk.fill();
            // Steps that write nothing (replays) still answer; the first that writes fails.
            let mut step = fill_at;
            loop {
                assert!(step < STEPS, "{context}: no step wrote");
                if workload.step().is_err() {
                    break;
                }
                step += 1;
            }
            let store = workload.store;
            // While the disk stays full, a write fails, with the cause named once the
            // reopen was tried, and runs nothing.
            for k in 0..3 {
                let key = format!("while-full-{k}");
                let ran = store.execute(
                    &id("shop", "full", &key),
                    fp(&key),
                    Timestamp(START + 5_000_000 + k),
                    |txn| workload::credit(txn, &key, false),
                );
                assert!(ran.is_err(), "{context}: a write on a full disk: {ran:?}");
            }
            disk.free();
            // Within the longest pause between two reopens, the next call reopens it.
            std::thread::sleep(std::time::Duration::from_millis(1_100));
            let allowed = [&reference.contents[step], &reference.contents[step + 1]];
            holds_one_of(&store, &allowed, &format!("{context}, space back"));
            assert!(!store.needs_reopen(), "{context}: still failed");
            let mut rng = Rng::new(seed ^ fill_at as u64);
            writes_on_and_keeps_it_through_a_cut(&store, &disks, setup, &mut rng, &context);
            runs += 1;
        }
    }
    eprintln!("full disk: {runs} runs, each store recovered by itself");
}

fn holds_one_of(store: &Store, allowed: &[&Contents], context: &str) {
    let report = store.check().unwrap();
    assert!(
        report.is_ok(),
        "{context}: check found {:?}",
        report.problems
    );
    let found = contents(store);
    assert!(
        allowed.iter().any(|c| **c == found),
        "{context}: the tables match no state the store answered for"
    );
}

/// The simplest case, step by step: a begin whose commit fails to sync.
#[test]
fn a_commit_that_fails_to_sync_is_not_answered_and_nothing_answered_is_lost() {
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        let disk = SimDisk::default();
        let store = workload::open(disk.clone(), mode).unwrap();
        let settled = id("shop", "credit", "settled");
        let Executed::Ran { record, .. } = store
            .execute(&settled, fp("a"), Timestamp(START), |_| {
                Ok::<_, Infallible>((Verdict::Succeeded, Outcome::new(200, "done"), ()))
            })
            .unwrap()
        else {
            panic!("a fresh key runs");
        };
        let (_, syncs) = disk.counts();
        disk.fail(IoKind::Sync, syncs);
        let claimed = id("shop", "charge", "in-doubt");
        let err = store
            .begin(&claimed, fp("b"), Timestamp(START + 1))
            .unwrap_err();
        assert!(
            matches!(err, Error::CommitFailed(_) | Error::Storage(_)),
            "{mode:?}: {err:?}"
        );
        assert!(store.needs_reopen());
        // The next call reopens the store by itself. The claim in doubt landed (its
        // writes are pending on the disk, which reads them), and nobody holds it: its
        // begin was answered with the error. It is given back, and the retry claims.
        let again = store
            .begin(&claimed, fp("b"), Timestamp(START + 3))
            .unwrap();
        assert!(
            matches!(again, Decision::Claimed { .. }),
            "{mode:?}: {again:?}"
        );
        assert!(!store.needs_reopen());
        assert_eq!(store.reopens(), 1);
        // What was answered is there.
        assert_eq!(store.get(&settled).unwrap(), Some(record));
        // The failed writes are pending still; a power cut now loses nothing answered.
        let image = disk.cut_now().image(Survival::Nothing, &mut Rng::new(1));
        let store = workload::open(SimDisk::from_image(image), mode).unwrap();
        assert!(store.check().unwrap().is_ok());
        assert!(store.get(&settled).unwrap().is_some());
    }
}

/// A sweep, an import and an outbox call that meet an I/O error are failed like the
/// protocol's inputs (each through its own path to the commit).
#[test]
fn every_kind_of_write_is_failed_by_a_failed_sync() {
    type Call = fn(&mut Store) -> Result<(), String>;
    let calls: [(&str, Call); 4] = [
        ("sweep", |store| {
            store
                .sweep(Timestamp(START + 1_000_000_000), 10, false)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("import", |store| {
            let line = r#"{"tenant":"shop","operation":"o","key":"imported","state":"pending","generation":9,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","created_at":1,"updated_at":1,"lease_until":2}"#;
            store
                .import(line.as_bytes())
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("enqueue", |store| {
            let outbox = store.outbox(ledger()).unwrap();
            outbox
                .enqueue(
                    "sale.forward",
                    b"x".to_vec(),
                    fp("x"),
                    Timestamp(START),
                    [2; 16],
                )
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("compact", |store| {
            store.compact().map(drop).map_err(|e| e.to_string())
        }),
    ];
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        for (name, call) in calls {
            let disk = SimDisk::default();
            let mut store = workload::open(disk.clone(), mode).unwrap();
            for n in 0..30 {
                let key = format!("k{n}");
                let _ = store
                    .execute(
                        &id("shop", "credit", &key),
                        fp(&key),
                        Timestamp(START),
                        |_| Ok::<_, Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ())),
                    )
                    .unwrap();
            }
            let before = contents(&store);
            let (_, syncs) = disk.counts();
            disk.fail(IoKind::Sync, syncs);
            let result = call(&mut store);
            assert!(disk.faulted(), "{mode:?} {name}: no sync");
            assert!(result.is_err(), "{mode:?} {name}: answered {result:?}");
            assert!(store.needs_reopen(), "{mode:?} {name}: no reopen asked");
            drop(store);
            let store = workload::open(disk, mode).unwrap();
            assert!(store.check().unwrap().is_ok());
            if name == "compact" {
                assert_eq!(
                    contents(&store),
                    before,
                    "{mode:?}: compact changed contents"
                );
            }
        }
    }
}
