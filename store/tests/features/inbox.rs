//! The consumer inbox under an at-least-once queue: redelivery, reordering, handler
//! failures, a consumer that crashes between handling and acknowledging, and a consumer
//! process killed with SIGKILL. Every message's effect happens exactly once.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{Rng, T0, accounts, add_credit, fp, report, reports, seed, spawn_child};
use idem_core::{Outcome, Timestamp};
use idem_store::inbox::Handled;
use idem_store::redb::WriteTransaction;
use idem_store::{ExecuteError, Store};

const MESSAGES: u64 = 120;

fn message_id(n: u64) -> String {
    format!("m{n:04}")
}

/// The handler: one credit for the message, failing after its write one time in
/// `fail_one_in` (the write rolls back with it).
fn credit(txn: &WriteTransaction, n: u64, fail: bool) -> Result<(Outcome, ()), String> {
    add_credit(txn, &message_id(n))?;
    if fail {
        return Err("downstream table locked".into());
    }
    Ok((Outcome::new(0, format!("credited {}", message_id(n))), ()))
}

/// Every message credited exactly once, and nothing else.
fn assert_each_once(store: &Store, seed: u64) {
    let (credits, total) = accounts(store);
    assert_eq!(total, MESSAGES, "seed {seed}");
    assert_eq!(credits.len() as u64, MESSAGES, "seed {seed}");
    for (account, n) in credits {
        assert_eq!(n, 1, "{account} credited {n} times (seed {seed})");
    }
}

/// An in-process broker: it delivers unacknowledged messages in random order, delivers
/// some twice, redelivers some acknowledged ones, and the consumer fails handlers and
/// crashes (drops and reopens its store) between handling and acknowledging.
#[test]
fn a_simulated_at_least_once_queue_gets_each_effect_once() {
    let seed = seed("inbox_simulated_queue");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.redb");
    let mut store = Store::open(&path).unwrap();
    let mut unacked: Vec<u64> = (0..MESSAGES).collect();
    let mut acked = BTreeSet::new();
    let (mut ran, mut duplicates, mut failures, mut crashes) = (0, 0, 0, 0);
    let mut now = T0;
    while !unacked.is_empty() {
        now += 1;
        // Reordering: any unacknowledged message may come next; one time in ten, an
        // acknowledged one comes again.
        let n = if !acked.is_empty() && rng.below(10) == 0 {
            *acked
                .iter()
                .nth(rng.below(acked.len() as u64) as usize)
                .unwrap()
        } else {
            unacked[rng.below(unacked.len() as u64) as usize]
        };
        let fail = rng.below(8) == 0;
        let handled = store.inbox("billing").unwrap().handle(
            "payments",
            &message_id(n),
            fp(&message_id(n)),
            Timestamp(now),
            |txn| credit(txn, n, fail),
        );
        match handled {
            Ok(Handled::Ran { .. }) => ran += 1,
            Ok(Handled::Duplicate(outcome)) => {
                assert_eq!(
                    outcome.body,
                    format!("credited {}", message_id(n)).as_bytes()
                );
                duplicates += 1;
            }
            Err(ExecuteError::Work(_)) => {
                failures += 1;
                continue; // not acknowledged: redelivered later
            }
            other => panic!("message {n}: {other:?} (seed {seed})"),
        }
        if rng.below(5) == 0 {
            // Crash after handling, before the acknowledgement reached the queue.
            drop(store);
            store = Store::open(&path).unwrap();
            crashes += 1;
            continue;
        }
        unacked.retain(|&m| m != n);
        acked.insert(n);
    }
    eprintln!("ran {ran}, duplicates {duplicates}, failures {failures}, crashes {crashes}");
    assert_eq!(ran, MESSAGES as usize, "seed {seed}");
    assert!(duplicates > 0 && failures > 0 && crashes > 0, "seed {seed}");
    assert_each_once(&store, seed);
}

/// The child: handles the deliveries of `IDEM_INBOX_DELIVER` (message numbers, in
/// order), reporting `ack N ran`, `ack N dup` or `nack N` after each call returned, then
/// `finished`.
#[test]
#[ignore = "the child process of a_consumer_killed_at_random_moments_gets_each_effect_once"]
fn inbox_child() {
    let Ok(path) = std::env::var("IDEM_INBOX_DB") else {
        return;
    };
    let deliveries = std::env::var("IDEM_INBOX_DELIVER").unwrap();
    let mut rng = Rng::new(std::env::var("IDEM_INBOX_SEED").unwrap().parse().unwrap());
    let store = Store::open(&path).unwrap();
    let inbox = store.inbox("billing").unwrap();
    report("ready");
    for n in deliveries.split(',').filter(|s| !s.is_empty()) {
        let n: u64 = n.parse().unwrap();
        let fail = rng.below(8) == 0;
        let handled = inbox.handle(
            "payments",
            &message_id(n),
            fp(&message_id(n)),
            Timestamp(T0 + n),
            |txn| credit(txn, n, fail),
        );
        match handled {
            Ok(Handled::Ran { .. }) => report(&format!("ack {n} ran")),
            Ok(Handled::Duplicate(_)) => report(&format!("ack {n} dup")),
            Err(ExecuteError::Work(_)) => report(&format!("nack {n}")),
            other => panic!("message {n}: {other:?}"),
        }
    }
    report("finished");
}

/// The queue is this test: it hands a consumer process its unacknowledged messages
/// (shuffled, with some acknowledged ones again), kills it with SIGKILL after a random
/// number of acknowledgements, and starts a new one, until every message is
/// acknowledged. A message handled but not yet acknowledged when the kill landed comes
/// again and must be a duplicate.
#[test]
fn a_consumer_killed_at_random_moments_gets_each_effect_once() {
    let seed = seed("inbox_sigkill");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.redb");
    let mut acked = BTreeSet::new();
    let (mut kills, mut duplicates) = (0, 0);
    for round in 0.. {
        let mut deliver: Vec<u64> = (0..MESSAGES).filter(|n| !acked.contains(n)).collect();
        if deliver.is_empty() {
            break;
        }
        let again: Vec<u64> = acked
            .iter()
            .copied()
            .filter(|_| rng.below(20) == 0)
            .collect();
        deliver.extend(again);
        rng.shuffle(&mut deliver);
        // The last rounds run to the end, so the test always terminates.
        let kill_after = (round < 12).then(|| rng.below(deliver.len() as u64 / 2) + 1);
        let list: Vec<String> = deliver.iter().map(u64::to_string).collect();
        let mut child = spawn_child(
            module_path!(),
            "inbox_child",
            &[
                ("IDEM_INBOX_DB", path.display().to_string()),
                ("IDEM_INBOX_DELIVER", list.join(",")),
                ("IDEM_INBOX_SEED", rng.next_u64().to_string()),
            ],
        );
        let lines = reports(child.stdout.take().unwrap());
        let mut acks = 0;
        let mut killed = false;
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| {
                    panic!("round {round}: no report from the child: {e} (seed {seed})")
                });
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["finished"] => break,
                ["ack", n, how] => {
                    acked.insert(n.parse::<u64>().unwrap());
                    duplicates += usize::from(how == "dup");
                    acks += 1;
                    if kill_after == Some(acks) {
                        killed = true;
                        break;
                    }
                }
                _ => {}
            }
        }
        child.kill().unwrap(); // SIGKILL (a finished child has exited already)
        child.wait().unwrap();
        kills += usize::from(killed);
        if round > 40 {
            panic!("the queue did not drain in 40 rounds (seed {seed})");
        }
    }
    eprintln!("{kills} kills, {duplicates} duplicates acknowledged");
    assert!(kills > 0 && duplicates > 0, "seed {seed}");
    let store = Store::open(&path).unwrap();
    assert_each_once(&store, seed);
}
