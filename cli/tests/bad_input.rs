//! Bad input: every case exits 2 (usage, invalid input) or 1 (the file or the system),
//! prints exactly one line `idem: …` naming the problem, and leaves the store file byte
//! for byte as it was.

mod common;

use std::fs;

use common::{Idem, T0, claim};

/// A store holding one pending record, and its bytes.
fn store_with_a_record() -> (Idem, Vec<u8>) {
    let idem = Idem::new();
    claim(&idem, T0, "k");
    let bytes = idem.db_bytes();
    (idem, bytes)
}

#[test]
fn bad_arguments_exit_2_name_the_problem_and_leave_the_file_alone() {
    let (idem, before) = store_with_a_record();
    let long_key = "k".repeat(300);
    let big = idem.file("big", &vec![b'x'; (1 << 20) + 1]);
    let missing = idem.path("no-such-payload").to_string_lossy().into_owned();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["begin", "t", "o", "tab\there"],
            vec!["key", "0x09", "printable ASCII"],
        ),
        (
            vec!["begin", "t", "o", &long_key],
            vec!["key: 300 bytes, at most 255"],
        ),
        (vec!["begin", "", "o", "k"], vec!["tenant", "empty"]),
        (vec!["complete", "t", "o", "k"], vec!["--generation"]),
        (
            vec!["complete", "t", "o", "k", "--generation", "one"],
            vec!["--generation", "one"],
        ),
        (
            vec!["begin", "t", "o", "k", "--lease", "5x"],
            vec!["--lease", "5x", "30s"],
        ),
        (
            vec!["begin", "t", "o", "k", "--lease", "0s"],
            vec!["--lease", "at least 1ms"],
        ),
        (
            vec![
                "complete",
                "t",
                "o",
                "k",
                "--generation",
                "1",
                "--retention",
                "1y",
            ],
            vec!["--retention"],
        ),
        (
            vec!["begin", "t", "o", "k", "--payload", &missing],
            vec!["--payload", "no-such-payload"],
        ),
        (
            vec![
                "begin",
                "t",
                "o",
                "k",
                "--payload",
                "x",
                "--fingerprint",
                "ab",
            ],
            vec!["--fingerprint", "--payload"],
        ),
        (
            vec!["begin", "t", "o", "k", "--fingerprint", "abc"],
            vec!["fingerprint", "64 hex digits"],
        ),
        (
            vec!["--now", "yesterday", "begin", "t", "o", "k"],
            vec!["--now", "RFC 3339"],
        ),
        (
            vec!["--now", "2025-02-30T00:00:00Z", "get", "t", "o", "k"],
            vec!["--now", "does not exist"],
        ),
        (vec!["frobnicate"], vec!["frobnicate"]),
        (
            vec![
                "complete",
                "t",
                "o",
                "k",
                "--generation",
                "1",
                "--outcome",
                &big,
            ],
            vec!["outcome", "1048577 bytes"],
        ),
        (
            vec!["resolve", "t", "o", "k", "--succeeded", "--failed"],
            vec!["--failed"],
        ),
        (vec!["resolve", "t", "o", "k"], vec!["--succeeded"]),
        (
            vec!["resolve", "t", "o", "k", "--not-executed", "--code", "3"],
            vec!["--code"],
        ),
        (
            vec!["list", "--tenant", "bad\u{7}tenant"],
            vec!["tenant", "control character"],
        ),
        (vec!["exec", "t", "o", "k"], vec!["PROGRAM"]),
        (vec!["import", &missing], vec!["no-such-payload"]),
    ];
    for (args, words) in cases {
        let run = idem.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        run.one_error_line(&words);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(idem.db_bytes() == before, "{args:?} changed the store file");
    }
}

#[test]
fn a_directory_as_the_store_exits_1() {
    let idem = Idem::new();
    fs::create_dir(&idem.db).expect("mkdir");
    for args in [
        vec!["begin", "t", "o", "k"],
        vec!["list"],
        vec!["get", "t", "o", "k"],
    ] {
        let run = idem.run(&args);
        run.code(1).one_error_line(&["idem.redb", "directory"]);
    }
    assert!(
        fs::read_dir(&idem.db)
            .expect("still a directory")
            .next()
            .is_none()
    );
}

#[test]
fn a_corrupt_store_exits_1_and_is_not_touched() {
    let idem = Idem::new();
    let garbage: Vec<u8> = (0..65_536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&idem.db, &garbage).expect("write");
    for args in [
        vec!["begin", "t", "o", "k"],
        vec!["list"],
        vec!["get", "t", "o", "k"],
        vec!["check"],
        vec!["sweep"],
    ] {
        let run = idem.run(&args);
        run.code(1).one_error_line(&["idem.redb", "corrupt"]);
        assert!(
            idem.db_bytes() == garbage,
            "{args:?} changed the corrupt file"
        );
    }
}

#[test]
fn a_damaged_store_exits_1_and_is_not_touched() {
    let (idem, mut bytes) = store_with_a_record();
    // Flip bytes in every page past redb's header page, so the damage hits the pages
    // that hold data wherever the allocator put them.
    for page in bytes.chunks_mut(4096).skip(1) {
        for b in page.iter_mut().take(64) {
            *b ^= 0xa5;
        }
    }
    fs::write(&idem.db, &bytes).expect("write");
    let run = idem.run(&["begin", "t", "o", "k"]);
    assert_eq!(run.code, 1, "stdout {} stderr {}", run.stdout, run.stderr);
    run.one_error_line(&["idem.redb"]);
    assert!(idem.db_bytes() == bytes, "a damaged file was changed");
    // The read commands open it read-only, which cannot verify it: each answers from the
    // pages it reads, or meets the damage and says so on one line; none panics.
    let mut corrupt = 0;
    for args in [
        vec!["get", "t", "o", "k"],
        vec!["list"],
        vec!["stats"],
        vec!["export"],
        vec!["sweep", "--dry-run"],
    ] {
        let run = idem.run(&args);
        if run.code != 0 {
            run.code(1).one_error_line(&["corrupt"]);
            corrupt += 1;
        }
        assert!(idem.db_bytes() == bytes, "{args:?} changed a damaged file");
    }
    assert!(corrupt > 0, "no read command met the damage");
}

#[test]
fn after_a_crash_a_read_command_recovers_the_file_and_says_so() {
    let (idem, _) = store_with_a_record();
    // The program kills the idem process running it: the store file stays open, as after
    // a crash of the application writing it.
    let run = idem.run(&["exec", "t", "o", "crash", "--", "sh", "-c", "kill -9 $PPID"]);
    assert_eq!(run.code, -1, "killed by a signal: {run:?}");
    let listed = idem.run(&["list"]);
    listed.code(0);
    assert!(
        listed
            .stderr
            .contains("did not close it cleanly; recovered it before reading"),
        "{}",
        listed.stderr
    );
    // Recovered: the next read needs nothing.
    let got = idem.run(&["get", "t", "o", "k"]);
    got.code(0);
    assert!(got.stderr.is_empty(), "{}", got.stderr);
    idem.run(&["check"]).code(0);
    idem.run(&["get", "t", "o", "crash"]).code(0);
}

#[test]
fn a_bad_import_changes_nothing() {
    let (idem, _) = store_with_a_record();
    let before = idem.run(&["export"]).stdout;
    let bad = idem.file(
        "bad.jsonl",
        b"{\"tenant\":\"t\",\"operation\":\"o\",\"key\":\"z\"}\n",
    );
    let run = idem.run(&["import", &bad]);
    run.code(2).one_error_line(&["line 1"]);
    assert_eq!(idem.run(&["export"]).stdout, before);
}

#[test]
fn reading_commands_do_not_create_a_store() {
    let idem = Idem::new();
    for args in [
        vec!["list"],
        vec!["stats"],
        vec!["check"],
        vec!["compact"],
        vec!["sweep"],
        vec!["export"],
    ] {
        idem.run(&args)
            .code(1)
            .one_error_line(&["idem.redb", "no store file"]);
    }
    assert!(!idem.db.exists());
}

/// The global flags that make no sense for a server are refused by `idem proxy`, naming
/// the flag, before anything listens or opens a store.
#[test]
fn idem_proxy_refuses_the_global_flags_it_cannot_apply() {
    let idem = Idem::new();
    let proxy = [
        "proxy",
        "--upstream",
        "http://127.0.0.1:9",
        "--tenant",
        "shop",
        "--listen",
        "127.0.0.1:0",
    ];
    let mut with_now = vec!["--now", "0"];
    with_now.extend_from_slice(&proxy);
    idem.run(&with_now)
        .code(2)
        .one_error_line(&["--now", "idem proxy", "one command"]);
    let mut with_json = vec!["--json"];
    with_json.extend_from_slice(&proxy);
    idem.run(&with_json)
        .code(2)
        .one_error_line(&["--json", "--access-log"]);
    let mut any_origin = proxy.to_vec();
    any_origin.extend_from_slice(&["--cors-origin", "*"]);
    idem.run(&any_origin)
        .code(2)
        .one_error_line(&["--cors-origin", "name each origin"]);
    assert!(!idem.db.exists(), "no store was opened");
}
