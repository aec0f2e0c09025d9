//! The receiver protocol through the CLI: begin, complete, release, heartbeat,
//! mark-unknown, resolve and get, with the exact JSON shapes and exit statuses of the
//! CLI contract, driven by `--now`.

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{Idem, SHA_ABC, SHA_EMPTY, T0, claim};
use serde_json::json;

#[test]
fn begin_claims_then_answers_in_progress_then_replays() {
    let idem = Idem::new();
    let run = idem.at(T0, &["begin", "t", "o", "k"]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"decision": "claimed", "generation": 1, "lease_until": T0 + 30_000})
    );

    let run = idem.at(T0 + 1_000, &["begin", "t", "o", "k"]);
    run.code(4);
    assert_eq!(
        run.json(),
        json!({"decision": "in_progress", "generation": 1, "lease_until": T0 + 30_000})
    );

    let body = b"receipt \x00\xff";
    let outcome = idem.file("outcome.bin", body);
    idem.at(
        T0 + 2_000,
        &[
            "complete",
            "t",
            "o",
            "k",
            "--generation",
            "1",
            "--code",
            "201",
            "--outcome",
            &outcome,
        ],
    )
    .code(0);

    let run = idem.at(T0 + 3_000, &["begin", "t", "o", "k"]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({
            "decision": "replay",
            "state": "succeeded",
            "code": 201,
            "outcome_b64": BASE64.encode(body),
            "completed_at": T0 + 2_000,
        })
    );
}

#[test]
fn another_payload_under_a_live_key_is_a_conflict() {
    let idem = Idem::new();
    let abc = idem.file("abc", b"abc");
    idem.at(T0, &["begin", "t", "o", "k", "--payload", &abc])
        .code(0);
    let other = idem.file("other", b"abd");
    let run = idem.at(T0, &["begin", "t", "o", "k", "--payload", &other]);
    run.code(3);
    assert_eq!(
        run.json(),
        json!({"decision": "conflict", "state": "pending", "stored_fingerprint": SHA_ABC})
    );
    // No payload at all is the empty payload, also a different request.
    let run = idem.at(T0, &["begin", "t", "o", "k"]);
    run.code(3);
    // The same bytes, from stdin or as a fingerprint, are the same request.
    let mut args = vec!["--json".to_string(), "--now".into(), T0.to_string()];
    args.extend(["begin", "t", "o", "k", "--payload", "-"].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    idem.run_stdin(&refs, b"abc").code(4);
    idem.at(
        T0,
        &[
            "begin",
            "t",
            "o",
            "k",
            "--fingerprint",
            &SHA_ABC.to_uppercase(),
        ],
    )
    .code(4);
}

#[test]
fn an_expired_lease_turns_unknown_until_resolved() {
    let idem = Idem::new();
    let run = idem.at(T0, &["begin", "t", "o", "k", "--lease", "500ms"]);
    assert_eq!(run.json()["lease_until"], T0 + 500);
    idem.at(T0 + 499, &["begin", "t", "o", "k"]).code(4);
    let run = idem.at(T0 + 500, &["begin", "t", "o", "k"]);
    run.code(5);
    assert_eq!(run.json(), json!({"decision": "unknown", "generation": 1}));
    // Unknown never expires by time.
    idem.at(T0 + 400 * 86_400_000, &["begin", "t", "o", "k"])
        .code(5);

    let out = idem.file("out", b"declined");
    let run = idem.at(
        T0 + 600,
        &[
            "resolve",
            "t",
            "o",
            "k",
            "--failed",
            "--code",
            "-9",
            "--outcome",
            &out,
        ],
    );
    run.code(0);
    assert_eq!(run.json()["state"], "failed");
    let run = idem.at(T0 + 700, &["begin", "t", "o", "k"]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"decision": "replay", "state": "failed", "code": -9, "outcome_b64": BASE64.encode("declined"), "completed_at": T0 + 600})
    );
}

#[test]
fn resolve_keeps_the_outcome_for_its_retention() {
    let idem = Idem::new();
    for (key, retention, kept_ms) in [("a", None, 86_400_000), ("b", Some("7d"), 7 * 86_400_000)] {
        let generation = common::claim(&idem, T0, key).to_string();
        idem.at(
            T0 + 1,
            &["mark-unknown", "t", "o", key, "--generation", &generation],
        )
        .code(0);
        let mut args = vec!["resolve", "t", "o", key, "--succeeded"];
        args.extend(retention.iter().flat_map(|r| ["--retention", *r]));
        idem.at(T0 + 10, &args).code(0);
        let record = idem.run(&["--json", "get", "t", "o", key]).json();
        assert_eq!(record["expires_at"], T0 + 10 + kept_ms, "{key}: {record}");
    }
    // A duration that does not parse: usage error, the record as it was.
    idem.at(
        T0 + 20,
        &["resolve", "t", "o", "a", "--failed", "--retention", "1x"],
    )
    .code(2);
    assert_eq!(
        idem.run(&["--json", "get", "t", "o", "a"]).json()["state"],
        "succeeded"
    );
}

#[test]
fn heartbeat_renews_the_lease() {
    let idem = Idem::new();
    idem.at(T0, &["begin", "t", "o", "k", "--lease", "10s"])
        .code(0);
    let run = idem.at(
        T0 + 8_000,
        &[
            "heartbeat",
            "t",
            "o",
            "k",
            "--generation",
            "1",
            "--lease",
            "10s",
        ],
    );
    run.code(0);
    assert_eq!(run.json()["lease_until"], T0 + 18_000);
    idem.at(T0 + 15_000, &["begin", "t", "o", "k"]).code(4);
    idem.at(T0 + 18_000, &["begin", "t", "o", "k"]).code(5);
}

#[test]
fn stale_generations_and_wrong_states_exit_6() {
    let idem = Idem::new();
    let generation = claim(&idem, T0, "k").to_string();
    let run = idem.at(T0, &["complete", "t", "o", "k", "--generation", "99"]);
    run.code(6).one_error_line(&["generation 99", "stale"]);
    idem.at(
        T0,
        &["complete", "t", "o", "k", "--generation", &generation],
    )
    .code(0);
    // A settled outcome never changes.
    idem.at(
        T0,
        &[
            "complete",
            "t",
            "o",
            "k",
            "--generation",
            &generation,
            "--failed",
        ],
    )
    .code(6);
    idem.at(
        T0,
        &["heartbeat", "t", "o", "k", "--generation", &generation],
    )
    .code(6);
    idem.at(T0, &["release", "t", "o", "k", "--generation", &generation])
        .code(6);
    idem.at(
        T0,
        &["mark-unknown", "t", "o", "k", "--generation", &generation],
    )
    .code(6);
    idem.at(T0, &["resolve", "t", "o", "k", "--not-executed"])
        .code(6)
        .one_error_line(&["succeeded", "unknown"]);
    assert_eq!(
        idem.at(T0, &["get", "t", "o", "k"]).json()["state"],
        "succeeded"
    );
}

#[test]
fn missing_records_exit_7_and_create_no_file() {
    let idem = Idem::new();
    idem.at(T0, &["get", "t", "o", "k"])
        .code(7)
        .one_error_line(&["t/o/k", "no record"]);
    idem.at(T0, &["complete", "t", "o", "k", "--generation", "1"])
        .code(7);
    assert!(!idem.db.exists(), "a read made the store file");
    claim(&idem, T0, "other");
    idem.at(T0, &["get", "t", "o", "k"]).code(7);
    idem.at(T0, &["complete", "t", "o", "k", "--generation", "1"])
        .code(7);
    idem.at(T0, &["heartbeat", "t", "o", "k", "--generation", "1"])
        .code(7);
    idem.at(T0, &["release", "t", "o", "k", "--generation", "1"])
        .code(7);
    idem.at(T0, &["mark-unknown", "t", "o", "k", "--generation", "1"])
        .code(7);
    idem.at(T0, &["resolve", "t", "o", "k", "--succeeded"])
        .code(7);
}

#[test]
fn release_frees_the_key_for_a_new_generation() {
    let idem = Idem::new();
    assert_eq!(claim(&idem, T0, "k"), 1);
    let run = idem.at(T0, &["release", "t", "o", "k", "--generation", "1"]);
    run.code(0);
    assert_eq!(run.json(), json!({"released": true, "generation": 1}));
    idem.at(T0, &["get", "t", "o", "k"]).code(7);
    assert_eq!(claim(&idem, T0, "k"), 2);
}

#[test]
fn mark_unknown_then_not_executed_frees_the_key() {
    let idem = Idem::new();
    claim(&idem, T0, "k");
    let run = idem.at(
        T0 + 5,
        &["mark-unknown", "t", "o", "k", "--generation", "1"],
    );
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"tenant": "t", "operation": "o", "key": "k", "state": "unknown", "generation": 1,
               "fingerprint": SHA_EMPTY, "created_at": T0, "updated_at": T0 + 5})
    );
    idem.at(T0 + 10, &["begin", "t", "o", "k"]).code(5);
    let run = idem.at(T0 + 20, &["resolve", "t", "o", "k", "--not-executed"]);
    run.code(0);
    assert_eq!(run.json(), json!({"resolved": "not_executed"}));
    assert_eq!(claim(&idem, T0 + 30, "k"), 2);
}

#[test]
fn get_prints_the_record_shapes() {
    let idem = Idem::new();
    claim(&idem, T0, "k");
    let run = idem.at(T0 + 1, &["get", "t", "o", "k"]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"tenant": "t", "operation": "o", "key": "k", "state": "pending", "generation": 1,
               "fingerprint": SHA_EMPTY, "created_at": T0, "updated_at": T0, "lease_until": T0 + 30_000})
    );
    let out = idem.file("out", b"ok");
    let run = idem.at(
        T0 + 7,
        &[
            "complete",
            "t",
            "o",
            "k",
            "--generation",
            "1",
            "--outcome",
            &out,
            "--retention",
            "1h",
        ],
    );
    let settled = json!({"tenant": "t", "operation": "o", "key": "k", "state": "succeeded", "generation": 1,
        "fingerprint": SHA_EMPTY, "created_at": T0, "updated_at": T0 + 7, "expires_at": T0 + 7 + 3_600_000,
        "completed_at": T0 + 7, "code": 0, "outcome_b64": "b2s="});
    assert_eq!(run.json(), settled);
    assert_eq!(idem.at(T0 + 8, &["get", "t", "o", "k"]).json(), settled);
    // The text form names every field for people.
    let text = idem.run(&["--now", &(T0 + 60_007).to_string(), "get", "t", "o", "k"]);
    text.code(0);
    assert!(
        text.stdout
            .contains("succeeded 1m ago, code 0, expires in 59m"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("2025-03-01T12:00:00.007Z"),
        "{}",
        text.stdout
    );
}

#[test]
fn failed_completions_default_to_code_1() {
    let idem = Idem::new();
    claim(&idem, T0, "k");
    idem.at(
        T0,
        &["complete", "t", "o", "k", "--generation", "1", "--failed"],
    )
    .code(0);
    let replay = idem.at(T0, &["begin", "t", "o", "k"]).json();
    assert_eq!(
        (replay["state"].clone(), replay["code"].clone()),
        (json!("failed"), json!(1))
    );
}

#[test]
fn now_takes_rfc3339_with_offsets_and_integer_ms() {
    let idem = Idem::new();
    let run = idem.run(&[
        "--json",
        "--now",
        "2025-03-01T14:00:00+02:00",
        "begin",
        "t",
        "o",
        "a",
    ]);
    assert_eq!(run.json()["lease_until"], T0 + 30_000);
    let run = idem.run(&[
        "--json",
        "--now",
        "2025-03-01T12:00:00.250Z",
        "begin",
        "t",
        "o",
        "b",
    ]);
    assert_eq!(run.json()["lease_until"], T0 + 30_250);
    // In time order: a write never uses a time behind the last one (the clock floor).
    let run = idem.run(&[
        "begin",
        "t",
        "o",
        "c",
        "--json",
        "--now",
        &(T0 + 1_000).to_string(),
    ]);
    assert_eq!(
        run.json()["lease_until"],
        T0 + 31_000,
        "global flags after the command"
    );
    let text = idem.run(&["--now", "2025-03-01T12:00:10Z", "begin", "t", "o", "c"]);
    text.code(4);
    assert!(
        text.stdout.contains("2025-03-01T12:00:31Z (in 21s)"),
        "{}",
        text.stdout
    );
}

#[test]
fn idem_db_names_the_default_store() {
    let idem = Idem::new();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .env("IDEM_DB", idem.path("env.redb"))
        .current_dir(idem.dir.path());
    command.args(["--json", "begin", "t", "o", "k"]);
    let run = idem.run_with(command, b"");
    run.code(0);
    assert!(idem.path("env.redb").exists());
    assert!(!idem.path("idem.redb").exists());
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .env_remove("IDEM_DB")
        .current_dir(idem.dir.path())
        .args(["begin", "t", "o", "k"]);
    idem.run_with(command, b"").code(0);
    assert!(
        idem.path("idem.redb").exists(),
        "./idem.redb is the last default"
    );
}

/// A pending key is resolved in one step once its lease ended; while it runs, only with
/// --force and the claim's generation.
#[test]
fn a_pending_key_is_resolved_in_one_step() {
    let idem = Idem::new();
    let generation = claim(&idem, T0, "k").to_string();
    // The lease (30 s) runs: its executor may still be working.
    idem.at(T0 + 1_000, &["resolve", "t", "o", "k", "--not-executed"])
        .code(4)
        .one_error_line(&["pending", "generation 1", "--force --generation 1"]);
    // --force with another generation is refused the same way.
    idem.at(
        T0 + 1_000,
        &[
            "resolve",
            "t",
            "o",
            "k",
            "--not-executed",
            "--force",
            "--generation",
            "9",
        ],
    )
    .code(4);
    idem.run(&["resolve", "t", "o", "k", "--force"]).code(2);
    let forced = idem.at(
        T0 + 1_000,
        &[
            "resolve",
            "t",
            "o",
            "k",
            "--succeeded",
            "--code",
            "201",
            "--force",
            "--generation",
            &generation,
        ],
    );
    forced.code(0);
    assert_eq!(
        idem.at(T0 + 2_000, &["get", "t", "o", "k"]).json()["state"],
        "succeeded"
    );

    // Past its lease, no flag is needed.
    claim(&idem, T0, "silent");
    idem.at(
        T0 + 31_000,
        &["resolve", "t", "o", "silent", "--not-executed"],
    )
    .code(0);
    idem.at(T0 + 32_000, &["get", "t", "o", "silent"]).code(7);
    assert_eq!(claim(&idem, T0 + 33_000, "silent"), 3);
}

/// A key not found under the operation given names the operations it has a record
/// under: a request through the proxy is recorded under its method and path.
#[test]
fn a_key_under_another_operation_is_named() {
    let idem = Idem::new();
    idem.at(T0, &["begin", "shop", "POST /orders", "k-1"])
        .code(0);
    idem.at(T0, &["resolve", "shop", "order", "k-1", "--not-executed"])
        .code(7)
        .one_error_line(&["no record", "\"POST /orders\""]);
}
