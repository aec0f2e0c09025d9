//! A claim whose answer was lost (docs/design.md §16): the claim's commit waits for a
//! semi-synchronous replica's acknowledgement, its connection is killed as a failover
//! cuts it, the begin fails with "nothing was executed, retry", and the claim that
//! landed is given back once the database answers again, so that the retry claims the
//! key instead of meeting a claim nobody runs.

use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Receiver, RecordId, Timestamp};

use crate::fresh_database;
use crate::server::Server;

/// What `sql` prints once it prints something, polled for at most `timeout`.
fn wait_for_rows(server: &Server, sql: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = server.sql(sql);
        if !rows.trim().is_empty() {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "{sql}: no row within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_answer_was_lost_is_given_back_and_the_retry_claims() {
    let server = Server::start_with(&[
        ("log-bin", "mariadb-bin"),
        ("sync_binlog", "1"),
        ("binlog_format", "ROW"),
        ("server-id", "1"),
        ("rpl_semi_sync_master_wait_point", "AFTER_SYNC"),
        // No fall back to asynchronous replication during the test.
        ("rpl_semi_sync_master_timeout", "600000"),
    ]);
    let db = fresh_database(&server);
    let store = MySqlStore::builder()
        .statement_timeout(Duration::from_secs(2))
        .connect(&server.url_of(&db))
        .await
        .unwrap();
    let id = RecordId::new("shop", "charge", "lost").unwrap();
    let fingerprint = Fingerprint::of_bytes(b"order 1");
    let rows = format!(
        "SELECT state, claimant IS NOT NULL FROM {db}.idem_records WHERE idem_key = 'lost'"
    );

    // From here every commit waits for a replica's acknowledgement, and none is there.
    server.sql("SET GLOBAL rpl_semi_sync_master_enabled = ON");
    let begin = tokio::spawn({
        let (store, id) = (store.clone(), id.clone());
        async move { store.begin(&id, fingerprint, Timestamp(0)).await }
    });
    let waiting = wait_for_rows(
        &server,
        "SELECT id FROM information_schema.processlist WHERE state LIKE '%semi-sync ACK%'",
        Duration::from_secs(30),
    );
    server.sql(&format!("KILL CONNECTION {}", waiting.trim()));
    let lost = tokio::time::timeout(Duration::from_secs(30), begin)
        .await
        .expect("the begin answers once its connection is killed")
        .unwrap();
    let error = lost.expect_err("a begin whose connection was killed mid-commit fails");
    assert!(
        matches!(
            error,
            idem_store::Error::MySql {
                operation: "begin",
                ..
            }
        ),
        "{error:?}"
    );
    // The claim landed, marked with its begin, and nobody will run it.
    assert_eq!(
        wait_for_rows(&server, &rows, Duration::from_secs(10)).trim(),
        "0\t1"
    );

    // The database answers again (here: commits no longer wait for a replica).
    server.sql("SET GLOBAL rpl_semi_sync_master_enabled = OFF");
    tokio::time::timeout(Duration::from_secs(60), store.idle())
        .await
        .expect("the give-back ends");
    assert_eq!(
        server.sql(&rows).trim(),
        "",
        "the lost claim was given back"
    );
    assert!(
        matches!(
            store.begin(&id, fingerprint, Timestamp(0)).await.unwrap(),
            Decision::Claimed { .. }
        ),
        "the retry claims the key"
    );
}
