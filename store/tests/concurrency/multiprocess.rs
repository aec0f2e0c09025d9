//! Several real processes on one file: they all read and write it at once; a write
//! waits for another process's transaction at most the lock timeout, and reads never
//! wait.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{T0, expect_report, fp, id, report, reports, spawn_child, tell, told};
use idem_core::protocol::Decision;
use idem_core::{Outcome, Timestamp, Verdict};
use idem_store::redb::{ReadableTable, TableDefinition, WriteTransaction};
use idem_store::{Error, Executed, ListFilter, Store};

const ACCOUNTS: TableDefinition<&str, u64> = TableDefinition::new("mp.accounts");
const SHARED_KEYS: u64 = 30;
const CHILDREN: usize = 3;

fn credit(txn: &WriteTransaction, account: &str) -> Result<(Verdict, Outcome, ()), String> {
    let mut accounts = txn.open_table(ACCOUNTS).map_err(|e| e.to_string())?;
    let credits = accounts
        .get(account)
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value());
    accounts
        .insert(account, credits + 1)
        .map_err(|e| e.to_string())?;
    Ok((Verdict::Succeeded, Outcome::new(200, account), ()))
}

/// What every process does: execute each shared key (all processes race on them), and
/// run one two-phase claim of its own per shared key.
fn work(store: &Store, who: &str) -> usize {
    let mut ran = 0;
    for k in 0..SHARED_KEYS {
        let shared = id("mp", "credit", &format!("shared-{k}"));
        let account = format!("shared-{k}");
        match store
            .execute(&shared, fp(&account), Timestamp(T0), |txn| {
                credit(txn, &account)
            })
            .unwrap()
        {
            Executed::Ran { .. } => ran += 1,
            Executed::NotRun(Decision::Replay { outcome, .. }) => {
                assert_eq!(outcome.body, account.as_bytes());
            }
            other => panic!("{who}: {other:?}"),
        }
        let own = id("mp", "charge", &format!("{who}-{k}"));
        let Decision::Claimed { generation, .. } =
            store.begin(&own, fp(who), Timestamp(T0)).unwrap()
        else {
            panic!("{who}: own key not claimed")
        };
        store
            .complete(
                &own,
                generation,
                Verdict::Succeeded,
                Outcome::new(200, who),
                Timestamp(T0),
            )
            .unwrap();
    }
    ran
}

/// Every process of these tests waits this long at most for the write lock. Far longer
/// than any turn takes, so that a loaded machine makes the tests slower, never failed;
/// `a_long_write_elsewhere_delays_writes_within_the_bound_and_never_reads` tests the
/// bound itself.
const GENEROUS: Duration = Duration::from_secs(120);

fn open(path: impl AsRef<std::path::Path>) -> Store {
    Store::builder().lock_timeout(GENEROUS).open(path).unwrap()
}

#[test]
#[ignore = "a child process of processes_share_one_file"]
fn writer_child() {
    let Ok(path) = std::env::var("IDEM_MP_DB") else {
        return;
    };
    let who = std::env::var("IDEM_MP_NAME").unwrap();
    let store = open(&path);
    report("ready");
    let ran = work(&store, &who);
    report(&format!("finished {ran}"));
}

#[test]
fn processes_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.redb");
    // This process keeps the store open the whole time, as a terminal application does.
    let store = open(&path);
    let mut children: Vec<_> = (0..CHILDREN)
        .map(|n| {
            let mut child = spawn_child(
                module_path!(),
                "writer_child",
                &[
                    ("IDEM_MP_DB", path.display().to_string()),
                    ("IDEM_MP_NAME", format!("child{n}")),
                ],
            );
            let lines = reports(child.stdout.take().unwrap());
            (child, lines)
        })
        .collect();
    for (_, lines) in &children {
        expect_report(lines, "ready", GENEROUS);
    }
    // While the children write, this process writes too, and reads, through the handle it
    // opened before any of them wrote, until it has seen commits of every child. (Which
    // process gets the lock when is up to the scheduler: a child may well write only
    // after this process's writer is done.)
    let own_claims = ListFilter {
        operation: Some("charge".into()),
        ..ListFilter::default()
    };
    let children_names: BTreeSet<String> = (0..CHILDREN).map(|n| format!("child{n}")).collect();
    let (ran_here, seen) = thread::scope(|scope| {
        let writer = scope.spawn(|| work(&store, "parent"));
        let mut seen = BTreeSet::new();
        let give_up = Instant::now() + GENEROUS;
        while !seen.is_superset(&children_names) && Instant::now() < give_up {
            store
                .list(&own_claims, |id, _| {
                    if let Some((who, _)) = id.key().split_once('-') {
                        seen.insert(who.to_string());
                    }
                    ControlFlow::Continue(())
                })
                .unwrap();
            thread::sleep(Duration::from_millis(20));
        }
        (writer.join().unwrap(), seen)
    });
    assert!(
        seen.is_superset(&children_names),
        "reads saw the commits of {seen:?} only"
    );
    let mut ran_total = ran_here;
    for (child, lines) in &mut children {
        let finished = expect_report(lines, "finished", GENEROUS);
        ran_total += finished["finished ".len()..].parse::<usize>().unwrap();
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(ran_total, SHARED_KEYS as usize, "each shared key runs once");

    let accounts: BTreeMap<String, u64> = store
        .read(|txn| {
            txn.open_table(ACCOUNTS)
                .unwrap()
                .iter()
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value().to_string(), v.value())
                })
                .collect()
        })
        .unwrap();
    assert_eq!(accounts.len(), SHARED_KEYS as usize);
    assert!(accounts.values().all(|&c| c == 1), "{accounts:?}");

    // One claim per record, across four processes: generations 1..=N, none reused.
    let mut generations = BTreeSet::new();
    store
        .list(&ListFilter::default(), |_, record| {
            assert!(generations.insert(record.generation.0));
            ControlFlow::Continue(())
        })
        .unwrap();
    let records = SHARED_KEYS as usize * (1 + CHILDREN + 1);
    assert_eq!(generations.len(), records);
    assert_eq!(generations, (1..=records as u64).collect::<BTreeSet<_>>());
    assert_eq!(store.generation().unwrap().0, records as u64);
    assert!(store.check().unwrap().is_ok());
}

#[test]
#[ignore = "a child process of a_long_write_elsewhere_delays_writes_within_the_bound_and_never_reads"]
fn holder_child() {
    let Ok(path) = std::env::var("IDEM_MP_DB") else {
        return;
    };
    let store = open(&path);
    let key = id("mp", "credit", "held");
    let done = store
        .execute(&key, fp("held"), Timestamp(T0), |txn| {
            report("holding");
            // Until the parent says so; a parent that never does (a read or a write that
            // waits for this transaction) sees it end after GENEROUS and fails on time.
            let _ = told(GENEROUS);
            credit(txn, "held")
        })
        .unwrap();
    assert!(matches!(done, Executed::Ran { .. }));
    report("committed");
}

#[test]
fn a_long_write_elsewhere_delays_writes_within_the_bound_and_never_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.redb");
    let patient = Arc::new(open(&path));
    let existing = id("mp", "credit", "existing");
    let _ = patient
        .execute(&existing, fp("e"), Timestamp(T0), |txn| {
            credit(txn, "existing")
        })
        .unwrap();
    let impatient = Store::builder()
        .lock_timeout(Duration::from_millis(300))
        .open(&path)
        .unwrap();

    // The child holds a write transaction until this process tells it to commit.
    let mut child = spawn_child(
        module_path!(),
        "holder_child",
        &[("IDEM_MP_DB", path.display().to_string())],
    );
    let lines = reports(child.stdout.take().unwrap());
    expect_report(&lines, "holding", GENEROUS);

    // Reads do not wait for the other process's write transaction: they return while it
    // is still open. Nor does a read-only open, which sees only what is committed.
    let start = Instant::now();
    assert!(patient.get(&existing).unwrap().is_some());
    assert!(patient.stats(Timestamp(T0)).unwrap().succeeded >= 1);
    let reader = Store::builder().read_only(true).open(&path).unwrap();
    assert!(reader.get(&existing).unwrap().is_some());
    assert!(reader.get(&id("mp", "credit", "held")).unwrap().is_none());
    assert!(
        start.elapsed() < GENEROUS / 2,
        "the reads waited for the writer: {:?}",
        start.elapsed()
    );

    // A write waits at most its lock timeout, then says so (the other transaction is
    // still open: the write never got the lock).
    let start = Instant::now();
    let err = impatient
        .begin(&id("mp", "charge", "impatient"), fp("i"), Timestamp(T0))
        .unwrap_err();
    let Error::Busy { waited } = err else {
        panic!("{err:?}")
    };
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(
        start.elapsed() < GENEROUS / 2,
        "the write waited for the writer: {:?}",
        start.elapsed()
    );
    assert!(
        err.to_string().contains("longer than the lock timeout"),
        "{err}"
    );

    // A write within its bound waits for the other's commit, goes through after it, and
    // sees what it committed: its claim is the generation after the child's.
    let waiting = {
        let patient = Arc::clone(&patient);
        thread::spawn(move || patient.begin(&id("mp", "charge", "patient"), fp("p"), Timestamp(T0)))
    };
    thread::sleep(Duration::from_millis(200));
    assert!(
        !waiting.is_finished(),
        "a write got through another's transaction"
    );
    tell(&mut child, "commit");
    let decision = waiting.join().unwrap().unwrap();
    let Decision::Claimed { generation, .. } = decision else {
        panic!("{decision:?}")
    };
    expect_report(&lines, "committed", GENEROUS);
    assert!(child.wait().unwrap().success());
    let held = patient.get(&id("mp", "credit", "held")).unwrap().unwrap();
    assert_eq!(generation.0, held.generation.0 + 1);
    // The read-only store, opened before, sees both processes' commits.
    assert_eq!(reader.get(&id("mp", "credit", "held")).unwrap(), Some(held));
    assert_eq!(reader.generation().unwrap(), generation);
    assert!(
        impatient
            .get(&id("mp", "credit", "held"))
            .unwrap()
            .is_some()
    );
}
