//! The inbox on PostgreSQL: an at-least-once queue redelivers every message to random
//! consumers of a fleet, and consumers die mid-handling, as tasks aborted at random
//! moments and as processes SIGKILLed at random moments; every message takes effect
//! once.

use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use idem_core::Outcome;
use idem_store::ExecuteError;
use idem_store::inbox::Handled;
use idem_store::postgres::tokio_postgres::{Client, Transaction};
use idem_store::postgres::{PgInbox, PgStore};

use super::child::{expect_report, report, reports, spawn_child};
use super::{Server, client, fp};

const MESSAGES: usize = 200;
const CONSUMERS: usize = 3;

/// splitmix64.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn seed() -> u64 {
    let seed = std::env::var("IDEM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1d3a_u64);
    println!("seed {seed} (IDEM_SEED)");
    seed
}

/// The table the handler writes its effect to, one row per run.
async fn effects_table(server: &Server) -> Client {
    let db = client(server).await;
    db.batch_execute("CREATE TABLE effects (message text NOT NULL)")
        .await
        .unwrap();
    db
}

/// One delivery of `message`: the handler writes its effect in the inbox's transaction.
async fn deliver(inbox: &PgInbox, message: &str) -> Result<Handled<()>, ExecuteError<String>> {
    let handled = inbox
        .handle("invoices", message, fp(message), |txn: &Transaction<'_>| {
            let message = message.to_owned();
            Box::pin(async move {
                txn.execute("INSERT INTO effects VALUES ($1)", &[&message])
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((Outcome::new(200, "invoiced"), ()))
            })
        })
        .await?;
    if let Handled::Duplicate(outcome) = &handled {
        assert_eq!(outcome.body, b"invoiced");
    }
    Ok(handled)
}

/// Every message took effect, none twice.
async fn each_took_effect_once(db: &Client) {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redeliveries_to_random_consumers_that_die_take_effect_once() {
    let mut rng = seed();
    let server = Server::start();
    let db = effects_table(&server).await;
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let store = PgStore::builder()
            .pool_size(8)
            .connect(&server.url())
            .await
            .unwrap();
        consumers.push(store.inbox("billing").unwrap());
    }
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
                let inbox = consumers[(next(&mut rng) % CONSUMERS as u64) as usize].clone();
                let handling = tokio::spawn(async move {
                    let handled = deliver(&inbox, &format!("m-{n}")).await;
                    (n, handled)
                });
                // The consumer dies at a random moment of some deliveries: the aborted
                // task drops its transaction, as a killed process's is dropped.
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
                Ok((n, Ok(Handled::Duplicate(_)))) => {
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
    each_took_effect_once(&db).await;
    println!(
        "{MESSAGES} messages in {rounds} rounds: {duplicates} duplicates acknowledged, {killed} consumers killed mid-handling"
    );
    assert!(killed > 0, "no consumer died: the run shows nothing");
}

/// A consumer process of [`consumers_killed_as_processes_lose_nothing_and_repeat_nothing`]:
/// this test binary again, running [`consumer_process`].
struct Consumer {
    child: Child,
    answers: mpsc::Receiver<String>,
}

impl Consumer {
    /// Starts one and waits until it is connected.
    fn start(url: &str) -> Consumer {
        let mut child = spawn_child(
            module_path!(),
            "consumer_process",
            &[("IDEM_INBOX_URL", url.to_owned())],
        );
        let answers = reports(child.stdout.take().unwrap());
        expect_report(&answers, "ready", Duration::from_secs(60));
        Consumer { child, answers }
    }

    fn deliver(&mut self, message: &str) {
        super::child::tell(&mut self.child, message);
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same queue over consumer processes: each round, one of them is SIGKILLed a
/// random time (0 to 30 ms) after the deliveries went out, with handlers in flight, and
/// is started again. A message is acknowledged only when a consumer reported it handled (ran, or a
/// duplicate of a handled one); the rest is redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_killed_as_processes_lose_nothing_and_repeat_nothing() {
    let mut rng = seed();
    let server = Server::start();
    let db = effects_table(&server).await;
    let url = server.url();
    let mut consumers: Vec<Consumer> = (0..CONSUMERS).map(|_| Consumer::start(&url)).collect();
    let mut acknowledged = [false; MESSAGES];
    let (mut kills, mut lost_in_flight, mut duplicates, mut rounds) = (0, 0, 0, 0);
    while acknowledged.iter().any(|done| !done) {
        rounds += 1;
        assert!(rounds < 100, "the queue never drained");
        let mut sent = [0usize; CONSUMERS];
        for n in (0..MESSAGES).filter(|n| !acknowledged[*n]) {
            for _ in 0..1 + usize::from(next(&mut rng).is_multiple_of(4)) {
                let to = (next(&mut rng) % CONSUMERS as u64) as usize;
                consumers[to].deliver(&format!("m-{n}"));
                sent[to] += 1;
            }
        }
        // Every round, one consumer is killed at a random moment.
        let victim = Some((next(&mut rng) % CONSUMERS as u64) as usize);
        if let Some(victim) = victim {
            let after = Duration::from_micros(next(&mut rng) % 30_000);
            std::thread::sleep(after);
            let child = &mut consumers[victim].child;
            child.kill().unwrap();
            child.wait().unwrap();
            kills += 1;
        }
        for (c, consumer) in consumers.iter().enumerate() {
            for answered in 0..sent[c] {
                let answer = match consumer.answers.recv_timeout(Duration::from_secs(60)) {
                    Ok(answer) => answer,
                    // The consumer was killed: what it did not report is redelivered.
                    Err(mpsc::RecvTimeoutError::Disconnected) if victim == Some(c) => {
                        lost_in_flight += sent[c] - answered;
                        break;
                    }
                    Err(e) => panic!("consumer {c} did not answer: {e}"),
                };
                let (kind, message) = answer.split_once(' ').unwrap();
                let n: usize = message.strip_prefix("m-").unwrap().parse().unwrap();
                match kind {
                    "ran" => acknowledged[n] = true,
                    "duplicate" => {
                        duplicates += 1;
                        acknowledged[n] = true;
                    }
                    "busy" => {}
                    other => panic!("consumer {c} answered {other:?}"),
                }
            }
        }
        if let Some(victim) = victim {
            consumers[victim] = Consumer::start(&url);
        }
    }
    drop(consumers);
    each_took_effect_once(&db).await;
    println!(
        "{MESSAGES} messages in {rounds} rounds over {CONSUMERS} processes: {kills} SIGKILLs, \
         {lost_in_flight} deliveries unanswered by a killed consumer, {duplicates} duplicates"
    );
    assert!(
        lost_in_flight > 0,
        "no kill landed while deliveries were in flight: the run shows nothing"
    );
}

/// A consumer process (started by the test above, never on its own): handles each
/// message id read from stdin, concurrently, and reports `ran`, `duplicate` or `busy`
/// with the id once the answer is final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a consumer process that consumers_killed_as_processes_… starts and kills"]
async fn consumer_process() {
    let url = std::env::var("IDEM_INBOX_URL").expect("IDEM_INBOX_URL names the database");
    let store = PgStore::builder().pool_size(4).connect(&url).await.unwrap();
    let inbox = store.inbox("billing").unwrap();
    let (sender, mut messages) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    report("ready");
    let mut handling = tokio::task::JoinSet::new();
    while let Some(message) = messages.recv().await {
        let inbox = inbox.clone();
        handling.spawn(async move {
            let kind = match deliver(&inbox, &message).await {
                Ok(Handled::Ran { .. }) => "ran",
                Ok(Handled::Duplicate(_)) => "duplicate",
                Ok(Handled::NotRun(_)) => "busy",
                Err(e) => panic!("{message}: {e}"),
            };
            report(&format!("{kind} {message}"));
        });
    }
    while let Some(done) = handling.join_next().await {
        done.unwrap();
    }
}
