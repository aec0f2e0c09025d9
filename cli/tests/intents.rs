//! `idem intents list|get`: the outbox's intents, read without writing.

mod common;

use common::{Idem, T0};
use idem_core::{Fingerprint, LedgerConfig, Reply, Timestamp};
use idem_store::Store;

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
