//! The replay cache (`StoreBuilder::replay_cache`) never changes an answer: the same
//! inputs give the same decisions and the same `get`s, byte for byte, with the cache on
//! and off, including conflicts, expiry, sweep, clocks that disagree, and another
//! handle's write lock.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::common::{T0, fp, id};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::redb::ConcurrencyMode;
use idem_store::{Executed, Store};

const RETENTION: u64 = 60_000;

fn at(ms: u64) -> Timestamp {
    Timestamp(T0 + ms)
}

fn open(path: &std::path::Path, entries: usize) -> Store {
    open_in(path, entries, ConcurrencyMode::MultiWriter)
}

fn open_in(path: &std::path::Path, entries: usize, mode: ConcurrencyMode) -> Store {
    // No tombstones: the transcript shows the key claimed again at its expiry
    // (`tombstones.rs` shows a tombstone answered the same with and without a sweep).
    let config = Config {
        success_retention_ms: RETENTION,
        failure_retention_ms: RETENTION,
        tombstone_retention_ms: 0,
        ..Config::default()
    };
    Store::builder()
        .config(config)
        .replay_cache(entries)
        .concurrency(mode)
        .open(path)
        .unwrap()
}

fn ok(
    body: &'static str,
) -> impl FnMut(
    &idem_store::redb::WriteTransaction,
) -> Result<(Verdict, Outcome, ()), std::convert::Infallible>
+ Send
+ 'static {
    move |_| Ok((Verdict::Succeeded, Outcome::new(201, body), ()))
}

fn claimed(decision: &Decision) -> idem_core::Generation {
    match decision {
        Decision::Claimed { generation, .. } => *generation,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// One script of inputs; every answer, in order.
fn transcript(entries: usize) -> Vec<String> {
    transcript_in(entries, ConcurrencyMode::MultiWriter)
}

fn transcript_in(entries: usize, mode: ConcurrencyMode) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let store = open_in(&dir.path().join("idem.redb"), entries, mode);
    let mut out = Vec::new();
    let mut log = |what: &str, answer: String| out.push(format!("{what}: {answer}"));
    let (k1, k2, k3) = (id("t", "o", "k1"), id("t", "o", "k2"), id("t", "o", "k3"));

    // Atomic execute settles k1; retries replay it, another fingerprint conflicts.
    let first = store.execute(&k1, fp("a"), at(0), ok("body-1")).unwrap();
    log("execute k1", format!("{first:?}"));
    for n in 1..4 {
        let replay = store.begin(&k1, fp("a"), at(n)).unwrap();
        let Decision::Replay { outcome, .. } = &replay else {
            panic!("expected Replay, got {replay:?}");
        };
        assert_eq!(outcome.body, b"body-1");
        log("begin k1 a", format!("{replay:?}"));
    }
    let conflict = store.begin(&k1, fp("b"), at(5)).unwrap();
    assert!(
        matches!(conflict, Decision::Conflict { .. }),
        "{conflict:?}"
    );
    log("begin k1 b", format!("{conflict:?}"));
    let again = store.execute(&k1, fp("a"), at(6), ok("never")).unwrap();
    assert!(matches!(again, Executed::NotRun(Decision::Replay { .. })));
    log("execute k1 a", format!("{again:?}"));
    let grouped = store
        .execute_grouped(&k1, fp("b"), at(7), ok("never"))
        .unwrap();
    assert!(matches!(
        grouped,
        Executed::NotRun(Decision::Conflict { .. })
    ));
    log("execute_grouped k1 b", format!("{grouped:?}"));
    for _ in 0..2 {
        log("get k1", format!("{:?}", store.get(&k1)));
    }

    // Two-phase: complete settles k2; resolve settles k3.
    let g2 = claimed(&store.begin(&k2, fp("c"), at(10)).unwrap());
    let done = store
        .complete(
            &k2,
            g2,
            Verdict::Failed,
            Outcome::new(402, "declined"),
            at(11),
        )
        .unwrap();
    log("complete k2", format!("{done:?}"));
    log(
        "begin k2 c",
        format!("{:?}", store.begin(&k2, fp("c"), at(12))),
    );
    let g3 = claimed(&store.begin(&k3, fp("d"), at(10)).unwrap());
    store.mark_unknown(&k3, g3, at(11)).unwrap();
    log(
        "begin k3 d",
        format!("{:?}", store.begin(&k3, fp("d"), at(12))),
    );
    store
        .resolve(
            &k3,
            Resolution::Succeeded(Outcome::new(200, "found")),
            at(13),
        )
        .unwrap();
    log(
        "begin k3 d",
        format!("{:?}", store.begin(&k3, fp("d"), at(14))),
    );
    for key in [&k1, &k2, &k3, &k3] {
        log("get", format!("{:?}", store.get(key)));
    }

    // At its expiry k1 is claimed again: the cache does not extend retention. A caller
    // whose clock is behind then sees the new claim, not the old outcome.
    let reclaim = store.begin(&k1, fp("a"), at(RETENTION)).unwrap();
    claimed(&reclaim);
    log("begin k1 at expiry", format!("{reclaim:?}"));
    let behind = store.begin(&k1, fp("a"), at(RETENTION - 1)).unwrap();
    assert!(matches!(behind, Decision::InProgress { .. }), "{behind:?}");
    log("begin k1 behind", format!("{behind:?}"));
    log(
        "get k1 after the new claim",
        format!("{:?}", store.get(&k1)),
    );

    // A sweep deletes k2: a caller whose clock is behind claims it, as the file says.
    let swept = store.sweep(at(RETENTION + 12), 10, false).unwrap();
    log("sweep", format!("{swept:?}"));
    log("get k2 after sweep", format!("{:?}", store.get(&k2)));
    let after_sweep = store.begin(&k2, fp("c"), at(20)).unwrap();
    claimed(&after_sweep);
    log("begin k2 after sweep", format!("{after_sweep:?}"));
    out
}

#[test]
fn answers_are_the_same_with_and_without_the_cache() {
    let cached = transcript(4096);
    let uncached = transcript(0);
    let tiny = transcript(1);
    assert_eq!(cached, uncached);
    assert_eq!(tiny, uncached);
}

/// In the single-process mode reads reuse one snapshot until this process's next commit
/// (`writer.rs`): every answer that reads after a write must still see that write.
#[test]
fn answers_are_the_same_with_the_snapshot_kept_between_commits() {
    let multi = transcript(0);
    for entries in [0, 4096] {
        assert_eq!(
            transcript_in(entries, ConcurrencyMode::ExclusiveWriter),
            multi
        );
    }
}

#[test]
fn a_replay_from_memory_equals_the_one_from_the_file_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let key = id("t", "o", "k");
    let body: Vec<u8> = (0..=255u8).collect();
    let from_memory = {
        let store = open(&path, 4096);
        let outcome = Outcome::new(200, body.clone());
        let ran = store
            .execute(&key, fp("a"), at(0), move |_| {
                Ok::<_, ()>((Verdict::Succeeded, outcome.clone(), ()))
            })
            .unwrap();
        assert!(matches!(ran, Executed::Ran { .. }));
        // Filled by the commit; answered from memory from here on.
        store.begin(&key, fp("a"), at(1)).unwrap()
    };
    let from_file = open(&path, 0).begin(&key, fp("a"), at(1)).unwrap();
    assert_eq!(from_memory, from_file);
    let Decision::Replay { outcome, .. } = from_memory else {
        panic!("expected Replay, got {from_memory:?}");
    };
    assert_eq!(outcome.body, body);
}

#[test]
fn a_cached_replay_is_answered_while_another_handle_holds_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let store = open(&path, 4096);
    let key = id("t", "o", "k");
    let ran = store.execute(&key, fp("a"), at(0), ok("done")).unwrap();
    assert!(matches!(ran, Executed::Ran { .. }));
    assert!(matches!(
        store.begin(&key, fp("a"), at(1)).unwrap(),
        Decision::Replay { .. }
    ));

    let other = open(&path, 0);
    let (held, hold) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let holder = thread::spawn(move || {
        let ran = other
            .execute(&id("t", "o", "other"), fp("x"), at(0), move |_| {
                held.send(()).unwrap();
                released.recv().unwrap();
                Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, "x"), ()))
            })
            .unwrap();
        assert!(matches!(ran, Executed::Ran { .. }));
    });
    hold.recv_timeout(Duration::from_secs(10)).unwrap();
    let replay = store.begin(&key, fp("a"), at(2)).unwrap();
    assert!(matches!(replay, Decision::Replay { .. }), "{replay:?}");
    release.send(()).unwrap();
    holder.join().unwrap();
}
