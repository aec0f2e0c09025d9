//! `idem intents list|get|resolve`: the outbox's intents, read without writing, and the
//! resolution of an expired one.

mod common;

use common::{Idem, T0};
use idem_core::{Fingerprint, IntentState, LedgerConfig, LedgerError, Reply, Timestamp};
use idem_store::Store;
use idem_store::outbox::OutboxError;

/// Two intents in the file: one completed, one queued.
fn with_intents(idem: &Idem) -> (String, String) {
    let store = Store::open(&idem.db).unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(1)).unwrap();
    let enqueue = |n: u8| {
        outbox
            .enqueue(
                "sale.forward",
                vec![n],
                Fingerprint::of_bytes(&[n]),
                Timestamp(T0),
                [n; 16],
            )
            .unwrap()
            .key
    };
    let (done, waiting) = (enqueue(1), enqueue(2));
    outbox.due(Timestamp(T0), 1).unwrap();
    let reply = Reply {
        status: 201,
        body: b"receipt".to_vec(),
        retry_at: None,
    };
    outbox
        .record_reply(&done, reply, Timestamp(T0 + 1))
        .unwrap();
    (done, waiting)
}

#[test]
fn list_and_get_show_the_outbox() {
    let idem = Idem::new();
    let (done, waiting) = with_intents(&idem);
    let before = idem.db_bytes();
    let all = idem.at(T0 + 2, &["intents", "list"]).json_lines();
    let states: Vec<(&str, &str)> = all
        .iter()
        .map(|v| (v["key"].as_str().unwrap(), v["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [(done.as_str(), "completed"), (waiting.as_str(), "queued")]
    );
    assert_eq!(all[0]["code"], 201);
    assert_eq!(all[0]["outcome_b64"], "cmVjZWlwdA==");
    let queued = idem
        .at(T0 + 2, &["intents", "list", "--state", "queued"])
        .json_lines();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0]["key"], waiting.as_str());
    let one = idem.at(T0 + 2, &["intents", "get", &done]).json();
    assert_eq!(one, all[0]);
    let text = idem.run(&["--now", &(T0 + 2).to_string(), "intents", "list"]);
    text.code(0);
    assert!(text.stdout.starts_with("KEY"), "{}", text.stdout);
    assert!(
        text.stdout.contains("completed, code 201"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("queued, due now"), "{}", text.stdout);
    let text = idem.run(&["intents", "get", &waiting]);
    text.code(0);
    assert!(text.stdout.contains("sale.forward"), "{}", text.stdout);
    assert!(idem.db_bytes() == before, "a read wrote");
}

#[test]
fn a_missing_intent_or_a_bad_state_is_named() {
    let idem = Idem::new();
    with_intents(&idem);
    idem.run(&["intents", "get", "0190b7c2-0000-7000-8000-000000000000"])
        .code(7)
        .one_error_line(&["no intent under this key"]);
    idem.run(&["intents", "list", "--state", "lost"])
        .code(2)
        .one_error_line(&["expected one of queued"]);
    let empty = Idem::new();
    empty
        .run(&["intents", "list"])
        .code(1)
        .one_error_line(&["no store file"]);
}

/// An intent that expired without an answer, and one still queued; the time after both.
fn with_expired(idem: &Idem) -> (String, String, u64) {
    let store = Store::open(&idem.db).unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(1)).unwrap();
    let fp = Fingerprint::of_bytes(b"sale");
    let expired = outbox
        .enqueue("sale.forward", b"sale".to_vec(), fp, Timestamp(T0), [1; 16])
        .unwrap();
    let late = expired.deadline;
    assert!(outbox.due(late, 10).unwrap().is_empty());
    let queued = outbox
        .enqueue("sale.forward", b"sale".to_vec(), fp, late, [2; 16])
        .unwrap();
    (expired.key, queued.key, late.as_millis() + 1)
}

#[test]
fn an_expired_intent_is_resolved_then_may_be_forgotten() {
    let idem = Idem::new();
    let (expired, _, now) = with_expired(&idem);
    let forget = |idem: &Idem| {
        let store = Store::open(&idem.db).unwrap();
        let outbox = store.outbox(LedgerConfig::with_seed(1)).unwrap();
        outbox.forget(&expired).map(|_| ())
    };
    // Unresolved, it cannot be forgotten: its sale may or may not have happened.
    assert!(matches!(
        forget(&idem),
        Err(OutboxError::Ledger(LedgerError::Unresolved { .. }))
    ));
    let text = idem.run(&["--now", &now.to_string(), "intents", "get", &expired]);
    text.code(0);
    assert!(
        text.stdout.contains("idem intents resolve"),
        "{}",
        text.stdout
    );

    let reason = "not on the acquirer's statement of 2025-03-02";
    let resolved = idem
        .at(
            now,
            &[
                "intents",
                "resolve",
                &expired,
                "--as",
                "not-executed",
                "--reason",
                reason,
            ],
        )
        .code(0)
        .json();
    assert_eq!(resolved["state"], "expired");
    assert_eq!(resolved["resolved_as"], "not_executed");
    assert_eq!(resolved["resolution_reason"], reason);
    assert_eq!(resolved["resolved_at"], now);
    assert_eq!(idem.at(now, &["intents", "get", &expired]).json(), resolved);
    let listed = idem
        .at(now, &["intents", "list", "--state", "expired"])
        .json_lines();
    assert_eq!(listed, [resolved]);
    let text = idem.run(&["--now", &now.to_string(), "intents", "list"]);
    text.code(0);
    assert!(
        text.stdout
            .contains(&format!("expired, resolved as not_executed: {reason}")),
        "{}",
        text.stdout
    );
    let text = idem.run(&["intents", "get", &expired]);
    assert!(
        text.stdout.contains("resolved as  not_executed"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(reason), "{}", text.stdout);

    forget(&idem).unwrap();
    let store = Store::open(&idem.db).unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(1)).unwrap();
    assert_eq!(outbox.intent(&expired).unwrap(), None);
}

#[test]
fn resolve_refuses_bad_input_with_its_exit_status_and_changes_nothing() {
    let idem = Idem::new();
    let (expired, queued, now) = with_expired(&idem);
    let intents = || idem.at(now, &["intents", "list"]).code(0).stdout.clone();
    let before = intents();
    let resolve = |key: &str, resolved_as: &str, reason: &str| {
        idem.at(
            now,
            &[
                "intents",
                "resolve",
                key,
                "--as",
                resolved_as,
                "--reason",
                reason,
            ],
        )
    };
    resolve(&queued, "completed", "seen")
        .code(6)
        .one_error_line(&["intent is queued, only an expired or unknown intent is resolved"]);
    resolve("0190b7c2-0000-7000-8000-000000000000", "failed", "seen")
        .code(7)
        .one_error_line(&["no intent under this key"]);
    resolve(&expired, "completed", "")
        .code(2)
        .one_error_line(&["--reason: 0 bytes, empty"]);
    resolve(&expired, "completed", "two\nlines")
        .code(2)
        .one_error_line(&["--reason", "control character"]);
    resolve(&expired, "completed", &"x".repeat(1025))
        .code(2)
        .one_error_line(&["--reason: 1025 bytes, too long, at most 1024 bytes"]);
    resolve(&expired, "lost", "seen")
        .code(2)
        .one_error_line(&["expected one of completed, failed, not-executed"]);
    idem.at(now, &["intents", "resolve", &expired, "--as", "failed"])
        .code(2);
    assert_eq!(intents(), before, "a refused resolve changed an intent");

    resolve(&expired, "failed", "declined, per the acquirer")
        .code(0)
        .json();
    resolve(&expired, "completed", "on second look")
        .code(6)
        .one_error_line(&["resolved already (as failed), a resolution is final"]);
    let store = Store::open(&idem.db).unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(1)).unwrap();
    let intent = outbox.intent(&expired).unwrap().unwrap();
    assert_eq!(intent.state, IntentState::Expired);
    assert_eq!(
        intent.resolution.unwrap().reason,
        "declined, per the acquirer"
    );
}

#[test]
fn resolve_help_has_an_example_and_the_exit_statuses() {
    let idem = Idem::new();
    let help = idem.run(&["intents", "resolve", "--help"]);
    help.code(0);
    for words in [
        "Example:",
        "idem intents resolve 0190b7c2",
        "--as not-executed",
        "6 the intent is not expired",
        "7 no intent has the key",
    ] {
        assert!(help.stdout.contains(words), "{words:?} in {}", help.stdout);
    }
}
