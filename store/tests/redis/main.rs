//! The Redis engine's own tests (`--features redis`), beside the conformance suite: what
//! it refuses at connect, one clear error each and nothing written; 64 callers on one
//! key; a `kill -9` of the server under load; a failover to a replica, counted; the
//! watchdog, in the store and through the tower layer. Each test starts a throwaway server
//! (`common/redis.rs`): without Redis installed they fail, never skip.

#[path = "../common/redis.rs"]
mod server;

#[cfg(feature = "redis-tls")]
#[path = "../common/certificates.rs"]
mod certificates;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use idem_core::protocol::Decision;
use idem_core::{Config, Fingerprint, Generation, Outcome, RecordId, State, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::redis::{ConnectError, RedisStore};
use server::Server;

fn id(key: &str) -> RecordId {
    RecordId::new("shop", "charge", key).unwrap()
}

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

/// The keys on `server`: a refused connect writes none.
fn keys(server: &Server) -> String {
    server.cli(&["KEYS", "*"])
}

/// What a writer was answered: each key it claimed, the generation, and whether its
/// settle was answered.
type Answered = Vec<(RecordId, Generation, bool)>;

/// Eight writers that claim and settle keys of their own on `store` until `stop`; each
/// gives back what it was answered.
fn writers(
    store: &Arc<RedisStore>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Answered>> {
    (0..8)
        .map(|writer| {
            let (store, stop) = (Arc::clone(store), Arc::clone(stop));
            tokio::spawn(async move {
                let mut answered = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let key = id(&format!("w{writer}-{n}"));
                    let Ok(Decision::Claimed { generation, .. }) =
                        store.begin(&key, fp(key.key()), Timestamp(0)).await
                    else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let outcome = Outcome::new(200, key.key().as_bytes().to_vec());
                    let settled = store
                        .complete(&key, generation, Verdict::Succeeded, outcome, Timestamp(0))
                        .await
                        .is_ok();
                    answered.push((key, generation, settled));
                }
                answered
            })
        })
        .collect()
}

/// The refusal of a connect to `server` with `url`'s tail appended.
async fn refusal(server: &Server, tail: &str) -> ConnectError {
    let url = format!("{}{tail}", server.url());
    RedisStore::connect(&url).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_can_lose_an_answer_is_refused_naming_the_setting_and_the_fix() {
    let cases: [(&[&str], &str, &str); 3] = [
        (&["--appendonly no"], "appendonly is no", "appendonly yes"),
        (
            &["--appendfsync everysec"],
            "appendfsync is everysec",
            "appendfsync always",
        ),
        (
            &["--maxmemory-policy allkeys-lru"],
            "maxmemory-policy is allkeys-lru",
            "maxmemory-policy noeviction",
        ),
    ];
    for (options, named, fix) in cases {
        let server = Server::start_with(options);
        let refused = refusal(&server, "").await;
        let message = refused.to_string();
        assert!(
            matches!(refused, ConnectError::UnsafeDurability { .. }),
            "{refused:?}"
        );
        assert!(message.starts_with(named), "{message}");
        assert!(message.contains(fix), "{message}");
        assert!(
            message.contains("accept_unsafe_durability=true"),
            "{message}"
        );
        assert!(!refused.is_input(), "{refused:?}");
        assert_eq!(keys(&server), "", "a refused connect writes nothing");
        assert_eq!(server.cli(&["FUNCTION", "LIST"]), "", "nor loads a library");
        // Accepted knowingly, it connects and works.
        let store = RedisStore::connect(&format!("{}?accept_unsafe_durability=true", server.url()))
            .await
            .unwrap();
        let decision = store.begin(&id("k"), fp("k"), Timestamp(0)).await.unwrap();
        assert!(matches!(decision, Decision::Claimed { .. }), "{decision:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_wrong_credentials_and_a_database_out_of_range_are_named() {
    // Nobody listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = RedisStore::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect(&format!("redis://127.0.0.1:{port}/0"))
        .await
        .unwrap_err();
    assert!(
        matches!(unreachable, ConnectError::Connect(_)),
        "{unreachable:?}"
    );
    assert_eq!(
        unreachable.to_string(),
        "connecting to the redis server",
        "{unreachable:?}"
    );

    let server = Server::start_with(&["--requirepass s3cret"]);
    let wrong = RedisStore::connect(&format!("redis://:wrong@127.0.0.1:{}/0", server.port()))
        .await
        .unwrap_err();
    let chain = format!("{wrong}: {}", std::error::Error::source(&wrong).unwrap());
    assert!(matches!(wrong, ConnectError::Connect(_)), "{wrong:?}");
    assert!(
        chain.to_lowercase().contains("pass") || chain.contains("WRONGPASS"),
        "{chain}"
    );
    let right =
        RedisStore::connect(&format!("redis://:s3cret@127.0.0.1:{}/0", server.port())).await;
    assert!(right.is_ok(), "{:?}", right.err());

    let plain = Server::start();
    let url = format!("redis://127.0.0.1:{}/99", plain.port());
    let refused = RedisStore::connect(&url).await.unwrap_err();
    let chain = format!(
        "{refused}: {}",
        std::error::Error::source(&refused).unwrap()
    );
    assert!(matches!(refused, ConnectError::Connect(_)), "{refused:?}");
    assert!(chain.contains("out of range"), "{chain}");

    let not_a_cluster = RedisStore::connect(&format!("{}?cluster=true", plain.url()))
        .await
        .unwrap_err();
    assert_eq!(
        not_a_cluster.to_string(),
        "redis URL: cluster=true: the server answers no cluster's slots (is it a node of a Redis Cluster?)"
    );

    let bad_url = RedisStore::connect("redis://127.0.0.1:notaport/0")
        .await
        .unwrap_err();
    assert!(bad_url.is_input(), "{bad_url:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_callers_on_one_key_claim_it_once_a_round_with_unique_generations() {
    let server = Server::start();
    let store = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    let mut generations = BTreeSet::new();
    for round in 0..200 {
        let key = id(&format!("k-{round}"));
        let mut callers = Vec::new();
        for _ in 0..64 {
            let (store, key) = (Arc::clone(&store), key.clone());
            callers.push(tokio::spawn(async move {
                store.begin(&key, fp("same"), Timestamp(0)).await.unwrap()
            }));
        }
        let mut claimed = Vec::new();
        for caller in callers {
            match caller.await.unwrap() {
                Decision::Claimed { generation, .. } => claimed.push(generation),
                Decision::InProgress { .. } => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(claimed.len(), 1, "round {round}: {claimed:?}");
        assert!(
            generations.insert(claimed[0]),
            "{claimed:?} handed out twice"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_9_under_load_loses_no_acknowledged_claim_or_outcome_and_no_generation_repeats() {
    let mut server = Server::start();
    let url = server.url();
    let store = Arc::new(
        RedisStore::builder()
            .config(Config::default())
            .response_timeout(Duration::from_secs(2))
            .connect(&url)
            .await
            .unwrap(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = writers(&store, &stop);
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered = Vec::new();
    for writer in writers {
        answered.extend(writer.await.unwrap());
    }
    let settled = answered.iter().filter(|(_, _, s)| *s).count();
    println!(
        "{} claims and {settled} settles answered across a kill -9 and a restart",
        answered.len()
    );
    assert!(settled > 20, "too little load to tell: {settled} settles");
    let mut highest = Generation(0);
    let mut seen = BTreeSet::new();
    for (key, generation, settled) in &answered {
        assert!(seen.insert(*generation), "{generation} handed out twice");
        highest = highest.max(*generation);
        let record = store.get(key).await.unwrap();
        let record = record.unwrap_or_else(|| panic!("{key}: an answered claim was lost"));
        assert_eq!(record.generation, *generation, "{key}");
        if *settled {
            assert_eq!(
                record.state(),
                State::Succeeded,
                "{key}: an answered settle was lost"
            );
        }
    }
    // A claim after the restart is fenced above everything answered before it.
    let after = store
        .begin(&id("after"), fp("after"), Timestamp(0))
        .await
        .unwrap();
    let Decision::Claimed { generation, .. } = after else {
        panic!("{after:?}")
    };
    assert!(generation > highest, "{generation} after {highest}");
}

/// A primary and a replica: the primary `kill -9`ed under load and the replica promoted
/// (`REPLICAOF NO ONE`). Redis replicates asynchronously, so the replica may lack the
/// last claims and settles the primary answered: the test counts them and prints the
/// count (docs/redis.md quotes it). What it asserts is what the promoted replica must
/// still be: every record it holds is one the primary wrote (a generation answered for
/// that key, or one in flight), and a claim on it after the promotion works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_promoted_after_the_primary_is_killed_is_counted_for_what_it_lost() {
    let mut primary = Server::start();
    let replica = Server::start_with(&[&format!("--replicaof 127.0.0.1 {}", primary.port())]);
    replica.wait_for_primary();
    let store = Arc::new(
        RedisStore::builder()
            .response_timeout(Duration::from_secs(1))
            .connect(&primary.url())
            .await
            .unwrap(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = writers(&store, &stop);
    tokio::time::sleep(Duration::from_millis(800)).await;
    primary.kill9();
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered = Vec::new();
    for writer in writers {
        answered.extend(writer.await.unwrap());
    }
    let promoted = RedisStore::connect(&replica.url()).await.unwrap();
    let (mut claims_lost, mut settles_lost) = (0, 0);
    let mut highest = Generation(0);
    for (key, generation, settled) in &answered {
        highest = highest.max(*generation);
        match promoted.get(key).await.unwrap() {
            None => {
                claims_lost += 1;
                settles_lost += usize::from(*settled);
            }
            Some(record) => {
                assert_eq!(
                    record.generation, *generation,
                    "{key}: another claim's record"
                );
                if *settled && record.state() != State::Succeeded {
                    settles_lost += 1;
                }
            }
        }
    }
    let settled = answered.iter().filter(|(_, _, s)| *s).count();
    let counter: Option<u64> = {
        let text = replica.cli(&["GET", "{idem}:generation"]);
        text.parse().ok()
    };
    println!(
        "failover to an asynchronous replica: {} claims and {settled} settles answered by the \
         primary; lost on the promoted replica: {claims_lost} claims, {settles_lost} settles; \
         its generation counter {counter:?}, the highest answered {}",
        answered.len(),
        highest.0
    );
    assert!(settled > 20, "too little load to tell: {settled} settles");
    let after = promoted
        .begin(&id("after"), fp("after"), Timestamp(0))
        .await
        .unwrap();
    assert!(matches!(after, Decision::Claimed { .. }), "{after:?}");
}

/// The seed's watchdog, as idem does it on Redis: a claim whose holder goes on extends
/// its lease; a holder that died stops extending it, its lease ends on the server's
/// clock (the key turns Unknown at the next begin), and its late settle is refused by
/// its generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lease_ends_and_its_late_write_is_refused() {
    let server = Server::start();
    let store = RedisStore::builder()
        .config(Config {
            lease_ms: 300,
            ..Config::default()
        })
        .connect(&server.url())
        .await
        .unwrap();
    let key = id("held");
    let Decision::Claimed { generation, .. } =
        store.begin(&key, fp("a"), Timestamp(0)).await.unwrap()
    else {
        panic!("not claimed")
    };
    // A live holder: heartbeats every 100 ms for a second keep the key its own.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store
            .heartbeat(&key, generation, Timestamp(0))
            .await
            .unwrap();
        let seen = store.begin(&key, fp("a"), Timestamp(0)).await.unwrap();
        assert!(matches!(seen, Decision::InProgress { .. }), "{seen:?}");
    }
    // The holder dies: no more heartbeats. Past its lease the key is Unknown.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let seen = store.begin(&key, fp("a"), Timestamp(0)).await.unwrap();
    assert_eq!(seen, Decision::NeedsReconciliation { generation });
    // Its late settle is refused by its generation, and writes nothing.
    let late = store
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, b"late".to_vec()),
            Timestamp(0),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            late,
            idem_store::Error::Refused(idem_core::Refusal::Stale { .. })
        ),
        "{late:?}"
    );
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
}

/// A keyed request whose handler runs three times the lease: the layer extends the lease
/// while it runs, so its key never reads Unknown (nor is taken over), it runs once and is
/// settled. Without the watchdog, a begin after the lease would turn the key Unknown.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_layer_a_handler_three_times_slower_than_the_lease_keeps_its_key() {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::Full;
    use idem_core::protocol::Decision;
    use idem_core::{Fingerprint, RecordId, State, Timestamp};
    use idem_store::Receiver;
    use idem_store::http::{IdempotencyLayer, RequestBody, Settings, Tenant};
    use idem_store::redis::RedisStore;
    use tower::{Layer, ServiceExt};

    let server = Server::start();
    let config = idem_core::Config {
        lease_ms: 400,
        ..idem_core::Config::default()
    };
    let store = Arc::new(
        RedisStore::builder()
            .config(config)
            .connect(&server.url())
            .await
            .unwrap(),
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let handler = tower::service_fn({
        let executions = Arc::clone(&executions);
        move |_: Request<RequestBody<Full<Bytes>>>| {
            executions.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(1_200)).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"{\"paid\":1}",
                ))))
            }
        }
    });
    let settings = Settings {
        tenant: Tenant::Fixed("shop".into()),
        ..Settings::default()
    };
    let service = IdempotencyLayer::new(Arc::clone(&store), settings).layer(handler);
    let request = Request::post("/orders")
        .header("idempotency-key", "\"slow-1\"")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let first = tokio::spawn(service.oneshot(request));
    let id = RecordId::new("shop", "POST /orders", "slow-1").unwrap();
    // The handler runs: the key is claimed.
    while executions.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut looked = 0;
    while !first.is_finished() {
        // A begin under the key, on the server's clock, as a request on another
        // replica would make: the claim still holds, never Unknown nor taken over.
        let seen = store
            .begin(&id, Fingerprint::of_bytes(b"another"), Timestamp(0))
            .await
            .unwrap();
        // Another body under the key: a conflict with the Pending claim while it holds.
        match seen {
            Decision::Conflict {
                state: State::Pending,
                ..
            } => looked += 1,
            // Settled meanwhile.
            Decision::Conflict {
                state: State::Succeeded,
                ..
            } => {}
            other => panic!("while the handler ran, a begin answered {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(looked > 10, "looked {looked} times");
    let answer = first.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(executions.load(Ordering::SeqCst), 1, "it ran once");
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state(), State::Succeeded);
}

/// TLS (feature `redis-tls`): a server whose TLS port has a certificate of a private CA.
/// `rediss://` with that CA connects and works; without it the certificate is refused
/// (unknown issuer) and nothing is written; a plain connection to the TLS port fails.
#[cfg(feature = "redis-tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_a_private_ca_is_trusted_only_with_that_ca() {
    let dir = tempfile::tempdir().unwrap();
    certificates::certificates(dir.path());
    let file = |name: &str| dir.path().join(name).display().to_string();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server::start_with(&[
        &format!("--tls-port {tls_port}"),
        &format!("--tls-cert-file {}", file("server.pem")),
        &format!("--tls-key-file {}", file("server.key")),
        &format!("--tls-ca-cert-file {}", file("ca.pem")),
        "--tls-auth-clients no",
    ]);
    let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
    let tls = format!("rediss://127.0.0.1:{tls_port}/0");

    let unknown = RedisStore::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect(&tls)
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, ConnectError::Connect(_))
            && format!("{unknown:?}").contains("UnknownIssuer"),
        "{unknown:?}"
    );
    assert_eq!(keys(&server), "", "nothing written");
    let plain = RedisStore::builder()
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .connect(&format!("redis://127.0.0.1:{tls_port}/0"))
        .await
        .unwrap_err();
    assert!(matches!(plain, ConnectError::Connect(_)), "{plain:?}");

    let store = RedisStore::builder()
        .tls_root_certificates(&ca)
        .connect(&tls)
        .await
        .unwrap();
    let decision = store.begin(&id("k"), fp("k"), Timestamp(0)).await.unwrap();
    assert!(matches!(decision, Decision::Claimed { .. }), "{decision:?}");
    assert!(keys(&server).contains("{idem}:r:"), "{}", keys(&server));
}

/// Under `maxmemory` (with `noeviction` a server at its limit refuses every write, a
/// settle too): claims are refused with `NoRoom` while less than the reserve is left,
/// and the health check says why; every claim made settles, replays go on, and claims
/// come back once the limit is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn below_the_reserve_under_maxmemory_claims_are_refused_and_settles_go_on() {
    let server = Server::start_with(&["--maxmemory 6mb"]);
    let store = RedisStore::builder()
        .space_reserve(2 << 20)
        .connect(&server.url())
        .await
        .unwrap();
    let receipt = "r".repeat(50_000);
    let mut settled = Vec::new();
    let mut refused = None;
    for n in 0..1_000 {
        let key = id(&format!("k{n}"));
        match store.begin(&key, fp("tea"), Timestamp(0)).await {
            Ok(Decision::Claimed { generation, .. }) => {
                // Every claim made settles: the reserve is its room.
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(201, receipt.clone()),
                        Timestamp(0),
                    )
                    .await
                    .unwrap();
                settled.push(key);
            }
            Ok(other) => panic!("a fresh key: {other:?}"),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("the server's memory filled");
    assert!(
        matches!(refused, idem_store::Error::NoRoom { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("maxmemory"), "{refused}");
    println!(
        "{} claims settled before the reserve was reached",
        settled.len()
    );
    assert!(settled.len() > 10, "{} settled", settled.len());
    let why = store.unready().await.expect("not ready");
    assert!(why.contains("below the reserve"), "{why}");
    for key in &settled {
        assert!(matches!(
            store.begin(key, fp("tea"), Timestamp(0)).await.unwrap(),
            Decision::Replay { .. }
        ));
    }
    server.cli(&["CONFIG", "SET", "maxmemory", "64mb"]);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(store.unready().await, None);
    assert!(matches!(
        store
            .begin(&id("after"), fp("tea"), Timestamp(0))
            .await
            .unwrap(),
        Decision::Claimed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_replays_a_settled_record_from_memory_and_asks_for_the_rest() {
    let mut server = Server::start();
    let url = server.url();
    let connect = |records: usize| {
        RedisStore::builder()
            .replay_cache(records)
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .connect(&url)
    };
    let writer = connect(1_000).await.unwrap();
    let reader = connect(1_000).await.unwrap();
    let uncached = connect(0).await.unwrap();
    let (settled, pending) = (id("settled"), id("pending"));
    let Decision::Claimed { generation, .. } =
        writer.begin(&settled, fp("a"), Timestamp(0)).await.unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    writer
        .complete(
            &settled,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "made"),
            Timestamp(0),
        )
        .await
        .unwrap();
    // The reader keeps the record it replays.
    assert!(matches!(
        reader.begin(&settled, fp("a"), Timestamp(0)).await.unwrap(),
        Decision::Replay { .. }
    ));
    assert!(matches!(
        writer.begin(&pending, fp("a"), Timestamp(0)).await.unwrap(),
        Decision::Claimed { .. }
    ));

    server.stop();
    for (name, store) in [("the writer", &writer), ("the reader", &reader)] {
        match store.begin(&settled, fp("a"), Timestamp(0)).await {
            Ok(Decision::Replay { outcome, .. }) => {
                assert_eq!(outcome, Outcome::new(201, "made"), "{name}");
            }
            other => panic!("{name} replays from memory, got {other:?}"),
        }
        assert!(
            matches!(
                store.begin(&settled, fp("b"), Timestamp(0)).await,
                Ok(Decision::Conflict { .. })
            ),
            "{name} refuses another request under the key from memory"
        );
        let asked = store.begin(&pending, fp("a"), Timestamp(0)).await;
        assert!(
            asked.is_err(),
            "{name} keeps no pending record: it asks the stopped server, got {asked:?}"
        );
    }
    let asked = uncached.begin(&settled, fp("a"), Timestamp(0)).await;
    assert!(
        asked.is_err(),
        "a store that keeps no record asks the stopped server, got {asked:?}"
    );
}
