//! A fleet of `idem proxy` replicas on one PostgreSQL database: retries that land on any
//! replica, a replica SIGKILLed mid-run and restarted, a database that goes away and
//! comes back, and a failover to a synchronous standby. Every server here is a throwaway
//! one of the test's own.

mod common;

#[path = "../../store/tests/common/postgres.rs"]
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::Duration;

use common::Idem;
use common::fleet::{
    Orders, Rng, assert_at_most_once_and_replayed, assert_none_stranded, attempt, seed,
};
use common::http::{Answer, Proxy, Upstream, get, try_post};
use server::Server;

const REPLICAS: usize = 3;

/// An `idem` whose `--db` is `server`'s database.
fn on(server: &Server) -> Idem {
    Idem {
        db: PathBuf::from(server.url()),
        ..Idem::new()
    }
}

#[test]
fn retries_on_any_replica_take_effect_once_through_a_replica_killed_and_restarted() {
    const KEYS: usize = 300;
    const ATTEMPTS: usize = 3;
    let seed = seed();
    println!("seed {seed} (IDEM_SEED)");
    let server = Server::start();
    let upstream = Upstream::start(Duration::from_millis(2));
    let idem = on(&server);
    let mut proxies: Vec<Proxy> = (0..REPLICAS)
        .map(|_| Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]))
        .collect();
    let replicas = Arc::new(RwLock::new(
        proxies.iter().map(|p| p.address).collect::<Vec<_>>(),
    ));

    // Every key's attempts, shuffled, so attempts of one key run at once on replicas.
    let mut rng = Rng(seed);
    let mut jobs: Vec<String> = (0..KEYS)
        .flat_map(|k| std::iter::repeat_n(format!("fleet-{k}"), ATTEMPTS))
        .collect();
    for i in (1..jobs.len()).rev() {
        jobs.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let jobs = Arc::new(Mutex::new(jobs));
    let done = Arc::new(AtomicUsize::new(0));
    let acknowledged: Arc<Mutex<BTreeMap<String, Answer>>> = Arc::default();
    let workers: Vec<_> = (0..24)
        .map(|w| {
            let (jobs, done, acknowledged, replicas) = (
                Arc::clone(&jobs),
                Arc::clone(&done),
                Arc::clone(&acknowledged),
                Arc::clone(&replicas),
            );
            let mut rng = Rng(seed ^ (w as u64 + 1));
            thread::spawn(move || {
                loop {
                    let Some(key) = jobs.lock().unwrap().pop() else {
                        return;
                    };
                    if let Some(answer) = attempt(&replicas, &mut rng, &key)
                        && answer.status == 201
                    {
                        acknowledged.lock().unwrap().insert(key, answer);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // A third of the way in, replica 1 is SIGKILLed, then a new one takes its place.
    while done.load(Ordering::SeqCst) < KEYS * ATTEMPTS / 3 {
        thread::sleep(Duration::from_millis(5));
    }
    let killed = proxies.remove(1);
    replicas.write().unwrap().retain(|a| *a != killed.address);
    drop(killed); // SIGKILL, then waited for
    let restarted = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    replicas.write().unwrap().push(restarted.address);
    proxies.push(restarted);
    for worker in workers {
        worker.join().unwrap();
    }

    let acknowledged = acknowledged.lock().unwrap();
    println!(
        "{} of {KEYS} keys acknowledged with 201; the rest were claimed by the killed replica or answered in progress",
        acknowledged.len()
    );
    assert_at_most_once_and_replayed("fleet", KEYS, &upstream, &acknowledged, &proxies);
}

#[test]
fn a_database_that_goes_away_is_a_503_and_the_pool_recovers_without_a_restart() {
    let mut server = Server::start();
    let upstream = Upstream::start(Duration::ZERO);
    let idem = on(&server);
    let proxy = Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]);
    let send = |key: &str| {
        try_post(
            proxy.address,
            "/orders",
            &[("Idempotency-Key", &format!("\"{key}\""))],
            r#"{"item":"tea"}"#,
        )
        .unwrap()
    };
    assert_eq!(send("k-1").status, 201);

    server.stop();
    let away = send("k-2");
    assert_eq!(away.status, 503, "{}", away.body);
    assert_eq!(away.problem(), "store-failed");
    assert_eq!(away.header("retry-after").as_deref(), Some("1"));
    assert_eq!(get(proxy.admin, "/healthz").status, 503);
    assert_eq!(upstream.executions("\"k-2\""), 0, "nothing ran");
    // The operator's command names the cause and exits 1.
    let listed = idem.run(&["get", "shop", "POST /orders", "k-1"]);
    listed
        .code(1)
        .one_error_line(&["--db", "connecting to the database"]);

    server.restart();
    assert_eq!(get(proxy.admin, "/healthz").status, 200);
    assert_eq!(send("k-2").status, 201, "the same proxy, new connections");
    assert_eq!(upstream.executions("\"k-2\""), 1);

    // Every connection of the proxy terminated by the server: a request may meet a
    // broken one (503, nothing ran), and the next ones are served.
    assert!(common::run_sql(
        &server.url(),
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
          WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
    ));
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = send("k-3");
        answers.push(answer.status);
        if answer.status == 201 {
            break;
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
    }
    assert_eq!(answers.last(), Some(&201), "{answers:?}");
    assert_eq!(upstream.executions("\"k-3\""), 1);
}

#[test]
fn a_failover_to_a_synchronous_standby_loses_no_acknowledged_outcome_and_runs_every_order_once() {
    const KEYS: usize = 150;
    let seed = seed();
    println!("seed {seed} (IDEM_SEED)");
    let mut primary = Server::start_with(&[("synchronous_standby_names", "standby1")]);
    let standby = Server::standby_of(&primary, "standby1");
    // Commits on the primary wait for the standby's flush from here on.
    let mut waited = 0;
    while !common::run_sql(
        &primary.url(),
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_stat_replication \
           WHERE application_name = 'standby1' AND sync_state = 'sync') \
           THEN RAISE EXCEPTION 'not yet'; END IF; END $$",
    ) {
        waited += 1;
        assert!(waited < 600, "the standby never became synchronous");
        thread::sleep(Duration::from_millis(50));
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let upstream = Upstream::start(Duration::from_millis(2));
    let idem = Idem {
        db: PathBuf::from(url),
        ..Idem::new()
    };
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start(&idem, &upstream.url(), &["--tenant", "shop"]))
        .collect();
    let orders = Orders::start("failover", KEYS, 16, &proxies, seed);
    orders.wait_done(KEYS / 3);
    primary.kill9();
    standby.promote();
    let acknowledged = orders.finish();
    println!(
        "{} of {KEYS} keys acknowledged through the failover",
        acknowledged.len()
    );
    // Every acknowledged answer is on the promoted standby: each replica replays it.
    assert_at_most_once_and_replayed("failover", KEYS, &upstream, &acknowledged, &proxies);
    assert_none_stranded("failover", KEYS, &upstream);
}
