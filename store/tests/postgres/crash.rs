//! The server `kill -9`ed under load and restarted: every acknowledged claim and outcome
//! is there, and no generation is handed out twice. The same check on sessions that
//! commit without waiting for the WAL (`synchronous_commit = off`) catches the loss, so
//! the check has teeth; the engine sets `on` for its own sessions whatever the server's
//! default, which is why it holds on the same server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, State, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::postgres::PgStore;
use tokio::sync::Mutex;

use super::{Server, client_of, fp, id};

const WRITERS: usize = 16;
/// Acknowledged claims before the server is killed: `IDEM_PG_CRASH_LOAD`, 3,000 by
/// default.
fn load() -> usize {
    std::env::var("IDEM_PG_CRASH_LOAD")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000)
}

/// What a writer was told: the generation of each claim, and whether its outcome was
/// acknowledged too.
type Acks = Arc<Mutex<BTreeMap<String, (u64, bool)>>>;

/// How a writer claims keys.
#[derive(Clone)]
enum Writer {
    /// Through the engine.
    Idem(PgStore),
    /// Idem's claim statement on a plain session with `synchronous_commit = off`.
    Unsynced(String),
}

async fn write(writer: Writer, n: usize, acks: Acks, claimed: Arc<AtomicUsize>) {
    let raw = match &writer {
        Writer::Unsynced(url) => {
            let client = client_of(url).await;
            client
                .batch_execute("SET synchronous_commit = off")
                .await
                .unwrap();
            Some(client)
        }
        Writer::Idem(_) => None,
    };
    for i in 0.. {
        let key = format!("crash-{n}-{i}");
        let generation = match (&writer, &raw) {
            (Writer::Idem(store), _) => match store.begin(&id(&key), fp("c"), Timestamp(0)).await {
                Ok(Decision::Claimed { generation, .. }) => generation.0,
                Ok(other) => panic!("{key}: {other:?}"),
                Err(_) => return,
            },
            (_, Some(client)) => {
                let claimed = client
                    .query_one(
                        "INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, created_at, updated_at, lease_until) \
                         VALUES ('shop', 'charge', $1, $2, nextval('idem_generation'), 0, idem_now(), idem_now(), idem_now() + 30000) \
                         RETURNING generation",
                        &[&key, &fp("c").0.as_slice()],
                    )
                    .await;
                match claimed {
                    Ok(row) => row.get::<_, i64>(0) as u64,
                    Err(_) => return,
                }
            }
            _ => unreachable!("an unsynced writer has its session"),
        };
        acks.lock().await.insert(key.clone(), (generation, false));
        claimed.fetch_add(1, Ordering::SeqCst);
        if let (Writer::Idem(store), true) = (&writer, i % 2 == 0) {
            let outcome = Outcome::new(200, key.as_bytes().to_vec());
            let done = store
                .complete(
                    &id(&key),
                    idem_core::Generation(generation),
                    Verdict::Succeeded,
                    outcome,
                    Timestamp(0),
                )
                .await;
            if done.is_err() {
                return;
            }
            acks.lock().await.insert(key, (generation, true));
        }
    }
}

/// What the restarted server lost: acknowledged claims missing (or changed), and
/// whether the sequence went back below an acknowledged generation.
struct Lost {
    acknowledged: usize,
    missing: usize,
    reissued: bool,
}

/// Loads the server with `writer`, kills it, restarts it, and counts what it lost.
async fn crash_and_count(server: &mut Server, writer: impl Fn() -> Writer) -> Lost {
    let acks: Acks = Arc::default();
    let claimed = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|n| tokio::spawn(write(writer(), n, Arc::clone(&acks), Arc::clone(&claimed))))
        .collect();
    let loading = Instant::now();
    let load = load();
    while claimed.load(Ordering::SeqCst) < load && loading.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        claimed.load(Ordering::SeqCst) >= load,
        "the load never reached {load} claims"
    );
    server.kill9();
    for writer in writers {
        writer.await.unwrap();
    }
    server.restart();

    let store = PgStore::connect(&server.url()).await.unwrap();
    let acks = acks.lock().await;
    let mut missing = 0;
    for (key, (generation, settled)) in acks.iter() {
        let record = store.get(&id(key)).await.unwrap();
        let intact = match record {
            Some(r) if r.generation.0 == *generation => {
                !settled
                    || (r.state() == State::Succeeded
                        && matches!(&r.status,
                    idem_core::Status::Settled { outcome, .. } if outcome.body == key.as_bytes()))
            }
            _ => false,
        };
        if !intact {
            missing += 1;
        }
    }
    let highest = acks.values().map(|(g, _)| *g).max().unwrap_or(0);
    let Decision::Claimed { generation, .. } = store
        .begin(&id("after-the-crash"), fp("c"), Timestamp(0))
        .await
        .unwrap()
    else {
        panic!("a fresh key after the restart")
    };
    Lost {
        acknowledged: acks.len(),
        missing,
        reissued: generation.0 <= highest,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_server_keeps_every_acknowledged_claim_and_outcome() {
    // The server's default is off: the engine's own sessions turn it on.
    let mut server = Server::start_with(&[("synchronous_commit", "off")]);
    let config = Config::default();
    let store = PgStore::builder()
        .config(config)
        .pool_size(WRITERS)
        .connect(&server.url())
        .await
        .unwrap();
    let lost = crash_and_count(&mut server, || Writer::Idem(store.clone())).await;
    println!(
        "through the engine: {} acknowledged, {} missing after the restart, generation reissued: {}",
        lost.acknowledged, lost.missing, lost.reissued
    );
    assert_eq!(lost.missing, 0, "acknowledged writes lost");
    assert!(!lost.reissued, "a generation handed out twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_check_catches_sessions_that_do_not_wait_for_the_wal() {
    let mut server = Server::start_with(&[("synchronous_commit", "off")]);
    // Creates the schema.
    drop(PgStore::connect(&server.url()).await.unwrap());
    let url = server.url();
    // A crash loses what the WAL writer had not written yet: most runs lose some; a
    // run that happened to lose none is tried again, a few times.
    let mut runs = Vec::new();
    for _ in 0..4 {
        let lost = crash_and_count(&mut server, || Writer::Unsynced(url.clone())).await;
        println!(
            "synchronous_commit = off: {} acknowledged, {} missing after the restart, generation reissued: {}",
            lost.acknowledged, lost.missing, lost.reissued
        );
        let caught = lost.missing > 0 || lost.reissued;
        runs.push(caught);
        if caught {
            break;
        }
    }
    assert!(
        runs.contains(&true),
        "no run caught a loss: the check has no teeth"
    );
}
