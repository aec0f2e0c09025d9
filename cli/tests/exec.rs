//! `idem exec`: a program runs at most once per key; its stdout and exit status are
//! stored and replayed; a concurrent exec exits 4 or waits; a killed program is unknown.

mod common;

use std::fs;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::{Idem, Run};

/// A shell script that appends a line to `ran` in the temporary directory each time it
/// runs, then does `rest`.
fn counted(rest: &str) -> String {
    format!("echo run >> ran; {rest}")
}

fn runs(idem: &Idem) -> usize {
    fs::read_to_string(idem.path("ran")).map_or(0, |s| s.lines().count())
}

#[test]
fn runs_once_and_replays_stdout_and_status() {
    let idem = Idem::new();
    let script = counted("echo hello; echo to-stderr >&2");
    let first = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    first.code(0);
    assert_eq!(first.stdout, "hello\n");
    assert_eq!(first.stderr, "to-stderr\n", "stderr passes through");
    let again = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    again.code(0);
    assert_eq!(again.stdout, "hello\n");
    assert_eq!(again.stderr, "", "a replay does not run the program");
    assert_eq!(runs(&idem), 1);
    let record = idem.run(&["--json", "get", "t", "o", "k"]).json();
    assert_eq!(
        (record["state"].as_str(), record["code"].as_i64()),
        (Some("succeeded"), Some(0))
    );
    assert_eq!(record["outcome_b64"], "aGVsbG8K");
}

#[test]
fn a_failing_program_is_settled_as_failed_with_its_status() {
    let idem = Idem::new();
    let script = counted("echo partial; exit 3");
    let first = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    first.code(3);
    assert_eq!(first.stdout, "partial\n");
    let again = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    again.code(3);
    assert_eq!(again.stdout, "partial\n");
    assert_eq!(runs(&idem), 1);
    let record = idem.run(&["--json", "get", "t", "o", "k"]).json();
    assert_eq!(
        (record["state"].as_str(), record["code"].as_i64()),
        (Some("failed"), Some(3))
    );
}

#[test]
fn a_program_killed_by_a_signal_leaves_the_key_unknown() {
    let idem = Idem::new();
    let script = counted("kill -KILL $$");
    let run = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    run.code(5).one_error_line(&["signal 9", "unknown"]);
    assert_eq!(
        idem.run(&["--json", "get", "t", "o", "k"]).json()["state"],
        "unknown"
    );
    idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script])
        .code(5);
    assert_eq!(runs(&idem), 1, "an unknown key is not run again");
    idem.run(&["resolve", "t", "o", "k", "--not-executed"])
        .code(0);
    idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", "echo fine"])
        .code(0);
}

#[test]
fn a_payload_is_the_request_and_another_payload_conflicts() {
    let idem = Idem::new();
    let a = idem.file("a", b"amount=5");
    let b = idem.file("b", b"amount=6");
    idem.run(&["exec", "t", "o", "k", "--payload", &a, "--", "true"])
        .code(0);
    idem.run(&["exec", "t", "o", "k", "--payload", &a, "--", "true"])
        .code(0);
    idem.run(&["exec", "t", "o", "k", "--payload", &b, "--", "true"])
        .code(3)
        .one_error_line(&["conflict"]);
}

#[test]
fn a_program_that_cannot_start_releases_its_claim() {
    let idem = Idem::new();
    let run = idem.run(&["exec", "t", "o", "k", "--", "/nonexistent/program"]);
    run.code(2)
        .one_error_line(&["/nonexistent/program", "released"]);
    idem.run(&["--json", "get", "t", "o", "k"]).code(7);
    idem.run(&["exec", "t", "o", "k", "--", "true"]).code(0);
}

fn wait_for_pending(idem: &Idem) {
    let start = Instant::now();
    while idem.run(&["--json", "get", "t", "o", "k"]).code != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the first exec never claimed"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_concurrent_exec_exits_4_or_waits_for_the_outcome() {
    let idem = Idem::new();
    let script = counted("sleep 1.5; echo done");
    let mut first = idem.command(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    let first = first
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_pending(&idem);
    let busy = idem.run(&["exec", "t", "o", "k", "--", "sh", "-c", &script]);
    busy.code(4)
        .one_error_line(&["in progress", "generation 1"]);
    let waited = idem.run(&[
        "exec", "t", "o", "k", "--wait", "30s", "--", "sh", "-c", &script,
    ]);
    waited.code(0);
    assert_eq!(waited.stdout, "done\n");
    let first = Run::of(first.wait_with_output().expect("first exec"));
    first.code(0);
    assert_eq!(first.stdout, "done\n");
    assert_eq!(runs(&idem), 1);
}

#[test]
fn heartbeats_keep_a_long_program_leased() {
    let idem = Idem::new();
    let args = [
        "exec",
        "t",
        "o",
        "k",
        "--lease",
        "1s",
        "--",
        "sh",
        "-c",
        "sleep 4; echo late",
    ];
    let mut long = idem.command(&args);
    let long = long
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_pending(&idem);
    // Leases of 1 s, renewed every third of one: a renewal may be late by most of a
    // second on a loaded machine and the key still holds.
    thread::sleep(Duration::from_millis(3_000));
    // Three leases later, a retry still sees the key in progress, not abandoned.
    let retry = idem.run(&args);
    retry.code(4).one_error_line(&["in progress"]);
    let long = Run::of(long.wait_with_output().expect("long exec"));
    long.code(0);
    assert_eq!(long.stdout, "late\n");
    let replay = idem.run(&args);
    replay.code(0);
    assert_eq!(replay.stdout, "late\n");
    assert_eq!(
        idem.run(&["--json", "get", "t", "o", "k"]).json()["state"],
        "succeeded"
    );
}

#[test]
fn the_same_key_with_other_arguments_is_a_conflict_not_a_replay() {
    let idem = Idem::new();
    let charge = |amount: &str| {
        idem.run(&[
            "exec",
            "t",
            "charge",
            "k",
            "--",
            "sh",
            "-c",
            &counted("echo charged $0"),
            amount,
        ])
    };
    let first = charge("10");
    first.code(0);
    assert_eq!(first.stdout, "charged 10\n");
    charge("10").code(0);
    let other = charge("9999");
    other.code(3).one_error_line(&["conflict"]);
    assert_eq!(
        other.stdout, "",
        "another command's output is never replayed"
    );
    assert_eq!(runs(&idem), 1);
}

#[test]
fn fingerprint_args_none_leaves_the_arguments_out() {
    let idem = Idem::new();
    let report = |level: &str| {
        idem.run(&[
            "exec",
            "t",
            "report",
            "k",
            "--fingerprint-args",
            "none",
            "--",
            "sh",
            "-c",
            &counted("echo report"),
            level,
        ])
    };
    report("--verbose").code(0);
    let again = report("--quiet");
    again.code(0);
    assert_eq!(again.stdout, "report\n");
    assert_eq!(runs(&idem), 1);
    // The program itself still counts.
    idem.run(&[
        "exec",
        "t",
        "report",
        "k",
        "--fingerprint-args",
        "none",
        "--",
        "bash",
        "-c",
        "echo other",
    ])
    .code(3);
}

#[test]
fn a_temporary_failure_releases_the_key_and_a_retry_runs_again() {
    let idem = Idem::new();
    // Fails for now the first time (75, or 69 with --retry-on), succeeds the next.
    for (code, extra) in [("75", None), ("69", Some("--retry-on=3,69"))] {
        let key = format!("k-{code}");
        let script = counted(&format!(
            "if [ -e down-{code} ]; then echo sent; else touch down-{code}; echo no network; exit {code}; fi"
        ));
        let mut args = vec!["exec", "t", "send", key.as_str()];
        args.extend(extra);
        args.extend(["--", "sh", "-c", script.as_str()]);
        let first = idem.run(&args);
        first.code(code.parse().unwrap());
        assert_eq!(first.stdout, "no network\n");
        assert!(
            first.stderr.contains("released") && first.stderr.contains(code),
            "{}",
            first.stderr
        );
        idem.run(&["get", "t", "send", &key]).code(7);
        let retry = idem.run(&args);
        retry.code(0);
        assert_eq!(retry.stdout, "sent\n");
        let replay = idem.run(&args);
        replay.code(0);
        assert_eq!(replay.stdout, "sent\n");
    }
    assert_eq!(
        runs(&idem),
        4,
        "each key ran twice: once failing for now, once for good"
    );
    // Without --retry-on, 69 is a definitive failure, replayed.
    let script = counted("exit 69");
    let args = [
        "exec",
        "t",
        "send",
        "k-final",
        "--",
        "sh",
        "-c",
        script.as_str(),
    ];
    idem.run(&args).code(69);
    idem.run(&args).code(69);
    assert_eq!(runs(&idem), 5);
    idem.run(&["exec", "t", "o", "k", "--retry-on", "0", "--", "true"])
        .code(2);
}

#[test]
fn past_retention_a_swept_run_is_forgotten_and_does_not_run_again() {
    let idem = Idem::new();
    let script = counted("echo charged");
    let t0: u64 = 1_740_830_400_000;
    let day: u64 = 24 * 3_600_000;
    let at = |ms: u64| ms.to_string();
    let exec = |now: &str| {
        idem.run(&[
            "--now", now, "exec", "t", "o", "k", "--", "sh", "-c", &script,
        ])
    };
    exec(&at(t0)).code(0);
    idem.run(&["--now", &at(t0 + 2 * day), "sweep"]).code(0);
    let late = exec(&at(t0 + 2 * day));
    late.code(13);
    assert!(late.stderr.contains("forgotten"), "{}", late.stderr);
    assert_eq!(
        late.stdout, "",
        "nothing is replayed: the output is no longer kept"
    );
    assert_eq!(runs(&idem), 1, "a forgotten run does not run again");
    let record = idem.run(&["--json", "--now", &at(t0 + 2 * day), "get", "t", "o", "k"]);
    assert_eq!(record.json()["state"], "forgotten");
}
