//! `idem token`: issue, consume (a program runs at most once per token, replayed to
//! retries), get; refusals exit 8 and 9; bad input exits 2 and changes nothing.

mod common;

use std::fs;

use common::{Idem, Run};

const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

fn runs(idem: &Idem) -> usize {
    fs::read_to_string(idem.path("ran")).map_or(0, |s| s.lines().count())
}

fn issue(idem: &Idem, tenant: &str, extra: &[&str]) -> String {
    let mut args = vec!["token", "issue", tenant, "redeem", "--ttl", "15m"];
    args.extend_from_slice(extra);
    let run = idem.at(T0, &args);
    run.code(0);
    let issued = run.json();
    issued["token"].as_str().unwrap().to_string()
}

fn consume(idem: &Idem, now: u64, tenant: &str, token: &str, script: &str) -> Run {
    let now = now.to_string();
    idem.run(&[
        "--now", &now, "token", "consume", tenant, "redeem", token, "--", "sh", "-c", script,
    ])
}

#[test]
fn a_token_runs_its_program_once_and_replays_it() {
    let idem = Idem::new();
    let token = issue(&idem, "shop-7", &[]);
    assert_eq!(token.len(), 22);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    let script = "echo run >> ran; echo redeemed";
    let first = consume(&idem, T0 + 1, "shop-7", &token, script);
    first.code(0);
    assert_eq!(first.stdout, "redeemed\n");
    // The reply was lost: the retry prints the stored stdout, the program does not run.
    let retry = consume(&idem, T0 + 2, "shop-7", &token, script);
    retry.code(0);
    assert_eq!(retry.stdout, "redeemed\n");
    assert_eq!(runs(&idem), 1);
    // Another command under the same token is a conflict.
    consume(&idem, T0 + 3, "shop-7", &token, "echo other").code(3);
    let before = idem.db_bytes();
    let shown = idem.at(T0 + 4, &["token", "get", "shop-7", "redeem", &token]);
    shown.code(0);
    assert!(idem.db_bytes() == before, "token get only reads");
    let shown = shown.json();
    assert_eq!(shown["used"], "succeeded");
    assert_eq!(shown["expires_at"], T0 + 15 * MINUTE);
    assert_eq!(runs(&idem), 1);
}

#[test]
fn not_issued_and_expired_tokens_exit_8_and_9_and_run_nothing() {
    let idem = Idem::new();
    let token = issue(&idem, "shop-7", &[]);
    // A refusal writes no record (a writable open rewrites redb's header, so the
    // records are compared, not the bytes).
    let export = || idem.run(&["export"]).stdout;
    let before = export();
    let script = "echo run >> ran";
    consume(&idem, T0 + 1, "shop-8", &token, script)
        .code(8)
        .one_error_line(&["not issued", "shop-8"]);
    consume(&idem, T0 + 1, "shop-7", "AAAAAAAAAAAAAAAAAAAAAA", script).code(8);
    consume(&idem, T0 + 15 * MINUTE, "shop-7", &token, script)
        .code(9)
        .one_error_line(&["expired"]);
    idem.at(T0, &["token", "get", "shop-8", "redeem", &token])
        .code(8)
        .one_error_line(&["no such token", "shop-8"]);
    assert_eq!(runs(&idem), 0);
    assert_eq!(export(), before);
    let shown = idem.at(T0 + 1, &["token", "get", "shop-7", "redeem", &token]);
    assert_eq!(shown.code(0).json()["used"], serde_json::Value::Null);
    // A program's exit 75 gives the token back.
    consume(&idem, T0 + 2, "shop-7", &token, "echo run >> ran; exit 75").code(75);
    consume(&idem, T0 + 3, "shop-7", &token, "echo run >> ran").code(0);
    assert_eq!(runs(&idem), 2);
}

#[test]
fn issuing_for_an_intent_answers_the_same_token() {
    let idem = Idem::new();
    let first = issue(&idem, "shop-7", &["--intent", "order-991"]);
    let again = idem.at(
        T0 + 5,
        &[
            "token",
            "issue",
            "shop-7",
            "redeem",
            "--ttl",
            "15m",
            "--intent",
            "order-991",
        ],
    );
    again.code(0);
    let again = again.json();
    assert_eq!(again["token"], first.as_str());
    assert_eq!(again["new"], false);
    // Text output is the token alone, for TOKEN=$(idem token issue ...).
    let text = idem.run(&[
        "--now",
        "1700000000010",
        "token",
        "issue",
        "shop-7",
        "redeem",
        "--ttl",
        "15m",
        "--intent",
        "order-991",
    ]);
    text.code(0);
    assert_eq!(text.stdout, format!("{first}\n"));
}

#[test]
fn bad_input_names_the_field_and_the_rule_and_changes_nothing() {
    let idem = Idem::new();
    let token = issue(&idem, "shop-7", &[]);
    let before = idem.db_bytes();
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["token", "issue", "shop-7", "redeem", "--ttl", "0s"],
            &["--ttl", "at least 1ms"],
        ),
        (
            &["token", "issue", "shop-7", "redeem", "--ttl", "2d"],
            &["ttl: 172800000 ms", "at most the store's retention"],
        ),
        (
            &[
                "token", "issue", "shop-7", "redeem", "--ttl", "1m", "--intent", "",
            ],
            &["intent: 0 bytes"],
        ),
        (
            &[
                "token",
                "consume",
                "shop-7",
                "redeem",
                &token[1..],
                "--",
                "true",
            ],
            &["token: 21 characters, expected 22"],
        ),
        (
            &[
                "token",
                "consume",
                "shop-7",
                "redeem",
                "AAAAAAAAAAA+AAAAAAAAAA",
                "--",
                "true",
            ],
            &["token: '+' at offset 11", "URL-safe base64"],
        ),
        (
            &["token", "get", "shop-7", "redeem", "AAAAAAAAAAAAAAAAAAAAAB"],
            &["token: the last character sets bits beyond 128"],
        ),
    ];
    for (args, words) in cases {
        let mut all = vec!["--now", "1700000000001"];
        all.extend_from_slice(args);
        idem.run(&all).code(2).one_error_line(words);
    }
    assert!(idem.db_bytes() == before, "bad input changed the file");
}

#[test]
fn help_lists_the_token_commands_and_their_exit_statuses() {
    let idem = Idem::new();
    let help = idem.run(&["--help"]);
    help.code(0);
    assert!(help.stdout.contains("token "), "{}", help.stdout);
    assert!(
        help.stdout.contains("8 token not issued"),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("9 token expired"), "{}", help.stdout);
    let help = idem.run(&["token", "--help"]);
    for command in ["issue", "consume", "get"] {
        assert!(help.stdout.contains(command), "{}", help.stdout);
    }
}

#[test]
fn sweep_deletes_expired_tokens_and_keeps_used_ones_replayed() {
    let idem = Idem::new();
    let used = issue(&idem, "shop-7", &[]);
    let unused = issue(&idem, "shop-7", &[]);
    consume(&idem, T0 + 1, "shop-7", &used, "echo run >> ran; echo ok").code(0);
    let late = T0 + 15 * MINUTE;
    let swept = idem.at(late, &["token", "sweep", "--limit", "1"]);
    assert_eq!(swept.code(0).json()["remaining_expired"], true);
    let swept = idem.at(late, &["token", "sweep"]);
    assert_eq!(swept.code(0).json()["removed"], 1);
    consume(&idem, late, "shop-7", &unused, "echo run >> ran").code(8);
    let replay = consume(&idem, late, "shop-7", &used, "echo run >> ran; echo ok");
    replay.code(0);
    assert_eq!(replay.stdout, "ok\n");
    assert_eq!(runs(&idem), 1);
}

#[test]
fn a_token_that_starts_with_a_hyphen_is_a_token() {
    let idem = Idem::new();
    // Tokens are random: one in 32 starts with '-'. This one does, by construction.
    let token = "-Kc0IfkMMcCwK5clrIKrgQ";
    let run = consume(&idem, T0, "shop-7", token, "true");
    run.code(8).one_error_line(&["not issued"]);
}
