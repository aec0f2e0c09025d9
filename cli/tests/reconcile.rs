//! `idem reconcile --with PROGRAM`: silent claims turn unknown, then a checker's exit
//! status settles each unknown record; a checker that gives no answer stops the run and
//! changes nothing of its record.

mod common;

use common::{Idem, T0, claim};
use serde_json::{Value, json};

/// A checker that answers by key: a succeeded with a receipt, b failed, c and e not
/// executed, d cannot tell, any other no answer; it logs every key it was asked about.
const CHECKER: &str = r#"#!/bin/sh
echo "$IDEM_KEY $IDEM_GENERATION $IDEM_TENANT $IDEM_OPERATION" >> asked
case "$IDEM_KEY" in
  a) printf 'receipt for %s' "$IDEM_KEY"; exit 0 ;;
  b) printf 'declined'; exit 10 ;;
  c|e) exit 11 ;;
  d) exit 12 ;;
  *) exit 3 ;;
esac
"#;

fn script(idem: &Idem, name: &str, text: &str) -> String {
    let path = idem.file(name, text.as_bytes());
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&path, permissions).unwrap();
    path
}

/// Unknown records under the keys given, made by begin and mark-unknown.
fn unknown(idem: &Idem, keys: &[&str]) {
    for key in keys {
        let generation = claim(idem, T0, key).to_string();
        idem.at(
            T0 + 1,
            &["mark-unknown", "t", "o", key, "--generation", &generation],
        )
        .code(0);
    }
}

fn record(idem: &Idem, key: &str) -> Value {
    idem.run(&["--json", "get", "t", "o", key]).json()
}

fn asked(idem: &Idem) -> Vec<String> {
    std::fs::read_to_string(idem.path("asked"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn each_answer_settles_its_record_and_the_summary_counts_them() {
    let idem = Idem::new();
    unknown(&idem, &["a", "b", "c", "d"]);
    // A claim whose executor went silent: its 1 s lease ran out.
    idem.at(T0 + 2, &["begin", "t", "o", "e", "--lease", "1s"])
        .code(0);
    let checker = script(&idem, "check.sh", CHECKER);
    let run = idem.at(T0 + 10_000, &["reconcile", "--with", &checker]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"abandoned_turned_unknown": 1, "examined": 5, "succeeded": 1, "failed": 1,
               "not_executed": 2, "undecided": 1, "changed_meanwhile": 0, "remaining": false})
    );
    assert_eq!(asked(&idem), ["a", "b", "c", "d", "e"], "oldest first");
    let a = record(&idem, "a");
    assert_eq!(
        (a["state"].as_str(), a["code"].as_i64()),
        (Some("succeeded"), Some(0))
    );
    assert_eq!(a["outcome_b64"], "cmVjZWlwdCBmb3IgYQ==");
    assert_eq!(record(&idem, "b")["state"], "failed");
    idem.run(&["get", "t", "o", "c"]).code(7);
    assert_eq!(record(&idem, "d")["state"], "unknown");
    idem.run(&["get", "t", "o", "e"]).code(7);
}

#[test]
fn settled_outcomes_are_kept_for_the_retention_given() {
    let idem = Idem::new();
    unknown(&idem, &["a", "b"]);
    let checker = script(&idem, "check.sh", CHECKER);
    idem.at(
        T0 + 10_000,
        &["reconcile", "--retention", "2h", "--with", &checker],
    )
    .code(0);
    for key in ["a", "b"] {
        assert_eq!(
            record(&idem, key)["expires_at"],
            T0 + 10_000 + 7_200_000,
            "{key}"
        );
    }
}

#[test]
fn an_answer_that_is_no_answer_stops_the_run_and_leaves_its_record() {
    let idem = Idem::new();
    unknown(&idem, &["a", "m", "z"]);
    let checker = script(&idem, "check.sh", CHECKER);
    let run = idem.at(T0 + 10, &["reconcile", "--with", &checker]);
    run.code(1)
        .one_error_line(&["t/o/m", "PROGRAM exited 3", "not an answer", "unchanged"]);
    assert_eq!(
        record(&idem, "a")["state"],
        "succeeded",
        "the one before stays"
    );
    assert_eq!(record(&idem, "m")["state"], "unknown");
    assert_eq!(
        record(&idem, "z")["state"],
        "unknown",
        "the ones after are not asked"
    );
    assert_eq!(asked(&idem), ["a", "m"]);
}

#[test]
fn a_checker_that_cannot_run_changes_nothing() {
    let idem = Idem::new();
    unknown(&idem, &["a"]);
    let not_executable = idem.file("check.sh", CHECKER.as_bytes());
    idem.at(T0 + 10, &["reconcile", "--with", &not_executable])
        .code(2)
        .one_error_line(&["t/o/a", "PROGRAM: cannot run", "unchanged"]);
    idem.at(T0 + 10, &["reconcile", "--with", "/nonexistent/checker"])
        .code(2)
        .one_error_line(&["cannot run /nonexistent/checker"]);
    assert_eq!(record(&idem, "a")["state"], "unknown");
    // A signal is no answer either.
    let killed = script(&idem, "killed.sh", "#!/bin/sh\nkill -KILL $$\n");
    idem.at(T0 + 10, &["reconcile", "--with", &killed])
        .code(1)
        .one_error_line(&["signal 9"]);
    assert_eq!(record(&idem, "a")["state"], "unknown");
}

#[test]
fn bad_input_is_refused_before_anything_changes() {
    let idem = Idem::new();
    unknown(&idem, &["a"]);
    let checker = script(&idem, "check.sh", CHECKER);
    let before = idem.db_bytes();
    idem.run(&["reconcile", "--with", &checker, "--frobnicate"])
        .code(2);
    idem.run(&["reconcile"]).code(2).one_error_line(&["--with"]);
    idem.run(&["reconcile", "--limit", "x", "--with", &checker])
        .code(2);
    assert!(idem.db_bytes() == before, "a refused command wrote");
    // On a read-only file: refused with the reason, the file as it was.
    let mut permissions = std::fs::metadata(&idem.db).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&idem.db, permissions).unwrap();
    idem.at(T0 + 10, &["reconcile", "--with", &checker])
        .code(1)
        .one_error_line(&["read-only"]);
    assert!(
        idem.db_bytes() == before,
        "reconcile wrote to a read-only file"
    );
    assert!(
        asked(&idem).is_empty(),
        "the checker ran on a read-only store"
    );
}

#[test]
fn a_limit_reconciles_the_oldest_and_says_more_remain() {
    let idem = Idem::new();
    unknown(&idem, &["a", "b", "c"]);
    let checker = script(&idem, "check.sh", CHECKER);
    let run = idem.at(T0 + 10, &["reconcile", "--limit", "2", "--with", &checker]);
    run.code(0);
    let summary = run.json();
    assert_eq!(
        (summary["examined"].as_u64(), summary["remaining"].as_bool()),
        (Some(2), Some(true))
    );
    let text = idem.run(&[
        "--now",
        &(T0 + 10).to_string(),
        "reconcile",
        "--with",
        &checker,
    ]);
    text.code(0);
    assert!(
        text.stdout
            .starts_with("reconciled 1 unknown records: 0 succeeded, 0 failed, 1 not executed"),
        "{}",
        text.stdout
    );
}
