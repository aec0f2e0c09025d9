//! Many processes at once: the store file is shared, exactly one claim wins, and the read
//! commands read beside a process that has the file open for writing.

mod common;

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::{Idem, Run, T0, claim};

#[test]
fn fifty_processes_begin_one_key_and_exactly_one_claims() {
    let idem = Idem::new();
    // Create the file first, so every process opens an existing store.
    idem.at(T0, &["begin", "t", "o", "warm-up"]).code(0);
    let now = T0.to_string();
    let children: Vec<_> = (0..50)
        .map(|_| {
            idem.command(&["--json", "--now", &now, "begin", "t", "o", "contended"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let runs: Vec<Run> = children
        .into_iter()
        .map(|c| Run::of(c.wait_with_output().expect("wait")))
        .collect();
    let claimed: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
    let in_progress = runs.iter().filter(|r| r.code == 4).count();
    let others: Vec<&Run> = runs.iter().filter(|r| r.code != 0 && r.code != 4).collect();
    assert!(others.is_empty(), "unexpected results: {others:?}");
    assert_eq!(claimed.len(), 1, "claims: {claimed:?}");
    assert_eq!(in_progress, 49);
    assert_eq!(claimed[0].json()["decision"], "claimed");
    let generation = claimed[0].json()["generation"].clone();
    for run in runs.iter().filter(|r| r.code == 4) {
        assert_eq!(
            run.json()["generation"],
            generation,
            "every loser names the winner"
        );
    }
}

#[test]
fn read_commands_read_beside_a_running_writer() {
    let idem = Idem::new();
    claim(&idem, T0, "before");
    // `exec` keeps the store open for writing while its program runs; the program waits
    // for the file `go`.
    let started = idem.path("started");
    let go = idem.path("go");
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
        started.display(),
        go.display()
    );
    let writer = idem
        .command(&["exec", "t", "o", "running", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let give_up = Instant::now() + Duration::from_secs(120);
    while !started.exists() {
        assert!(Instant::now() < give_up, "exec never ran its program");
        thread::sleep(Duration::from_millis(10));
    }
    // The writer's claim is committed; the reads see it, and change nothing.
    let before = idem.db_bytes();
    let listed = idem.at(T0, &["list", "--state", "pending"]);
    listed.code(0);
    let keys: Vec<String> = listed
        .json_lines()
        .iter()
        .map(|r| r["key"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(keys, ["before", "running"]);
    idem.at(T0, &["get", "t", "o", "running"]).code(0);
    assert_eq!(idem.at(T0, &["stats"]).json()["pending"], 2);
    assert!(idem.db_bytes() == before, "a read changed the file");
    std::fs::write(&go, b"").expect("go");
    let run = Run::of(writer.wait_with_output().expect("wait"));
    run.code(0);
    assert_eq!(run.stdout, "done\n");
    assert_eq!(
        idem.at(T0, &["get", "t", "o", "running"]).json()["state"],
        "succeeded"
    );
}
