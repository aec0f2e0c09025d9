//! One-time tokens on a real file: issue, consume (two-phase and atomic), the two naive
//! variants made impossible (check-then-delete, delete-then-fail), intents, sweep and
//! bad input.

use std::sync::Barrier;
use std::thread;

use crate::common::{T0, accounts, add_credit, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::redb::WriteTransaction;
use idem_store::token::Consumed;
use idem_store::token::Issue;
use idem_store::token::Token;
use idem_store::token::TokenError;
use idem_store::token::TokenRefusal;
use idem_store::{Error, ExecuteError, Executed, Store};

const MINUTE: u64 = 60_000;

fn store(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("idem.redb")).unwrap()
}

fn issue(store: &Store, random: u8, ttl_ms: u64, intent: Option<&str>) -> Token {
    store
        .issue_token(
            "shop",
            "redeem",
            ttl_ms,
            intent,
            [random; 16],
            Timestamp(T0),
        )
        .unwrap()
        .token()
        .clone()
}

fn redeem(txn: &WriteTransaction, token: &Token) -> Result<(Verdict, Outcome, u64), String> {
    let credits = add_credit(txn, token.as_str())?;
    Ok((Verdict::Succeeded, Outcome::new(200, "redeemed"), credits))
}

#[test]
fn a_token_is_used_once_and_a_retry_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let token = issue(&store, 1, MINUTE, None);
    assert_eq!(token.as_str().len(), idem_store::token::TOKEN_LEN);
    let tid = id("shop", "redeem", token.as_str());
    let at = Timestamp(T0 + 1_000);

    let first = store
        .consume_execute(&tid, fp("voucher 5"), at, |txn| redeem(txn, &token))
        .unwrap();
    assert!(matches!(
        first,
        Consumed::Admitted(Executed::Ran { value: 1, .. })
    ));
    // The reply was lost: the retry is replayed, not "token already used".
    let retry = store
        .consume_execute(&tid, fp("voucher 5"), at, |txn| redeem(txn, &token))
        .unwrap();
    let Consumed::Admitted(Executed::NotRun(Decision::Replay { outcome, .. })) = retry else {
        panic!("a retry replays: {retry:?}");
    };
    assert_eq!(outcome.body, b"redeemed");
    // Past the ttl too: the use came before it.
    let late = store
        .consume(&tid, fp("voucher 5"), Timestamp(T0 + 2 * MINUTE))
        .unwrap();
    assert!(matches!(late, Consumed::Admitted(Decision::Replay { .. })));
    // Another request under the same token is a conflict.
    let other = store.consume(&tid, fp("voucher 9"), at).unwrap();
    assert!(matches!(
        other,
        Consumed::Admitted(Decision::Conflict { .. })
    ));
    assert_eq!(accounts(&store).1, 1);
}

#[test]
fn unknown_foreign_and_expired_tokens_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let token = issue(&store, 2, MINUTE, None);
    let never = Token::from_random([3; 16]);
    let cases = [
        (
            id("shop", "redeem", never.as_str()),
            T0,
            TokenRefusal::NotIssued,
        ),
        (
            id("other-shop", "redeem", token.as_str()),
            T0,
            TokenRefusal::NotIssued,
        ),
        (
            id("shop", "refund", token.as_str()),
            T0,
            TokenRefusal::NotIssued,
        ),
        (
            id("shop", "redeem", token.as_str()),
            T0 + MINUTE,
            TokenRefusal::Expired {
                expires_at: Timestamp(T0 + MINUTE),
            },
        ),
    ];
    let generation = store.generation().unwrap();
    for (tid, at, refusal) in cases {
        let consumed = store.consume(&tid, fp("x"), Timestamp(at)).unwrap();
        assert_eq!(consumed, Consumed::Refused(refusal), "{tid}");
        let executed = store
            .consume_execute(&tid, fp("x"), Timestamp(at), |txn| redeem(txn, &token))
            .unwrap();
        assert!(
            matches!(executed, Consumed::Refused(r) if r == refusal),
            "{tid}"
        );
        assert_eq!(store.get(&tid).unwrap(), None);
    }
    assert_eq!(store.generation().unwrap(), generation);
    assert_eq!(accounts(&store).1, 0);
    // Still good for its own tenant and operation, before its ttl.
    let tid = id("shop", "redeem", token.as_str());
    let claimed = store
        .consume(&tid, fp("x"), Timestamp(T0 + MINUTE - 1))
        .unwrap();
    assert!(matches!(
        claimed,
        Consumed::Admitted(Decision::Claimed { .. })
    ));
}

/// Check-then-delete lets two concurrent consumers both pass the check. Here the
/// check and the claim are one transaction: of 100 threads, exactly one runs.
#[test]
fn of_a_hundred_concurrent_consumers_exactly_one_executes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let token = issue(&store, 4, MINUTE, None);
    let tid = id("shop", "redeem", token.as_str());
    let barrier = Barrier::new(100);
    let ran: usize = thread::scope(|scope| {
        let handles: Vec<_> = (0..100)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let consumed = store
                        .consume_execute(&tid, fp("voucher"), Timestamp(T0 + 1), |txn| {
                            redeem(txn, &token)
                        })
                        .unwrap();
                    match consumed {
                        Consumed::Admitted(Executed::Ran { .. }) => 1,
                        Consumed::Admitted(Executed::NotRun(Decision::Replay { .. })) => 0,
                        other => panic!("every other consumer is replayed: {other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(ran, 1);
    assert_eq!(accounts(&store).1, 1);

    // The two-phase consume too: one claim among 100.
    let token = issue(&store, 5, MINUTE, None);
    let tid = id("shop", "redeem", token.as_str());
    let claimed: usize = thread::scope(|scope| {
        let handles: Vec<_> = (0..100)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    match store
                        .consume(&tid, fp("voucher"), Timestamp(T0 + 1))
                        .unwrap()
                    {
                        Consumed::Admitted(Decision::Claimed { .. }) => 1,
                        Consumed::Admitted(Decision::InProgress { .. }) => 0,
                        other => panic!("every other consumer sees the claim: {other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(claimed, 1);
}

/// Delete-then-fail loses the token when the business write fails. Here the failed
/// work rolls back with the claim, and the token is still consumable.
#[test]
fn a_consume_whose_business_write_fails_leaves_the_token_consumable() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let token = issue(&store, 6, MINUTE, None);
    let tid = id("shop", "redeem", token.as_str());
    let failed = store
        .consume_execute(&tid, fp("voucher"), Timestamp(T0 + 1), |txn| {
            add_credit(txn, token.as_str())?;
            Err::<(Verdict, Outcome, u64), _>("the till is closed".to_string())
        })
        .unwrap_err();
    assert!(matches!(failed, ExecuteError::Work(ref e) if e == "the till is closed"));
    assert_eq!(store.get(&tid).unwrap(), None);
    assert!(store.get_token(&tid).unwrap().is_some());
    assert_eq!(accounts(&store).1, 0);
    let again = store
        .consume_execute(&tid, fp("voucher"), Timestamp(T0 + 2), |txn| {
            redeem(txn, &token)
        })
        .unwrap();
    assert!(matches!(
        again,
        Consumed::Admitted(Executed::Ran { value: 1, .. })
    ));

    // Two-phase: a released claim gives the token back.
    let token = issue(&store, 7, MINUTE, None);
    let tid = id("shop", "redeem", token.as_str());
    let Consumed::Admitted(Decision::Claimed { generation, .. }) =
        store.consume(&tid, fp("v"), Timestamp(T0 + 1)).unwrap()
    else {
        panic!("first consume claims");
    };
    store.release(&tid, generation, Timestamp(T0 + 2)).unwrap();
    assert!(matches!(
        store.consume(&tid, fp("v"), Timestamp(T0 + 3)).unwrap(),
        Consumed::Admitted(Decision::Claimed { .. })
    ));
}

#[test]
fn issuing_for_an_intent_returns_the_same_token_until_used_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let first = store
        .issue_token(
            "shop",
            "redeem",
            MINUTE,
            Some("order-1"),
            [8; 16],
            Timestamp(T0),
        )
        .unwrap();
    assert!(matches!(first, Issue::New { .. }));
    let again = store
        .issue_token(
            "shop",
            "redeem",
            MINUTE,
            Some("order-1"),
            [9; 16],
            Timestamp(T0 + 5),
        )
        .unwrap();
    assert_eq!(
        again,
        Issue::Existing {
            token: first.token().clone(),
            entry: first.entry().clone()
        }
    );
    // Another tenant's intent of the same name is another intent.
    let foreign = store
        .issue_token(
            "shop-2",
            "redeem",
            MINUTE,
            Some("order-1"),
            [9; 16],
            Timestamp(T0),
        )
        .unwrap();
    assert!(matches!(foreign, Issue::New { .. }));
    let tid = id("shop", "redeem", first.token().as_str());
    let used = store
        .consume_execute(&tid, fp("v"), Timestamp(T0 + 6), |txn| {
            redeem(txn, first.token())
        })
        .unwrap();
    assert!(matches!(used, Consumed::Admitted(Executed::Ran { .. })));
    let after_use = store
        .issue_token(
            "shop",
            "redeem",
            MINUTE,
            Some("order-1"),
            [10; 16],
            Timestamp(T0 + 7),
        )
        .unwrap();
    assert!(matches!(after_use, Issue::New { .. }));
    assert_ne!(after_use.token(), first.token());
    // Random bytes that repeat an issued token are refused, not a second holder.
    let repeat = store.issue_token("shop", "redeem", MINUTE, None, [10; 16], Timestamp(T0 + 8));
    assert!(matches!(repeat, Err(Error::TokenTaken)));
}

#[test]
fn sweep_deletes_expired_tokens_in_batches_and_keeps_used_ones_replayable() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let tokens: Vec<Token> = (0..5)
        .map(|n| issue(&store, 20 + n, MINUTE, None))
        .collect();
    let used = id("shop", "redeem", tokens[0].as_str());
    let ran = store
        .consume_execute(&used, fp("v"), Timestamp(T0 + 1), |txn| {
            redeem(txn, &tokens[0])
        })
        .unwrap();
    assert!(matches!(ran, Consumed::Admitted(Executed::Ran { .. })));
    let later = Timestamp(T0 + MINUTE);
    assert_eq!(
        store.sweep_tokens(Timestamp(T0 + 1), 100).unwrap().removed,
        0
    );
    let report = store.sweep_tokens(later, 3).unwrap();
    assert_eq!((report.removed, report.remaining_expired), (3, true));
    let report = store.sweep_tokens(later, 100).unwrap();
    assert_eq!((report.removed, report.remaining_expired), (2, false));
    for token in &tokens {
        let tid = id("shop", "redeem", token.as_str());
        assert_eq!(store.get_token(&tid).unwrap(), None);
    }
    let unused = id("shop", "redeem", tokens[1].as_str());
    assert_eq!(
        store.consume(&unused, fp("v"), later).unwrap(),
        Consumed::Refused(TokenRefusal::NotIssued)
    );
    // The used one's record outlives the token: still replayed.
    assert!(matches!(
        store.consume(&used, fp("v"), later).unwrap(),
        Consumed::Admitted(Decision::Replay { .. })
    ));
}

#[test]
fn bad_input_names_the_field_and_the_rule_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        success_retention_ms: 10 * MINUTE,
        ..Config::default()
    };
    let store = Store::builder()
        .config(config)
        .open(dir.path().join("idem.redb"))
        .unwrap();
    let token = issue(&store, 30, MINUTE, Some("order-1"));
    let before = std::fs::read(store.path().expect("a store file")).unwrap();
    let issue_err = |ttl, intent| {
        store
            .issue_token("shop", "redeem", ttl, intent, [31; 16], Timestamp(T0 + 1))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(issue_err(0, None), "ttl: 0 ms, must be at least 1 ms");
    assert_eq!(
        issue_err(10 * MINUTE + 1, None),
        "ttl: 600001 ms, at most the store's retention of 600000 ms (the record of a token's use must outlive the token)"
    );
    assert_eq!(
        issue_err(MINUTE, Some("")),
        "intent: 0 bytes, needs 1 to 255 bytes of printable ASCII (0x20-0x7E)"
    );
    let consume_err = |text: &str| {
        let tid = id("shop", "redeem", text);
        let err = store.consume(&tid, fp("v"), Timestamp(T0 + 1)).unwrap_err();
        assert!(matches!(err, Error::Token(_)), "{err:?}");
        err.to_string()
    };
    assert_eq!(
        consume_err(&token.as_str()[1..]),
        "token: 21 characters, expected 22 (128 bits in URL-safe base64 without padding)"
    );
    let mut bad = token.as_str().to_string();
    bad.replace_range(3..4, "+");
    assert_eq!(
        consume_err(&bad),
        "token: '+' at offset 3 is outside the URL-safe base64 alphabet (A-Z a-z 0-9 - _)"
    );
    assert!(matches!(
        store.get_token(&id("shop", "redeem", &bad)),
        Err(Error::Token(TokenError::Alphabet { offset: 3, .. }))
    ));
    assert_eq!(
        std::fs::read(store.path().expect("a store file")).unwrap(),
        before
    );
}

#[test]
fn check_verifies_the_token_tables() {
    use idem_store::redb::{self, ReadableTableMetadata, TableDefinition};
    const TOKEN_EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("idem.token.expiry");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    {
        let store = Store::open(&path).unwrap();
        issue(&store, 40, MINUTE, Some("order-1"));
        issue(&store, 41, MINUTE, None);
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{report:?}");
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut expiry = txn.open_table(TOKEN_EXPIRY).unwrap();
            let first = expiry.pop_first().unwrap().unwrap().0.value().to_vec();
            assert!(!first.is_empty());
            assert_eq!(expiry.len().unwrap(), 1);
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let report = store.check().unwrap();
    let found = |needle: &str| {
        report
            .problems
            .iter()
            .filter(|p| p.contains(needle))
            .count()
    };
    assert_eq!(
        found("missing from the token expiry index"),
        1,
        "{report:?}"
    );
    assert_eq!(
        found("token expiry index holds 1 entries for 2 tokens"),
        1,
        "{report:?}"
    );
}

/// Restoring from an export keeps issued tokens: an unused one is still consumable
/// once, a used one still replays, and issuing again for the same intent still answers
/// its latest token.
#[test]
fn tokens_go_through_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let source = store(&dir);
    let unused = issue(&source, 1, MINUTE, None);
    let used = issue(&source, 2, MINUTE, Some("order-1"));
    let tid = |token: &Token| id("shop", "redeem", token.as_str());
    let ran = source
        .consume_execute(&tid(&used), fp("v"), Timestamp(T0 + 1), |txn| {
            redeem(txn, &used)
        })
        .unwrap();
    assert!(matches!(ran, Consumed::Admitted(Executed::Ran { .. })));
    // Used, so the intent gets a new token, which the intent's entry now names.
    let latest = source
        .issue_token(
            "shop",
            "redeem",
            MINUTE,
            Some("order-1"),
            [3; 16],
            Timestamp(T0 + 2),
        )
        .unwrap();
    assert!(matches!(latest, Issue::New { .. }));

    let mut exported = Vec::new();
    let sent = source.export(&mut exported).unwrap();
    assert_eq!((sent.records, sent.tokens), (1, 3));
    let text = String::from_utf8(exported.clone()).unwrap();
    assert!(
        text.contains(&format!(
            r#"{{"token":{{"tenant":"shop","operation":"redeem","token":"{}","issued_at":{T0},"expires_at":{},"intent_id":"order-1"}}}}"#,
            used.as_str(),
            T0 + MINUTE
        )),
        "{text}"
    );

    let other = tempfile::tempdir().unwrap();
    let target = store(&other);
    assert_eq!(target.import(exported.as_slice()).unwrap(), sent);
    let check = target.check().unwrap();
    assert!(check.is_ok(), "{:?}", check.problems);
    for token in [&unused, &used, latest.token()] {
        assert_eq!(
            target.get_token(&tid(token)).unwrap(),
            source.get_token(&tid(token)).unwrap()
        );
    }
    let again = target
        .issue_token(
            "shop",
            "redeem",
            MINUTE,
            Some("order-1"),
            [4; 16],
            Timestamp(T0 + 3),
        )
        .unwrap();
    assert_eq!(again.token(), latest.token(), "the intent's latest token");
    let replay = target
        .consume(&tid(&used), fp("v"), Timestamp(T0 + 4))
        .unwrap();
    assert!(matches!(
        replay,
        Consumed::Admitted(Decision::Replay { .. })
    ));
    let first_use = target
        .consume_execute(&tid(&unused), fp("w"), Timestamp(T0 + 4), |txn| {
            redeem(txn, &unused)
        })
        .unwrap();
    assert!(matches!(
        first_use,
        Consumed::Admitted(Executed::Ran { .. })
    ));
    // A token line that breaks a rule is named, and nothing is imported.
    let bad = text.replace(used.as_str(), "not-a-token");
    let err = store(&tempfile::tempdir().unwrap())
        .import(bad.as_bytes())
        .unwrap_err();
    assert!(err.to_string().contains("token: "), "{err}");
}
