//! Crash test: a child process runs `execute` in a loop on a real file and reports each
//! key after the call returned; the parent SIGKILLs it at random moments, reopens the
//! file, and checks that nothing acknowledged was lost and nothing half-done is visible.
//! The child uses the default multi-process mode, or the exclusive mode with its journal
//! (reopened in either mode: any open first replays what a killed writer left in it).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::Path;
use std::thread;
use std::time::Duration;

use crate::common::{
    Rng, T0, accounts, add_credit, expect_report, fp, id, report, reports, seed, spawn_child,
};
use idem_core::protocol::Decision;
use idem_core::{Outcome, State, Status, Timestamp, Verdict};
use idem_store::redb::{ConcurrencyMode, WriteTransaction};
use idem_store::{ExecuteError, Executed, ListFilter, Store};

// The business tables are common::ACCOUNTS (credits per key: every settled key must
// hold exactly 1) and common::TOTAL (must equal the number of records).

const KILLS: usize = 24;

fn name(k: u64) -> String {
    format!("k{k:06}")
}

fn outcome_body(k: u64) -> Vec<u8> {
    format!("credited {}", name(k)).into_bytes()
}

fn credit(txn: &WriteTransaction, k: u64, fail: bool) -> Result<(Verdict, Outcome, ()), String> {
    add_credit(txn, &name(k))?;
    if fail {
        // After the writes, to show they roll back with the claim.
        return Err("declined".into());
    }
    Ok((Verdict::Succeeded, Outcome::new(200, outcome_body(k)), ()))
}

/// The child: new keys in order from `IDEM_CRASH_FIRST`, one in ten a retry of an
/// earlier key, one in ten failing after its writes. Reports `done K ran`,
/// `done K replay` or `rolledback K` after each call returned.
#[test]
#[ignore = "the child process of sigkill_at_random_moments_loses_nothing_acknowledged"]
fn crash_child() {
    let Ok(path) = std::env::var("IDEM_CRASH_DB") else {
        return;
    };
    let var = |name: &str| -> u64 { std::env::var(name).unwrap().parse().unwrap() };
    let mut next = var("IDEM_CRASH_FIRST");
    let mut rng = Rng::new(var("IDEM_CRASH_SEED"));
    let store = open(
        Path::new(&path),
        std::env::var("IDEM_CRASH_JOURNAL").is_ok(),
    );
    report("ready");
    loop {
        let roll = rng.below(10);
        let (k, fail) = if roll == 0 && next > 0 {
            (rng.below(next), false)
        } else {
            next += 1;
            (next - 1, roll == 1)
        };
        let key = id("crash", "credit", &name(k));
        let result = store.execute(&key, fp(&name(k)), Timestamp(T0 + k), |txn| {
            credit(txn, k, fail)
        });
        match result {
            Ok(Executed::Ran { .. }) => report(&format!("done {k} ran")),
            Ok(Executed::NotRun(Decision::Replay { outcome, .. })) => {
                assert_eq!(outcome.body, outcome_body(k));
                report(&format!("done {k} replay"));
            }
            Err(ExecuteError::Work(_)) => report(&format!("rolledback {k}")),
            other => panic!("key {k}: {other:?}"),
        }
    }
}

/// The store at `path`: in the default multi-process mode, or with `journal` in the
/// exclusive mode, which commits through the journal.
fn open(path: &Path, journal: bool) -> Store {
    if journal {
        Store::builder()
            .concurrency(ConcurrencyMode::ExclusiveWriter)
            .open(path)
            .unwrap()
    } else {
        Store::open(path).unwrap()
    }
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    sigkill_run("sigkill_at_random_moments", false);
}

#[test]
fn sigkill_of_a_writer_with_the_journal_loses_nothing_acknowledged() {
    sigkill_run("sigkill_with_the_journal", true);
}

fn sigkill_run(test: &str, journal: bool) {
    let seed = seed(test);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acknowledged = BTreeSet::new();
    let mut first = 0u64;
    let mut counter = 0u64;
    let mut rounds_with_progress = 0;
    for round in 0..KILLS {
        let mut env = vec![
            ("IDEM_CRASH_DB", path.display().to_string()),
            ("IDEM_CRASH_FIRST", first.to_string()),
            ("IDEM_CRASH_SEED", rng.next_u64().to_string()),
        ];
        if journal {
            env.push(("IDEM_CRASH_JOURNAL", "1".into()));
        }
        let mut child = spawn_child(module_path!(), "crash_child", &env);
        let lines = reports(child.stdout.take().unwrap());
        // Half the kills land while the child starts and opens (and recovers) the file,
        // or early in its loop; the other half somewhere in its loop, however slowly it
        // started.
        if rng.below(2) == 0 {
            thread::sleep(Duration::from_millis(rng.below(150)));
        } else {
            expect_report(&lines, "ready", Duration::from_secs(60));
            thread::sleep(Duration::from_millis(rng.below(300)));
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "round {round}: the child exited by itself (seed {seed})"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut ran = 0;
        for line in lines.iter() {
            let words: Vec<&str> = line.split(' ').collect();
            if let ["done", k, how] = words[..] {
                let k: u64 = k.parse().unwrap();
                acknowledged.insert(k);
                first = first.max(k + 1);
                ran += usize::from(how == "ran");
            }
        }
        rounds_with_progress += usize::from(ran > 0);
        // With the journal, every other check reopens in the exclusive mode too.
        let reopen = journal && round % 2 == 0;
        let store = open(&path, reopen);
        let after = verify(&store, &acknowledged, counter, ran > 0, seed, round);
        counter = after;
    }
    eprintln!(
        "{KILLS} kills, {} keys acknowledged, {rounds_with_progress} rounds ran new keys, counter {counter}",
        acknowledged.len()
    );
    assert!(
        rounds_with_progress >= KILLS / 4,
        "too few kills landed in the loop to mean anything (seed {seed})"
    );
    // Generations keep increasing after the last kill too.
    let store = open(&path, journal);
    let key = id("crash", "credit", "after-the-last-kill");
    let Executed::Ran { record, .. } = store
        .execute(&key, fp("x"), Timestamp(T0), |txn| {
            credit(txn, 999_999, false)
        })
        .unwrap()
    else {
        panic!("a fresh key must run")
    };
    assert!(record.generation.0 > counter, "seed {seed}");
}

/// Checks every invariant of the store reopened after a kill; returns the counter.
fn verify(
    store: &Store,
    acknowledged: &BTreeSet<u64>,
    counter_before: u64,
    claimed_since: bool,
    seed: u64,
    round: usize,
) -> u64 {
    let context = format!("round {round}, seed {seed}");
    let check = store.check().unwrap();
    assert!(check.is_ok(), "{context}: {check:?}");

    let mut records = BTreeMap::new();
    store
        .list(&ListFilter::default(), |id, record| {
            records.insert(id.key().to_string(), record);
            ControlFlow::Continue(())
        })
        .unwrap();
    let (accounts, total) = accounts(store);

    // Every key the child acknowledged is settled with its outcome.
    for &k in acknowledged {
        let record = records
            .get(&name(k))
            .unwrap_or_else(|| panic!("{context}: acknowledged {} is gone", name(k)));
        match &record.status {
            Status::Settled {
                verdict: Verdict::Succeeded,
                outcome,
                ..
            } => assert_eq!(outcome.body, outcome_body(k), "{context}"),
            other => panic!("{context}: {} is {other:?}", name(k)),
        }
    }
    // No effect without its record, no record without its effect, nothing twice, and
    // never a Pending record from the atomic path.
    for (key, record) in &records {
        assert_eq!(record.state(), State::Succeeded, "{context}: {key}");
        assert_eq!(accounts.get(key), Some(&1), "{context}: {key} credits");
    }
    for (key, credits) in &accounts {
        assert_eq!(*credits, 1, "{context}: {key} credited {credits} times");
        assert!(records.contains_key(key), "{context}: {key} has no record");
    }
    assert_eq!(total, records.len() as u64, "{context}: running total");

    // Generations: distinct, within the counter, and the counter only grows.
    let generations: BTreeSet<u64> = records.values().map(|r| r.generation.0).collect();
    assert_eq!(
        generations.len(),
        records.len(),
        "{context}: a generation repeats"
    );
    let counter = store.generation().unwrap().0;
    assert!(
        generations.last().is_none_or(|&max| max <= counter),
        "{context}"
    );
    assert!(counter >= counter_before, "{context}: counter went back");
    if claimed_since {
        assert!(
            counter > counter_before,
            "{context}: a claim without a new generation"
        );
    }
    assert_eq!(store.stats(Timestamp(T0)).unwrap().pending, 0, "{context}");
    counter
}
