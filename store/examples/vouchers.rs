//! One-time tokens and the consumer inbox on idem-store: a voucher token is redeemed
//! once (a retry is replayed, another shop's use is refused), and a payment message
//! delivered twice by the queue is credited once.
//!
//! Run with `cargo run -p idem-store --example vouchers`.

use std::error::Error;

use idem_store::inbox::Handled;
use idem_store::redb::{self, ReadableTable, TableDefinition, WriteTransaction};
use idem_store::token::Consumed;
use idem_store::token::TokenRefusal;
use idem_store::{Decision, Executed, Fingerprint, Outcome, RecordId, Store, Verdict, now};

/// The shop's own table: account → balance in cents.
const BALANCES: TableDefinition<&str, u64> = TableDefinition::new("shop.balances");

fn credit(txn: &WriteTransaction, account: &str, cents: u64) -> Result<u64, redb::Error> {
    let mut balances = txn.open_table(BALANCES)?;
    let balance = balances.get(account)?.map_or(0, |v| v.value()) + cents;
    balances.insert(account, balance)?;
    Ok(balance)
}

fn random_bytes() -> Result<[u8; 16], getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes)
}

/// The whole story; `main` runs it, and a test runs it too.
pub fn run() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("shop.redb"))?;

    // The server issues a voucher token for order 991, valid 15 minutes. Asking again
    // for the same intent (the first reply was lost) returns the same token.
    let issued = store.issue_token(
        "shop-7",
        "redeem",
        15 * 60_000,
        Some("order-991"),
        random_bytes()?,
        now(),
    )?;
    let again = store.issue_token(
        "shop-7",
        "redeem",
        15 * 60_000,
        Some("order-991"),
        random_bytes()?,
        now(),
    )?;
    assert_eq!(issued.token(), again.token());
    println!("issued token {}", issued.token());

    // Redeeming is `execute` on the token: the credit and the use commit together.
    let id = RecordId::new("shop-7", "redeem", issued.token().as_str())?;
    let request = Fingerprint::of_bytes(b"voucher 500 to alice");
    for attempt in 1..=2 {
        let redeemed = store.consume_execute(&id, request, now(), |txn| {
            let balance = credit(txn, "alice", 500)?;
            Ok::<_, redb::Error>((
                Verdict::Succeeded,
                Outcome::new(200, format!("balance {balance}")),
                (),
            ))
        })?;
        match redeemed {
            Consumed::Admitted(Executed::Ran { .. }) => println!("attempt {attempt}: redeemed"),
            Consumed::Admitted(Executed::NotRun(Decision::Replay { outcome, .. })) => println!(
                "attempt {attempt}: already redeemed, replayed: {}",
                String::from_utf8_lossy(&outcome.body)
            ),
            other => return Err(format!("attempt {attempt}: {other:?}").into()),
        }
    }
    // Another shop presenting the same token: never issued to it.
    let foreign = RecordId::new("shop-8", "redeem", issued.token().as_str())?;
    let refused = store.consume(&foreign, request, now())?;
    assert_eq!(refused, Consumed::Refused(TokenRefusal::NotIssued));
    println!("shop-8: {refused:?}");

    // The queue delivers payment p-1 twice (the first acknowledgement was lost).
    let inbox = store.inbox("billing")?;
    let message = Fingerprint::of_bytes(br#"{"account":"bob","cents":250}"#);
    for delivery in 1..=2 {
        let handled = inbox.handle("payments", "p-1", message, now(), |txn| {
            let balance = credit(txn, "bob", 250)?;
            Ok::<_, redb::Error>((Outcome::new(0, format!("balance {balance}")), ()))
        })?;
        match handled {
            Handled::Ran { .. } => println!("delivery {delivery}: credited, ack"),
            Handled::Duplicate(_) => println!("delivery {delivery}: duplicate, ack"),
            Handled::NotRun(decision) => return Err(format!("{decision:?}").into()),
        }
    }

    let balances = store.read(|txn| -> Result<(u64, u64), redb::Error> {
        let table = txn.open_table(BALANCES)?;
        let get = |account| -> Result<u64, redb::Error> {
            Ok(table.get(account)?.map_or(0, |v| v.value()))
        };
        Ok((get("alice")?, get("bob")?))
    })??;
    assert_eq!(balances, (500, 250), "each effect once");
    println!("alice {} cents, bob {} cents", balances.0, balances.1);
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    run()
}
