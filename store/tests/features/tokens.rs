//! One-time tokens on a real file, where the file alone can tell: the atomic consume
//! (`consume_execute`, the token's use and the business write in one transaction) and
//! the two naive variants it makes impossible (check-then-delete, delete-then-fail); bad
//! input leaving the file's bytes as they were; the check of the token tables. (Issue,
//! the two-phase consume, intents, the sweep, messages and export are the conformance
//! suite's, on every engine.)

use std::sync::Barrier;
use std::thread;

use crate::common::{T0, accounts, add_credit, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::redb::WriteTransaction;
use idem_store::token::Consumed;
use idem_store::token::Token;
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
fn an_atomic_consume_runs_once_and_its_retry_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let token = issue(&store, 1, MINUTE, None);
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
    assert_eq!(accounts(&store).1, 1);
}

#[test]
fn an_atomic_consume_of_an_unknown_foreign_or_expired_token_runs_nothing() {
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
}

/// Check-then-delete lets two concurrent consumers both pass the check. Here the
/// check, the claim and the work are one transaction: of 100 threads, exactly one runs.
/// (The two-phase consume's race is the conformance suite's.)
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
}

/// Bad input leaves the file byte for byte as it was. (The messages, and that nothing
/// is written as the seam shows it, are the conformance suite's, on every engine.)
#[test]
fn bad_token_input_leaves_the_file_byte_for_byte() {
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
    let at = Timestamp(T0 + 1);
    for (ttl, intent) in [(0, None), (10 * MINUTE + 1, None), (MINUTE, Some(""))] {
        let refused = store.issue_token("shop", "redeem", ttl, intent, [31; 16], at);
        assert!(matches!(refused, Err(Error::Token(_))), "{refused:?}");
    }
    let mut bad = token.as_str().to_string();
    bad.replace_range(3..4, "+");
    for text in [&token.as_str()[1..], bad.as_str()] {
        let tid = id("shop", "redeem", text);
        let refused = store.consume(&tid, fp("v"), at);
        assert!(matches!(refused, Err(Error::Token(_))), "{refused:?}");
        let refused = store.consume_execute(&tid, fp("v"), at, |txn| redeem(txn, &token));
        assert!(
            matches!(refused, Err(ExecuteError::Store(Error::Token(_)))),
            "{refused:?}"
        );
        assert!(matches!(store.get_token(&tid), Err(Error::Token(_))));
    }
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
