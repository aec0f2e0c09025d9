//! `idem transition` and `idem entity get|list`: a state machine and a version check on
//! business entities.

mod common;

use common::{Idem, T0};
use serde_json::json;

const PAYMENT: &str = r#"{"states": ["created", "paid", "refunded"], "initial": "created",
  "moves": [["created", "paid"], ["paid", "refunded"]]}"#;

#[test]
fn moves_are_applied_once_checked_by_machine_and_version() {
    let idem = Idem::new();
    let machine = idem.file("payment.json", PAYMENT.as_bytes());
    let mv = |to: &str, extra: &[&str]| {
        let mut args = vec![
            "transition",
            "shop",
            "payment",
            "p-1",
            to,
            "--machine",
            &machine,
        ];
        args.extend_from_slice(extra);
        idem.at(T0, &args)
    };
    let run = mv("created", &[]);
    run.code(0);
    assert_eq!(
        run.json(),
        json!({"decision": "applied", "state": "created", "version": 1, "updated_at": T0})
    );
    mv("paid", &["--expected-version", "1"]).code(0);
    let again = mv("paid", &[]);
    again.code(0);
    assert_eq!(again.json()["decision"], "already_there");
    let back = mv("created", &[]);
    back.code(6);
    assert_eq!(
        back.json(),
        json!({"decision": "illegal", "from": "paid", "to": "created"})
    );
    let stale = mv("refunded", &["--expected-version", "1"]);
    stale.code(6);
    assert_eq!(
        stale.json(),
        json!({"decision": "version_mismatch", "expected": 1, "current": 2})
    );
    mv("refunded", &["--expected-version", "2"]).code(0);
    let entity = idem
        .at(T0, &["entity", "get", "shop", "payment", "p-1"])
        .json();
    assert_eq!(
        entity,
        json!({"tenant": "shop", "kind": "payment", "id": "p-1", "state": "refunded",
               "version": 3, "updated_at": T0})
    );
    let text = idem.run(&["entity", "get", "shop", "payment", "p-1"]);
    assert!(text.stdout.contains("refunded"), "{}", text.stdout);
    let listed = idem
        .at(T0, &["entity", "list", "payment", "--state", "refunded"])
        .json_lines();
    assert_eq!(listed, [entity]);
    assert!(
        idem.at(T0, &["entity", "list", "payment", "--state", "paid"])
            .stdout
            .is_empty()
    );
}

#[test]
fn bad_input_is_named_and_changes_nothing() {
    let idem = Idem::new();
    let machine = idem.file("payment.json", PAYMENT.as_bytes());
    idem.at(
        T0,
        &[
            "transition",
            "shop",
            "payment",
            "p-1",
            "created",
            "--machine",
            &machine,
        ],
    )
    .code(0);
    let before = idem.db_bytes();
    let bad = idem.file(
        "bad.json",
        br#"{"states": ["a"], "initial": "a", "moves": [["a", "b"]]}"#,
    );
    idem.run(&[
        "transition",
        "shop",
        "payment",
        "p-1",
        "a",
        "--machine",
        &bad,
    ])
    .code(2)
    .one_error_line(&["--machine", "moves: \"b\" is not one of the states"]);
    let not_json = idem.file("not.json", b"states: a");
    idem.run(&[
        "transition",
        "shop",
        "payment",
        "p-1",
        "a",
        "--machine",
        &not_json,
    ])
    .code(2)
    .one_error_line(&["--machine"]);
    idem.run(&["transition", "shop", "", "p-1", "a", "--machine", &machine])
        .code(2)
        .one_error_line(&["kind: empty"]);
    idem.run(&[
        "transition",
        "shop",
        "payment",
        "p-1",
        "paid",
        "--machine",
        "/nonexistent.json",
    ])
    .code(2)
    .one_error_line(&["--machine", "cannot read"]);
    assert!(idem.db_bytes() == before, "a refused move wrote");
    idem.run(&["entity", "get", "shop", "payment", "p-2"])
        .code(7)
        .one_error_line(&["never moved"]);
}
