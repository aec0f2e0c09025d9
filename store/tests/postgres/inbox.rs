//! The inbox on PostgreSQL: an at-least-once queue redelivers every message to random
//! consumers of a fleet, and consumers die mid-handling (their task aborted at random
//! moments, which drops the transaction as a killed process's would be); every message
//! takes effect once.

use std::time::Duration;

use idem_core::Outcome;
use idem_store::inbox::Handled;
use idem_store::postgres::PgStore;
use idem_store::postgres::tokio_postgres::Transaction;

use super::{Server, client, fp};

const MESSAGES: usize = 200;

/// splitmix64.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redeliveries_to_random_consumers_that_die_take_effect_once() {
    let seed = std::env::var("IDEM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1d3a_u64);
    println!("seed {seed} (IDEM_SEED)");
    let server = Server::start();
    let db = client(&server).await;
    db.batch_execute("CREATE TABLE effects (message text NOT NULL)")
        .await
        .unwrap();
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let store = PgStore::builder()
            .pool_size(8)
            .connect(&server.url())
            .await
            .unwrap();
        consumers.push(store.inbox("billing").unwrap());
    }
    let mut rng = seed;
    let mut acknowledged = [false; MESSAGES];
    let (mut killed, mut duplicates, mut rounds) = (0, 0, 0);
    // The queue redelivers every unacknowledged message, in rounds, until all are.
    while acknowledged.iter().any(|done| !done) {
        rounds += 1;
        assert!(rounds < 200, "the queue never drained");
        let mut deliveries = Vec::new();
        for (n, _) in acknowledged.iter().enumerate().filter(|(_, done)| !**done) {
            // At least once: some messages twice in a round, to two consumers at once.
            for _ in 0..1 + usize::from(next(&mut rng).is_multiple_of(4)) {
                let inbox = consumers[(next(&mut rng) % 3) as usize].clone();
                let message = format!("m-{n}");
                let handling = tokio::spawn(async move {
                    let handled = inbox
                        .handle(
                            "invoices",
                            &message,
                            fp(&message),
                            |txn: &Transaction<'_>| {
                                let message = message.clone();
                                Box::pin(async move {
                                    txn.execute("INSERT INTO effects VALUES ($1)", &[&message])
                                        .await
                                        .map_err(|e| e.to_string())?;
                                    Ok::<_, String>((Outcome::new(200, "invoiced"), ()))
                                })
                            },
                        )
                        .await;
                    (n, handled)
                });
                // The consumer dies at a random moment of some deliveries.
                if next(&mut rng).is_multiple_of(4) {
                    let after = Duration::from_micros(next(&mut rng) % 2_000);
                    let abort = handling.abort_handle();
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        abort.abort();
                    });
                }
                deliveries.push(handling);
            }
        }
        for handling in deliveries {
            match handling.await {
                Ok((n, Ok(Handled::Ran { .. }))) => acknowledged[n] = true,
                Ok((n, Ok(Handled::Duplicate(outcome)))) => {
                    assert_eq!(outcome.body, b"invoiced");
                    duplicates += 1;
                    acknowledged[n] = true;
                }
                // Held by another consumer's open transaction: not acknowledged, the
                // queue redelivers it.
                Ok((_, Ok(Handled::NotRun(_)))) => {}
                Ok((_, Err(e))) => panic!("{e}"),
                Err(e) if e.is_cancelled() => killed += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }
    let rows = db
        .query(
            "SELECT message, count(*) FROM effects GROUP BY message HAVING count(*) <> 1",
            &[],
        )
        .await
        .unwrap();
    assert!(
        rows.is_empty(),
        "messages that took effect more than once: {}",
        rows.len()
    );
    let total: i64 = db
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, MESSAGES as i64, "every message took effect");
    println!(
        "{MESSAGES} messages in {rounds} rounds: {duplicates} duplicates acknowledged, {killed} consumers killed mid-handling"
    );
    assert!(killed > 0, "no consumer died: the run shows nothing");
}
