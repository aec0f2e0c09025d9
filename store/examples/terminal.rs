//! A point-of-sale terminal on idem-store: a sale and its forwarding intent are written
//! together, a duplicate from the card reader runs once, and the outbox sends the sale
//! on under one key until the head office answers.
//!
//! Run with `cargo run -p idem-store --example terminal`.

use std::error::Error;

use std::time::Duration;

use idem_store::outbox::{Attempt, LedgerConfig, NoReply, Reply, Sender, Transport, key_header};
use idem_store::redb::{ReadableTableMetadata, TableDefinition, WriteTransaction};
use idem_store::{Decision, Executed, Fingerprint, Outcome, RecordId, Store, Verdict, now};

/// The terminal's own table: sale key → amount in cents.
const SALES: TableDefinition<&str, u64> = TableDefinition::new("pos.sales");

/// The head office, as this example reaches it: it prints each attempt and answers 201.
struct HeadOffice;

impl Transport for HeadOffice {
    fn send(&mut self, attempt: &Attempt, _now: idem_store::Timestamp) -> Result<Reply, NoReply> {
        println!(
            "POST /sales  Idempotency-Key: {}  (attempt {})",
            key_header(&attempt.key),
            attempt.attempt
        );
        Ok(Reply {
            status: 201,
            body: b"ok".to_vec(),
            retry_at: None,
        })
    }
}

/// A seed for the backoff's jitter, different on every terminal, so that a fleet of
/// them does not retry in step.
fn jitter_seed() -> Result<u64, getrandom::Error> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// The terminal's day: ring up, a duplicate, send.
pub fn run() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("terminal.redb"))?;
    let outbox = store.outbox(LedgerConfig::with_seed(jitter_seed()?))?;

    // The card reader sends sale 0042 twice; the key makes the second a replay.
    let id = RecordId::new("store-12", "sale", "reader-0042")?;
    let payload = br#"{"item":"coffee","cents":480}"#.to_vec();
    // The terminal writes the payload itself, so its bytes are the request; a receiver of
    // JSON from many clients would use `Fingerprint::of_json` (idem-core's `json` feature).
    let fingerprint = Fingerprint::of_bytes(&payload);
    for send in 1..=2 {
        let ring_up = |txn: &WriteTransaction| -> Result<_, Box<dyn Error>> {
            // The sale and the intent that forwards it to head office commit together,
            // with the settled record, or not at all.
            // The key's random bytes come from the store's generator (seeded once from
            // the operating system, kept in the file).
            let intent =
                outbox.submit_in(txn, "forward-sale", payload.clone(), fingerprint, now())?;
            txn.open_table(SALES)?.insert(intent.key.as_str(), 480)?;
            Ok((
                Verdict::Succeeded,
                Outcome::new(201, intent.key.clone()),
                (),
            ))
        };
        match store.execute(&id, fingerprint, now(), ring_up)? {
            Executed::Ran { .. } => println!("send {send}: sale recorded"),
            Executed::NotRun(Decision::Replay { outcome, .. }) => println!(
                "send {send}: replayed, not run again (forwarded as {})",
                String::from_utf8_lossy(&outcome.body)
            ),
            Executed::NotRun(other) => println!("send {send}: not run: {other:?}"),
        }
    }

    // Later, online: the sender drains what is due through the terminal's transport
    // (here one that prints; `HttpTransport`, feature `sender-http`, POSTs), recording
    // each reply, and forgets completed intents a day after they were made.
    let mut sender = Sender::new(HeadOffice).forget_completed_after(Duration::from_secs(86_400));
    let drained = sender.drain(&outbox, now)?;
    println!(
        "sent {}, finished {}, forgotten {}",
        drained.sent, drained.finished, drained.forgotten
    );

    let sales = store
        .read(|txn| -> Result<u64, Box<dyn Error>> { Ok(txn.open_table(SALES)?.len()?) })??;
    println!("sales in the file: {sales}");
    assert_eq!(sales, 1, "the duplicate from the card reader ran once");
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    run()
}
