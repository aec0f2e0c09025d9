//! The commands over the whole store (list, stats, sweep, check, compact, export,
//! import), the help texts, `demo` and `bench`.

mod common;

use std::fs;
use std::path::Path;

use common::{Idem, T0, claim};
use serde_json::{Value, json};

const HOUR: u64 = 3_600_000;

/// Records in every state: a/pending, b/succeeded (retention 1h), c/failed (retention 2h),
/// d/unknown, and e/succeeded under tenant u.
fn populated() -> Idem {
    let idem = Idem::new();
    claim(&idem, T0, "a");
    let b = claim(&idem, T0 + 1, "b").to_string();
    idem.at(
        T0 + 2,
        &[
            "complete",
            "t",
            "o",
            "b",
            "--generation",
            &b,
            "--retention",
            "1h",
        ],
    )
    .code(0);
    let c = claim(&idem, T0 + 3, "c").to_string();
    idem.at(
        T0 + 4,
        &[
            "complete",
            "t",
            "o",
            "c",
            "--generation",
            &c,
            "--failed",
            "--code",
            "4",
            "--retention",
            "2h",
        ],
    )
    .code(0);
    let d = claim(&idem, T0 + 5, "d").to_string();
    idem.at(T0 + 6, &["mark-unknown", "t", "o", "d", "--generation", &d])
        .code(0);
    idem.at(T0 + 7, &["begin", "u", "o", "e"]).code(0);
    idem.at(T0 + 8, &["complete", "u", "o", "e", "--generation", "5"])
        .code(0);
    idem
}

fn keys(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["tenant"].as_str().unwrap_or(""),
                r["key"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn list_filters_by_state_tenant_and_limit() {
    let idem = populated();
    let all = idem.at(T0 + 10, &["list"]).json_lines();
    assert_eq!(keys(&all), ["t/a", "t/b", "t/c", "t/d", "u/e"]);
    assert_eq!(all[0]["lease_until"], T0 + 30_000);
    let states: Vec<&str> = all
        .iter()
        .map(|r| r["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        states,
        ["pending", "succeeded", "failed", "unknown", "succeeded"]
    );
    assert_eq!(
        keys(&idem.at(T0, &["list", "--state", "succeeded"]).json_lines()),
        ["t/b", "u/e"]
    );
    assert_eq!(
        keys(&idem.at(T0, &["list", "--tenant", "u"]).json_lines()),
        ["u/e"]
    );
    assert_eq!(
        keys(
            &idem
                .at(T0, &["list", "--operation", "o", "--limit", "2"])
                .json_lines()
        ),
        ["t/a", "t/b"]
    );
    assert!(
        idem.at(T0, &["list", "--tenant", "nobody"])
            .stdout
            .is_empty()
    );
    idem.at(T0, &["list", "--state", "done"])
        .code(2)
        .one_error_line(&["--state", "pending, succeeded"]);
}

#[test]
fn list_prints_an_aligned_table_with_ages() {
    let idem = populated();
    let run = idem.run(&["--now", &(T0 + 3 * 60_000).to_string(), "list"]);
    run.code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", run.stdout);
    assert!(
        lines[0].starts_with("TENANT  OPERATION  KEY  GEN  STATE"),
        "{}",
        lines[0]
    );
    let column = lines[0].find("STATE").unwrap_or(0);
    for line in &lines[1..] {
        assert!(
            line.is_char_boundary(column) && !line[column..].starts_with(' '),
            "misaligned: {line:?}"
        );
    }
    assert!(
        lines[1].ends_with("pending 3m, lease expired"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with("succeeded 2m 59s ago, code 0, expires in 57m"),
        "{}",
        lines[2]
    );
    assert!(lines[4].ends_with("unknown 2m 59s"), "{}", lines[4]);
}

#[test]
fn stats_count_by_state() {
    let idem = populated();
    let mut stats = idem.at(T0 + HOUR + 2, &["stats"]).json();
    let file_bytes = stats["file_bytes"].as_u64().unwrap_or(0);
    assert!(file_bytes > 0);
    // The system clock, beside the floor (the latest time a write used), whatever --now
    // says: an operator compares the two.
    let system_clock = stats
        .as_object_mut()
        .and_then(|o| o.remove("system_clock"))
        .and_then(|v| v.as_u64())
        .expect("system_clock");
    assert!(system_clock > T0 + 365 * 24 * HOUR / 2, "{system_clock}");
    assert_eq!(
        stats,
        json!({"pending": 1, "succeeded": 2, "failed": 1, "unknown": 1, "forgotten": 0, "pending_lease_expired": 1,
               "expired": 1, "oldest_pending_age_ms": HOUR + 2, "oldest_unknown_age_ms": HOUR - 4,
               "file_bytes": file_bytes, "generation": 5, "clock_floor": T0 + 8,
               "intents": {"queued": 0, "in_flight": 0, "completed": 0, "failed": 0,
                           "conflict": 0, "expired": 0, "unknown": 0}})
    );
    let text = idem.run(&["--now", &(T0 + HOUR + 2).to_string(), "stats"]);
    let pending = text.stdout.lines().next().unwrap_or_default();
    let words: Vec<&str> = pending.split_whitespace().collect();
    assert_eq!(words[..2], ["pending", "1"], "{}", text.stdout);
    assert!(
        pending.ends_with("  1 with an expired lease, oldest 1h"),
        "{}",
        text.stdout
    );
}

#[test]
fn sweep_follows_now_leaves_tombstones_and_never_removes_pending_or_unknown() {
    let idem = populated();
    let run = idem.at(T0 + HOUR + 1, &["sweep"]);
    assert_eq!(
        run.json(),
        json!({"removed": 0, "tombstoned": 0, "remaining_expired": false, "dry_run": false})
    );
    let run = idem.at(T0 + 2 * HOUR + 4, &["sweep", "--dry-run"]);
    assert_eq!(
        run.json(),
        json!({"removed": 0, "tombstoned": 2, "remaining_expired": false, "dry_run": true})
    );
    idem.at(T0, &["get", "t", "o", "b"]).code(0);
    let run = idem.at(T0 + 2 * HOUR + 4, &["sweep", "--limit", "1"]);
    assert_eq!(
        run.json(),
        json!({"removed": 0, "tombstoned": 1, "remaining_expired": true, "dry_run": false})
    );
    // b is a tombstone now: get shows it, and a retry of the same request exits 13.
    let tombstone = idem.at(T0 + 2 * HOUR + 5, &["get", "t", "o", "b"]).json();
    assert_eq!(tombstone["state"], "forgotten");
    assert_eq!(tombstone["verdict"], "succeeded");
    assert_eq!(tombstone["completed_at"], T0 + 2);
    assert_eq!(tombstone["expires_at"], T0 + 2 + HOUR + 30 * 24 * HOUR);
    assert!(tombstone.get("outcome_b64").is_none(), "{tombstone}");
    let text = idem.run(&[
        "--now",
        &(T0 + 2 * HOUR + 5).to_string(),
        "get",
        "t",
        "o",
        "b",
    ]);
    assert!(text.code(0).stdout.contains("forgotten"), "{}", text.stdout);
    let retry = idem.run(&[
        "--now",
        &(T0 + 2 * HOUR + 5).to_string(),
        "begin",
        "t",
        "o",
        "b",
    ]);
    retry.code(13);
    assert!(
        retry.stdout.contains("forgotten: generation 2"),
        "{}",
        retry.stdout
    );
    assert_eq!(
        idem.at(T0 + 2 * HOUR + 5, &["begin", "t", "o", "b"]).json()["decision"],
        "forgotten"
    );
    // Far, but behind the system clock: a command that writes refuses a --now ahead of it.
    // Every tombstone's 30 days have passed too.
    let far = T0 + 250 * 24 * HOUR;
    let run = idem.at(far, &["sweep"]).json();
    assert_eq!(
        (run["removed"].as_u64(), run["tombstoned"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(keys(&idem.at(far, &["list"]).json_lines()), ["t/a", "t/d"]);
    // The key is free again after its tombstone's time ended and sweep removed it.
    assert_eq!(claim(&idem, far, "b"), 6);
}

#[test]
fn sweep_without_tombstones_deletes_and_a_late_retry_runs_again() {
    let idem = populated();
    let run = idem.at(T0 + 2 * HOUR + 4, &["sweep", "--tombstones", "0"]);
    assert_eq!(
        run.json(),
        json!({"removed": 2, "tombstoned": 0, "remaining_expired": false, "dry_run": false})
    );
    idem.at(T0 + 2 * HOUR + 5, &["get", "t", "o", "b"]).code(7);
    assert_eq!(claim(&idem, T0 + 2 * HOUR + 5, "b"), 6);
    let bad = idem.run(&["sweep", "--tombstones", "forever"]);
    bad.code(2);
    assert!(bad.stderr.contains("--tombstones"), "{}", bad.stderr);
    assert!(
        bad.stderr.contains("or 0 to keep no tombstone"),
        "{}",
        bad.stderr
    );
}

#[test]
fn check_compact_export_and_import_round_trip() {
    let idem = populated();
    let check = idem.run(&["--json", "check"]);
    check.code(0);
    assert_eq!(check.json()["problems"], json!([]));
    idem.run(&["check"]).code(0);
    let compact = idem.run(&["--json", "compact"]);
    compact.code(0);
    assert!(compact.json()["compacted"].is_boolean());

    let backup = idem.path("backup.jsonl");
    let run = idem.run(&["--json", "export", "--out", &backup.to_string_lossy()]);
    assert_eq!(
        run.json(),
        json!({"exported": 5, "intents": 0, "entities": 0, "unique": 0, "tokens": 0})
    );
    let exported = fs::read_to_string(&backup).expect("backup");
    let to_stdout = idem.run(&["export"]);
    to_stdout.code(0);
    assert_eq!(
        to_stdout.stdout, exported,
        "stdout carries the same records"
    );
    assert_eq!(
        to_stdout.stderr,
        "exported 5 records, 0 intents, 0 entities, 0 claimed values and 0 tokens\n"
    );

    let restored = Idem::new();
    let run = restored.run(&["--json", "import", &backup.to_string_lossy()]);
    assert_eq!(
        run.json(),
        json!({"imported": 5, "intents": 0, "entities": 0, "unique": 0, "tokens": 0})
    );
    assert_eq!(restored.run(&["export"]).stdout, exported);
    // Generations keep increasing after a restore.
    assert_eq!(claim(&restored, T0, "new"), 6);
    let via_stdin = Idem::new();
    via_stdin
        .run_stdin(&["import", "-"], exported.as_bytes())
        .code(0);
    assert_eq!(via_stdin.run(&["export"]).stdout, exported);
}

/// The commands that only read: each runs with a read-only open.
const READS: [&[&str]; 8] = [
    &["get", "t", "o", "b"],
    &["get", "t", "o", "nobody"],
    &["list"],
    &["list", "--state", "unknown", "--limit", "1"],
    &["stats"],
    &["export"],
    &["export", "--out", "backup.jsonl"],
    &["sweep", "--dry-run"],
];

/// What a read printed, with `--json` and without; the exit status checked.
/// `stats`'s output without the system clock, which moves between two runs.
fn without_system_clock(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|line| !line.starts_with("system clock"))
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(mut object)) if object.contains_key("system_clock") => {
                object.remove("system_clock");
                Value::Object(object).to_string()
            }
            _ => line.to_string(),
        })
        .map(|line| line + "\n")
        .collect()
}

fn read_answers(idem: &Idem) -> Vec<(String, String)> {
    let now = (T0 + 2 * HOUR + 4).to_string();
    let mut answers = Vec::new();
    for args in READS {
        for json in [false, true] {
            let mut all = vec!["--now", now.as_str()];
            if json {
                all.push("--json");
            }
            all.extend_from_slice(args);
            let run = idem.run(&all);
            let expected = if args[1..] == ["t", "o", "nobody"] {
                7
            } else {
                0
            };
            run.code(expected);
            answers.push((without_system_clock(&run.stdout), run.stderr));
        }
    }
    answers
}

#[test]
fn read_commands_change_no_byte_of_the_file() {
    let idem = populated();
    let before = idem.db_bytes();
    read_answers(&idem);
    assert!(
        idem.db_bytes() == before,
        "a read command changed the store file"
    );
    // Unlike the maintenance commands, which open it for writing.
    idem.run(&["check"]).code(0);
    assert!(
        idem.db_bytes() != before,
        "check wrote nothing: is it still a writable open?"
    );
}

#[test]
fn read_commands_work_on_a_read_only_file_and_writes_are_refused() {
    let idem = populated();
    let answers = read_answers(&idem);
    let mut permissions = fs::metadata(&idem.db).expect("db").permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&idem.db, permissions).expect("chmod");
    let before = idem.db_bytes();
    // The same answers: no "read-only" refusal (even for root, whom the permission
    // bits would not stop, the file's bytes tell that nothing wrote).
    assert_eq!(read_answers(&idem), answers);
    assert!(
        idem.db_bytes() == before,
        "a read command changed the store file"
    );
    let backup = idem.path("backup.jsonl").to_string_lossy().into_owned();
    for args in [
        vec!["begin", "t", "o", "new"],
        vec!["complete", "t", "o", "a", "--generation", "1"],
        vec!["sweep"],
        vec!["check"],
        vec!["compact"],
        vec!["import", &backup],
    ] {
        idem.run(&args)
            .code(1)
            .one_error_line(&["idem.redb", "read-only"]);
    }
    assert!(
        idem.db_bytes() == before,
        "a refused command changed the store file"
    );
}

#[test]
fn every_command_has_help_with_an_example() {
    let idem = Idem::new();
    let commands = [
        "begin",
        "complete",
        "release",
        "heartbeat",
        "mark-unknown",
        "resolve",
        "exec",
        "get",
        "list",
        "stats",
        "sweep",
        "check",
        "compact",
        "export",
        "import",
        "demo",
        "bench",
    ];
    for command in commands {
        let run = idem.run(&[command, "--help"]);
        run.code(0);
        assert!(
            run.stdout.contains("Example"),
            "{command} --help has no example"
        );
        assert!(
            run.stdout.contains(&format!("idem {command}")) || run.stdout.contains("idem --db"),
            "{command}"
        );
    }
    let top = idem.run(&["--help"]);
    for command in commands {
        assert!(
            top.stdout.contains(command),
            "idem --help does not list {command}"
        );
    }
    assert!(top.stdout.contains("7 not found"));
    assert!(!idem.db.exists(), "help touched the store");
}

#[test]
fn demo_counts_intents_and_effects_from_its_tables() {
    let idem = Idem::new();
    let run = idem.run(&["demo"]);
    run.code(0);
    let result = run
        .stdout
        .lines()
        .find(|l| l.starts_with("Result:"))
        .unwrap_or_default()
        .to_string();
    let numbers: Vec<u64> = result
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 4, "{result}");
    let (intents, requests, effects, duplicates) = (numbers[0], numbers[1], numbers[2], numbers[3]);
    assert_eq!(intents, effects, "{result}");
    assert!(requests > intents, "{result}");
    assert_eq!(duplicates, 0, "{result}");
    for story in ["restart", "twice", "dies", "unknown", "resolve", "sweep"] {
        assert!(
            run.stdout.contains(story),
            "the demo does not tell about {story}"
        );
    }
    assert!(!idem.db.exists(), "the demo touched --db");
}

#[test]
fn bench_prints_a_table_of_measurements() {
    let idem = Idem::new();
    let run = idem.run(&["bench", "--ops", "5"]);
    run.code(0);
    for text in [
        "MEASUREMENT",
        "execute_grouped, group commit",
        "bytes per record",
        "sweep of",
        "DISK CALLS (counted)",
        "execute, one per transaction (single process)",
    ] {
        assert!(run.stdout.contains(text), "{text}: {}", run.stdout);
    }
    let json = idem.run(&["--json", "bench", "--ops", "3"]);
    let lines = json.json_lines();
    let (file, rows) = lines.split_last().unwrap();
    assert_eq!(file["id"], "file", "{file}");
    assert_eq!(file["records"], 1200, "400 records per op");
    assert!(file["bytes_per_record"].as_f64().unwrap() > 0.0, "{file}");
    for row in rows {
        assert!(row["per_second"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
    }
    let row = |id: &str, callers: u64| {
        rows.iter()
            .find(|r| r["id"] == id && r["callers"] == callers)
            .unwrap_or_else(|| panic!("no row {id} at {callers} callers"))
    };
    assert_eq!(row("execute", 1)["ops"], 3);
    assert_eq!(
        row("execute_grouped", 64)["ops"],
        192,
        "3 keys for each of 64 callers"
    );
    assert_eq!(
        row("core_begin", 1)["ops"],
        3000,
        "the pure core gets 1,000 times the calls"
    );
    idem.run(&["bench", "--ops", "0"])
        .code(2)
        .one_error_line(&["--ops"]);
}

#[test]
fn a_now_far_ahead_of_the_system_clock_is_refused_for_writes_only() {
    let idem = populated();
    let before = idem.db_bytes();
    let future = "2099-01-01T00:00:00Z";
    let writes: [&[&str]; 5] = [
        &["sweep"],
        &["begin", "t", "o", "new"],
        &["exec", "t", "o", "new", "--", "true"],
        &["resolve", "t", "o", "d", "--not-executed"],
        &["compact"],
    ];
    for args in writes {
        let mut all = vec!["--now", future];
        all.extend_from_slice(args);
        idem.run(&all).code(2).one_error_line(&[
            "--now",
            "ahead of the system clock",
            "at most 5m",
        ]);
    }
    assert!(idem.db_bytes() == before, "a refused command wrote");
    // Reads take any --now; so does a write at a time in the past.
    idem.run(&["--now", future, "stats"]).code(0);
    idem.run(&["--now", future, "sweep", "--dry-run"]).code(0);
    idem.run(&["--now", future, "get", "t", "o", "b"]).code(0);
    idem.at(T0 + 3 * HOUR, &["sweep"]).code(0);
}

/// A file of the previous schema (`testdata/store-v2.redb`, written by the build of
/// schema 2): the read commands answer from it as it is, read-only, without writing a
/// byte, and answer the same after a writable open upgraded it.
#[test]
fn read_commands_answer_from_a_file_of_the_previous_schema_before_and_after_its_upgrade() {
    let idem = Idem::new();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/store-v2.redb");
    fs::copy(&golden, &idem.db).expect("copy the schema 2 file");
    // The file's last write was at 2023-11-14T22:13:26Z.
    let now = "1700000006000";
    let reads: [&[&str]; 7] = [
        &["get", "shop-7", "sale", "sale-0"],
        &["get", "shop-7", "sale", "sale-1"],
        &["get", "shop-7", "charge", "charge-3"],
        &["list", "--state", "forgotten"],
        &["list", "--state", "succeeded"],
        &["stats"],
        &["sweep", "--dry-run"],
    ];
    let answers = |idem: &Idem| -> Vec<String> {
        reads
            .iter()
            .map(|args| {
                let mut all = vec!["--json", "--now", now];
                all.extend_from_slice(args);
                let run = idem.run(&all);
                run.code(0);
                // The file grows with the upgrade: its size is no answer about records.
                without_system_clock(&run.stdout)
                    .lines()
                    .map(|line| match serde_json::from_str::<Value>(line) {
                        Ok(Value::Object(mut object)) if object.contains_key("file_bytes") => {
                            object.remove("file_bytes");
                            Value::Object(object).to_string() + "\n"
                        }
                        _ => line.to_string() + "\n",
                    })
                    .collect::<String>()
            })
            .collect()
    };
    let mut permissions = fs::metadata(&idem.db).expect("db").permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&idem.db, permissions.clone()).expect("chmod");
    let before = answers(&idem);
    assert!(
        idem.db_bytes() == fs::read(&golden).expect("golden"),
        "a read command changed the file"
    );
    let sale_0: Value = serde_json::from_str(before[0].trim()).expect("json");
    assert_eq!(sale_0["state"], "forgotten", "{sale_0}");
    let sale_1: Value = serde_json::from_str(before[1].trim()).expect("json");
    assert_eq!(sale_1["state"], "succeeded", "{sale_1}");
    let stats: Value = serde_json::from_str(before[5].trim()).expect("json");
    assert_eq!(
        [
            &stats["pending"],
            &stats["succeeded"],
            &stats["failed"],
            &stats["unknown"],
            &stats["forgotten"]
        ],
        [&json!(1), &json!(2), &json!(1), &json!(1), &json!(1)],
        "{stats}"
    );

    #[allow(clippy::permissions_set_readonly_false)] // the test's own file
    permissions.set_readonly(false);
    fs::set_permissions(&idem.db, permissions).expect("chmod");
    idem.run(&["check"]).code(0);
    assert!(
        idem.db_bytes() != fs::read(&golden).expect("golden"),
        "check's writable open did not upgrade the file"
    );
    assert_eq!(answers(&idem), before);
}

/// `idem list | head` and `idem export | head`: the reader goes away, and the command
/// stops quietly with exit 0, as a pipe's writer does.
#[test]
fn a_reader_that_goes_away_stops_a_listing_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let idem = Idem::new();
    let lines: String = (0..20_000)
        .map(|k| {
            format!(
                "{{\"tenant\":\"t\",\"operation\":\"o\",\"key\":\"k{k}\",\"state\":\"pending\",\"generation\":{},\"fingerprint\":\"{}\",\"created_at\":1,\"updated_at\":1,\"lease_until\":2}}\n",
                k + 1,
                "0".repeat(64)
            )
        })
        .collect();
    let input = idem.file("many.jsonl", lines.as_bytes());
    idem.run(&["import", &input]).code(0);
    for args in [vec!["list"], vec!["export"]] {
        let mut child = idem
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?}: a first line");
        drop(out);
        let done = child.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&done.stderr), "", "{args:?}");
    }
}
