//! Many processes at once: the store file is shared, and exactly one claim wins.

mod common;

use std::process::Stdio;

use common::{Idem, Run, T0};

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
