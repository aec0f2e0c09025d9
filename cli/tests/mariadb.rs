//! The operator's commands on a MariaDB database (`--db mysql://…`), on a throwaway
//! server: the same JSON and exit statuses as on a file, the database's clock, the
//! schema printed for a DBA, moving records between a file and the database, a server
//! whose durability settings are refused, a semi-synchronous primary that fell back to
//! asynchronous replication, as the proxy reports it, three proxies that follow a
//! failover to the promoted replica without a restart, and three proxies on the three
//! nodes of a Galera cluster, one node killed mid-run.

mod common;

#[path = "../../store/tests/common/mariadb.rs"]
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::Idem;
use common::fleet::{Orders, assert_at_most_once_and_replayed, assert_none_stranded, seed};
use common::http::{Answer, Proxy, Upstream, get, post, try_post};
use serde_json::json;
use server::Server;

/// An `idem` whose `--db` is the database `name` on `server` (made here).
fn on(server: &Server, name: &str) -> Idem {
    server.sql(&format!("CREATE DATABASE IF NOT EXISTS {name}"));
    Idem {
        db: PathBuf::from(server.url_of(name)),
        ..Idem::new()
    }
}

#[test]
fn the_receiver_commands_work_on_a_database_as_on_a_file() {
    let server = Server::start();
    let idem = on(&server, "shop");

    let run = idem.run(&["--json", "begin", "shop", "charge", "k-1", "--payload", "-"]);
    run.code(0);
    let claimed = run.json();
    assert_eq!(claimed["decision"], "claimed");
    let generation = claimed["generation"].as_u64().unwrap().to_string();
    idem.run(&["--json", "begin", "shop", "charge", "k-1"])
        .code(4);
    idem.run_stdin(
        &["--json", "begin", "shop", "charge", "k-1", "--payload", "-"],
        b"other",
    )
    .code(3);
    let receipt = idem.file("receipt.bin", b"receipt \x00\xff");
    idem.run(&[
        "--json",
        "complete",
        "shop",
        "charge",
        "k-1",
        "--generation",
        &generation,
        "--code",
        "201",
        "--outcome",
        &receipt,
    ])
    .code(0);
    let replay = idem.run(&["--json", "begin", "shop", "charge", "k-1"]);
    replay.code(0);
    let replay = replay.json();
    assert_eq!(
        (&replay["decision"], &replay["code"], &replay["outcome_b64"]),
        (&json!("replay"), &json!(201), &json!("cmVjZWlwdCAA/w=="))
    );
    // A stale generation: exit 6.
    idem.run(&[
        "release",
        "shop",
        "charge",
        "k-1",
        "--generation",
        &generation,
    ])
    .code(6);
    let stats = idem.run(&["--json", "stats"]);
    stats.code(0);
    assert_eq!(stats.json()["succeeded"], json!(1));

    // The database's clock is the fleet's: --now is refused, before anything is written.
    idem.run(&["--now", "0", "begin", "shop", "charge", "k-9"])
        .code(2)
        .one_error_line(&["--now", "MariaDB"]);
    idem.run(&["get", "shop", "charge", "k-9"]).code(7);
    // A command of the file alone names why.
    idem.run(&["check"])
        .code(2)
        .one_error_line(&["--db", "MariaDB", "store file"]);

    // The schema a DBA applies by hand: MariaDB's for a mysql:// --db.
    let schema = idem.run(&["schema"]);
    schema.code(0);
    assert!(
        schema
            .stdout
            .contains("CREATE SEQUENCE IF NOT EXISTS idem_generation")
    );
    assert!(schema.stdout.contains("VARBINARY(255)"));

    // Records move from the database to a file and back unchanged.
    let exported = idem.path("db.jsonl");
    let exported = exported.to_str().unwrap();
    idem.run(&["export", "--out", exported]).code(0);
    let file = Idem::new();
    file.run(&["import", exported]).code(0);
    let again = file.path("again.jsonl");
    file.run(&["export", "--out", again.to_str().unwrap()])
        .code(0);
    let other = on(&server, "other");
    let run = other.run(&["--json", "import", again.to_str().unwrap()]);
    run.code(0);
    assert_eq!(run.json()["imported"], 1);
    let replay = other.run(&["--json", "begin", "shop", "charge", "k-1"]);
    assert_eq!(replay.json()["outcome_b64"], json!("cmVjZWlwdCAA/w=="));
}

#[test]
fn a_server_that_can_lose_an_answer_is_refused_unless_the_url_accepts_it() {
    let server = Server::start_with(&[("innodb_flush_log_at_trx_commit", "0")]);
    let idem = on(&server, "shop");
    idem.run(&["begin", "t", "o", "k"])
        .code(1)
        .one_error_line(&[
            "innodb_flush_log_at_trx_commit is 0",
            "innodb_flush_log_at_trx_commit = 1",
            "accept_unsafe_durability=true",
        ]);
    assert_eq!(
        server.sql("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'shop'"),
        "0\n",
        "nothing was written"
    );
    let accepted = Idem {
        db: PathBuf::from(format!(
            "{}?accept_unsafe_durability=true",
            server.url_of("shop")
        )),
        ..Idem::new()
    };
    accepted.run(&["begin", "t", "o", "k"]).code(0);
}

#[test]
fn two_proxies_on_one_database_run_a_request_once_and_both_replay_it() {
    let server = Server::start();
    let idem = on(&server, "fleet");
    let upstream = Upstream::start(Duration::from_millis(1));
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]))
        .collect();
    let headers = [("Idempotency-Key", "\"order-1\"")];
    let first = post(
        proxies[0].address,
        "/orders",
        &headers,
        "{\"key\":\"order-1\"}",
    );
    assert_eq!(first.status, 201, "{}", first.problem());
    let replay = post(
        proxies[1].address,
        "/orders",
        &headers,
        "{\"key\":\"order-1\"}",
    );
    assert_eq!((replay.status, &replay.body), (first.status, &first.body));
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(upstream.executions("\"order-1\""), 1, "ran once");
}

#[test]
fn a_semi_synchronous_primary_that_fell_back_is_reported_degraded_while_it_lasts() {
    let server = Server::start_with(&[
        ("log-bin", "mariadb-bin"),
        ("sync_binlog", "1"),
        ("binlog_format", "ROW"),
        ("server-id", "1"),
        ("rpl_semi_sync_master_wait_point", "AFTER_SYNC"),
        // No replica will acknowledge: a commit waits this long, then the primary falls
        // back to asynchronous replication.
        ("rpl_semi_sync_master_timeout", "300"),
    ]);
    let idem = on(&server, "degraded");
    let upstream = Upstream::start(Duration::from_millis(1));
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    let health = get(proxy.admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ready\n"));

    server.sql("SET GLOBAL rpl_semi_sync_master_enabled = ON");
    let headers = [("Idempotency-Key", "\"order-1\"")];
    let first = post(proxy.address, "/orders", &headers, "{}");
    assert_eq!(first.status, 201, "{}", first.problem());
    let health = get(proxy.admin, "/healthz");
    assert_eq!(
        health.status, 200,
        "degraded is still ready: {}",
        health.body
    );
    assert!(
        health.body.starts_with(
            "ready, degraded: semi-synchronous replication fell back to asynchronous \
             (rpl_semi_sync_master_enabled is ON, Rpl_semi_sync_master_status is OFF)"
        ),
        "{}",
        health.body
    );
    let metrics = get(proxy.admin, "/metrics").body;
    assert!(
        metrics.contains("\nidem_proxy_store_degraded 1\n"),
        "{metrics}"
    );

    // Read at each check: once the primary is no longer semi-synchronous by setting,
    // the check at connect judges it again, and nothing is degraded.
    server.sql("SET GLOBAL rpl_semi_sync_master_enabled = OFF");
    let health = get(proxy.admin, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ready\n"));
    let metrics = get(proxy.admin, "/metrics").body;
    assert!(
        metrics.contains("\nidem_proxy_store_degraded 0\n"),
        "{metrics}"
    );
}

#[test]
fn three_proxies_follow_a_failover_to_the_promoted_replica_and_run_every_order_once() {
    const KEYS: usize = 150;
    let seed = seed();
    println!("seed {seed} (IDEM_SEED)");
    let (mut primary, replica) = Server::semi_synchronous_pair("shop");
    // Both hosts, the read-only replica first: each proxy writes to the primary, and to
    // the replica once it is promoted, without a restart.
    let idem = Idem {
        db: PathBuf::from(format!(
            "mysql://root@127.0.0.1:{},127.0.0.1:{}/shop",
            replica.port(),
            primary.port()
        )),
        ..Idem::new()
    };
    let upstream = Upstream::start(Duration::from_millis(2));
    let proxies: Vec<Proxy> = (0..3)
        .map(|_| Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]))
        .collect();
    let orders = Orders::start("failover", KEYS, 16, &proxies, seed);
    orders.wait_done(KEYS / 3);
    primary.kill9();
    // While no host takes writes, each proxy's health check says why.
    let health = get(proxies[0].admin, "/healthz");
    assert_eq!(health.status, 503, "{}", health.body);
    assert!(
        health
            .body
            .contains(&format!("127.0.0.1:{} (read_only is ON)", replica.port())),
        "{}",
        health.body
    );
    replica.promote();
    let acknowledged = orders.finish();
    println!(
        "{} of {KEYS} keys acknowledged through the failover",
        acknowledged.len()
    );
    // Every acknowledged answer is on the promoted replica: each proxy replays it.
    assert_at_most_once_and_replayed("failover", KEYS, &upstream, &acknowledged, &proxies);
    assert_none_stranded("failover", KEYS, &upstream);
    for proxy in &proxies {
        assert_eq!(get(proxy.admin, "/healthz").status, 200);
    }
}

/// Sends `key` to proxy `first` of `proxies` until one answers 201 (at most 20 s):
/// 409 is retried on the same proxy, a proxy that does not answer or answers 503 (its
/// node is gone) is left for the next one.
fn until_answered(proxies: &[std::net::SocketAddr], first: usize, key: &str) -> Option<Answer> {
    let mut at = first;
    for _ in 0..200 {
        let sent = try_post(
            proxies[at % proxies.len()],
            "/orders",
            &[("Idempotency-Key", &format!("\"{key}\""))],
            &format!("{{\"key\":\"{key}\"}}"),
        );
        match sent {
            Ok(answer) if answer.status == 201 => return Some(answer),
            Ok(answer) if answer.status == 409 => {}
            Ok(answer) if answer.status == 503 => at += 1,
            Ok(answer) => panic!("{key}: {} {}", answer.status, answer.body),
            Err(_) => at += 1,
        }
        thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Run by hand (`cargo test -p idem-cli --test mariadb galera -- --ignored`): in one run
/// of the whole test command, with every other suite's servers on the same two cores, an
/// order ran twice (docs/mariadb.md, "A Galera cluster"); alone, and beside a CPU hog, it
/// passes. Galera is not supported until the cause is found.
#[test]
#[ignore = "an order ran twice once under load; Galera is not supported yet (docs/mariadb.md)"]
fn three_proxies_on_three_galera_nodes_run_each_order_once_through_a_node_killed() {
    const KEYS: usize = 120;
    let mut nodes = Server::galera_cluster(3);
    nodes[0].sql("CREATE DATABASE shop");
    for node in &nodes {
        assert!(node.sql("SHOW DATABASES LIKE 'shop'").contains("shop"));
    }
    let upstream = Upstream::start(Duration::from_millis(2));
    // Each proxy on its own node first, the others after it: a proxy whose node is
    // killed goes on on the next.
    let proxies: Vec<Proxy> = (0..3)
        .map(|n| {
            let hosts: Vec<String> = (0..3)
                .map(|i| format!("127.0.0.1:{}", nodes[(n + i) % 3].port()))
                .collect();
            let idem = Idem {
                db: PathBuf::from(format!("mysql://root@{}/shop", hosts.join(","))),
                ..Idem::new()
            };
            Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"])
        })
        .collect();
    let addresses: Vec<_> = proxies.iter().map(|p| p.address).collect();
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let answers: Arc<Mutex<BTreeMap<String, Vec<Answer>>>> = Arc::default();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (next, done, answers, addresses) = (
                Arc::clone(&next),
                Arc::clone(&done),
                Arc::clone(&answers),
                addresses.clone(),
            );
            thread::spawn(move || {
                loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    if k >= KEYS {
                        return;
                    }
                    let key = format!("galera-{k}");
                    // The key's three attempts at once, one on each proxy.
                    let answered: Vec<Answer> = thread::scope(|scope| {
                        let attempts: Vec<_> = (0..3)
                            .map(|first| {
                                let (addresses, key) = (&addresses, &key);
                                scope.spawn(move || until_answered(addresses, first, key))
                            })
                            .collect();
                        attempts
                            .into_iter()
                            .filter_map(|attempt| attempt.join().unwrap())
                            .collect()
                    });
                    answers.lock().unwrap().insert(key, answered);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    while done.load(Ordering::SeqCst) < KEYS / 3 {
        thread::sleep(Duration::from_millis(5));
    }
    nodes[2].kill9();
    for worker in workers {
        worker.join().unwrap();
    }
    // The two nodes left agree that the third is gone (until then a write waits for
    // it): the replays below meet the cluster as it now is.
    for _ in 0..600 {
        if nodes[..2].iter().all(|node| {
            node.sql("SHOW STATUS LIKE 'wsrep_cluster_size'")
                .trim()
                .ends_with("\t2")
        }) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }

    let answers = answers.lock().unwrap();
    let mut acknowledged = BTreeMap::new();
    for (key, answered) in answers.iter() {
        if let Some(first) = answered.first() {
            for other in answered {
                assert_eq!(
                    (other.status, &other.body),
                    (first.status, &first.body),
                    "{key}: one answer for every attempt"
                );
            }
            acknowledged.insert(key.clone(), answered[0].clone());
        }
    }
    let attempts: usize = answers.values().map(Vec::len).sum();
    println!(
        "{} of {KEYS} keys acknowledged ({attempts} of {} attempts answered 201) through a node killed",
        acknowledged.len(),
        KEYS * 3
    );
    // Each acknowledged answer is on the two nodes left: every proxy replays it, the
    // one whose node was killed through the next node of its list.
    assert_at_most_once_and_replayed("galera", KEYS, &upstream, &acknowledged, &proxies);
    // One sequence for the cluster: every record's generation its own.
    let counted = nodes[0].sql(
        "SELECT COUNT(*), COUNT(DISTINCT generation) FROM shop.idem_records \
          WHERE idem_key LIKE 'galera-%'",
    );
    let (rows, generations) = counted.trim().split_once('\t').unwrap();
    assert_eq!(rows, generations, "generations handed out twice");
    println!(
        "{rows} records, {generations} generations; certification conflicts started over: {} and {}",
        nodes[0]
            .sql("SHOW STATUS LIKE 'wsrep_local_cert_failures'")
            .trim(),
        nodes[1]
            .sql("SHOW STATUS LIKE 'wsrep_local_cert_failures'")
            .trim()
    );
}
