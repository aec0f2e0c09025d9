//! A failover to a semi-synchronous replica (`rpl_semi_sync_master_wait_point =
//! AFTER_SYNC`): the primary is killed with SIGKILL while claims and settles run, the
//! replica applies what it received and becomes the primary, and every answered settle
//! replays there; a claim on it gets a generation above every one answered before.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Generation, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::server::Server;

/// Waits until `done` holds, at most `timeout`.
fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `field` in the replica's `SHOW SLAVE STATUS`.
fn slave_status(replica: &Server, field: &str) -> String {
    let text = replica.sql("SHOW SLAVE STATUS\\G");
    text.lines()
        .find_map(|line| {
            let (name, value) = line.trim().split_once(": ")?;
            (name == field).then(|| value.to_owned())
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answered_settles_survive_a_failover_to_a_semi_synchronous_replica() {
    let durable = [
        ("log-bin", "mariadb-bin"),
        ("sync_binlog", "1"),
        ("binlog_format", "ROW"),
        ("rpl_semi_sync_master_wait_point", "AFTER_SYNC"),
        // Long enough that the primary never falls back to asynchronous replication
        // during the test.
        ("rpl_semi_sync_master_timeout", "600000"),
    ];
    let mut primary_options = durable.to_vec();
    primary_options.extend([("server-id", "1"), ("rpl_semi_sync_master_enabled", "ON")]);
    let mut primary = Server::start_with(&primary_options);
    let mut replica_options = durable.to_vec();
    replica_options.extend([
        ("server-id", "2"),
        ("rpl_semi_sync_slave_enabled", "ON"),
        ("relay-log", "relay-bin"),
    ]);
    let replica = Server::start_with(&replica_options);
    replica.sql(&format!(
        "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = 'root', \
           MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos; START SLAVE",
        primary.port()
    ));
    wait_for("the replica acknowledges", Duration::from_secs(30), || {
        primary
            .sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
            .contains("\t1")
    });
    primary.sql("CREATE DATABASE shop");
    wait_for(
        "the database reaches the replica",
        Duration::from_secs(30),
        || replica.sql("SHOW DATABASES LIKE 'shop'").contains("shop"),
    );

    let store = Arc::new(
        MySqlStore::builder()
            .pool_size(16)
            .connect(&primary.url_of("shop"))
            .await
            .unwrap(),
    );
    let answered: Arc<Mutex<BTreeMap<String, Generation>>> = Arc::default();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (store, answered) = (store.clone(), answered.clone());
            tokio::spawn(async move {
                for n in 0.. {
                    let key = format!("w{w}-{n}");
                    let id = RecordId::new("shop", "charge", &key).unwrap();
                    let fp = Fingerprint::of_bytes(key.as_bytes());
                    let Ok(Decision::Claimed { generation, .. }) =
                        store.begin(&id, fp, Timestamp(0)).await
                    else {
                        return;
                    };
                    let settled = store
                        .complete(
                            &id,
                            generation,
                            Verdict::Succeeded,
                            Outcome::new(201, key.clone()),
                            Timestamp(0),
                        )
                        .await;
                    // Unanswered (the primary died under it): it may or may not have
                    // landed, and nothing is promised of it.
                    if settled.is_err() {
                        return;
                    }
                    answered.lock().unwrap().insert(key, generation);
                }
            })
        })
        .collect();
    // Some settles are answered, then the primary dies mid-run.
    let started = Instant::now();
    while answered.lock().unwrap().len() < 200 {
        assert!(started.elapsed() < Duration::from_secs(60), "too slow");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    primary.kill9();
    for writer in writers {
        writer.await.unwrap();
    }
    drop(store);

    // The replica applies what it received, and becomes the primary.
    replica.sql("STOP SLAVE IO_THREAD");
    wait_for(
        "the replica applies its relay log",
        Duration::from_secs(60),
        || {
            slave_status(&replica, "Read_Master_Log_Pos")
                == slave_status(&replica, "Exec_Master_Log_Pos")
                && slave_status(&replica, "Master_Log_File")
                    == slave_status(&replica, "Relay_Master_Log_File")
        },
    );
    replica.sql("STOP SLAVE; RESET SLAVE ALL");
    let store = MySqlStore::connect(&replica.url_of("shop")).await.unwrap();
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 200, "{}", answered.len());
    for (key, generation) in &answered {
        let id = RecordId::new("shop", "charge", key).unwrap();
        match store
            .begin(&id, Fingerprint::of_bytes(key.as_bytes()), Timestamp(0))
            .await
            .unwrap()
        {
            Decision::Replay { outcome, .. } => {
                assert_eq!(outcome, Outcome::new(201, key.clone()), "{key}");
            }
            other => {
                panic!("{key} (generation {generation}) answered before the failover: {other:?}")
            }
        }
    }
    let highest = answered.values().max().copied().unwrap();
    let id = RecordId::new("shop", "charge", "after-failover").unwrap();
    match store
        .begin(&id, Fingerprint::of_bytes(b"x"), Timestamp(0))
        .await
        .unwrap()
    {
        Decision::Claimed { generation, .. } => {
            assert!(generation > highest, "{generation} after {highest}");
        }
        other => panic!("{other:?}"),
    }
    println!(
        "{} settles answered before the kill, all replayed by the new primary",
        answered.len()
    );
}
