//! Bad input at connect: one clear error each, and nothing written.

use idem_core::protocol::Decision;
use idem_store::mysql::{ConnectError, MySqlStore};
use idem_store::{Fingerprint, Receiver, RecordId, Status, Timestamp};

use crate::server::Server;
use crate::{fresh_database, shared_server, tables};

/// The driver's server error code under a [`ConnectError::Connect`].
fn server_code(error: &ConnectError) -> Option<u16> {
    match error {
        ConnectError::Connect(mysql_async::Error::Server(e)) => Some(e.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_connect_error_not_input() {
    let port = closed_port();
    let error = MySqlStore::connect(&format!("mysql://root@127.0.0.1:{port}/shop"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConnectError::Connect(mysql_async::Error::Io(_))),
        "{error:?}"
    );
    assert_eq!(error.to_string(), "connecting to the database");
    assert!(!error.is_input());
}

/// A loopback port nothing listens on: bound, then let go.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_hosts_connects_to_the_one_that_answers_or_names_why_each_did_not() {
    let server = shared_server();
    let db = fresh_database(&server);
    let (dead, also_dead) = (closed_port(), closed_port());
    let url = format!(
        "mysql://root@127.0.0.1:{dead},127.0.0.1:{}/{db}",
        server.port()
    );
    let store = MySqlStore::connect(&url).await.unwrap();
    let id = RecordId::new("t", "o", "k").unwrap();
    store
        .begin(&id, Fingerprint::of_bytes(b"x"), Timestamp(0))
        .await
        .unwrap();
    assert!(tables(&server, &db).contains("idem_records"));

    let url = format!("mysql://root@127.0.0.1:{dead},127.0.0.1:{also_dead}/{db}");
    let error = MySqlStore::connect(&url).await.unwrap_err();
    assert!(!error.is_input());
    let message = error.to_string();
    for port in [dead, also_dead] {
        assert!(
            message.contains(&format!("127.0.0.1:{port} (Input/output error")),
            "{message}"
        );
    }
    assert!(
        message.starts_with("no writable host among the URL's: "),
        "{message}"
    );
    let error = MySqlStore::connect(&format!("mysql://root@127.0.0.1:{dead},/{db}"))
        .await
        .unwrap_err();
    assert!(error.is_input(), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_gets_no_connection_within_the_connect_timeout_fails_naming_it() {
    let server = shared_server();
    let db = fresh_database(&server);
    let store = MySqlStore::builder()
        .pool_size(1)
        .connect_timeout(std::time::Duration::from_millis(500))
        .connect(&server.url_of(&db))
        .await
        .unwrap();
    // An execute holds the pool's one connection until it is let go.
    let (started, holding) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let held = tokio::spawn({
        let store = store.clone();
        async move {
            let id = RecordId::new("shop", "charge", "held").unwrap();
            store
                .execute(&id, Fingerprint::of_bytes(b"held"), move |_txn| {
                    Box::pin(async move {
                        let _ = started.send(());
                        let _ = released.await;
                        Ok::<_, std::io::Error>((
                            idem_store::Verdict::Succeeded,
                            idem_store::Outcome::new(200, "ok"),
                            (),
                        ))
                    })
                })
                .await
        }
    });
    holding.await.unwrap();
    let id = RecordId::new("shop", "charge", "other").unwrap();
    let waited = std::time::Instant::now();
    let error = store.get(&id).await.unwrap_err();
    let waited = waited.elapsed();
    let chain = format!(
        "{error}: {}",
        std::error::Error::source(&error).map_or(String::new(), ToString::to_string)
    );
    assert!(chain.contains("connect_timeout"), "{chain}");
    assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
    release.send(()).unwrap();
    assert!(matches!(
        held.await.unwrap().unwrap(),
        idem_store::Executed::Ran { .. }
    ));
    assert_eq!(
        store.get(&id).await.unwrap(),
        None,
        "the connection is back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused_by_the_server_and_nothing_is_written() {
    let server = shared_server();
    let db = fresh_database(&server);
    server.sql(&format!(
        "CREATE USER IF NOT EXISTS 'idem'@'127.0.0.1' IDENTIFIED BY 'right'; \
         GRANT ALL ON {db}.* TO 'idem'@'127.0.0.1'"
    ));
    let url = format!("mysql://idem:wrong@127.0.0.1:{}/{db}", server.port());
    let error = MySqlStore::connect(&url).await.unwrap_err();
    assert_eq!(server_code(&error), Some(1045), "{error:?}");
    assert!(!error.is_input());
    assert_eq!(tables(&server, &db), "", "nothing was created");
    // The right password connects and makes the schema.
    let url = format!("mysql://idem:right@127.0.0.1:{}/{db}", server.port());
    MySqlStore::connect(&url).await.unwrap();
    assert!(tables(&server, &db).contains("idem_records"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_exist_is_refused_and_not_made() {
    let server = shared_server();
    let error = MySqlStore::connect(&server.url_of("no_such_db"))
        .await
        .unwrap_err();
    assert_eq!(server_code(&error), Some(1049), "{error:?}");
    assert_eq!(server.sql("SHOW DATABASES LIKE 'no_such_db'"), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_naming_both_versions_and_left_untouched() {
    let server = shared_server();
    let db = fresh_database(&server);
    MySqlStore::connect(&server.url_of(&db)).await.unwrap();
    server.sql(&format!(
        "UPDATE {db}.idem_meta SET value = 99 WHERE name = 'schema_version'"
    ));
    let error = MySqlStore::connect(&server.url_of(&db)).await.unwrap_err();
    assert!(
        matches!(
            error,
            ConnectError::NewerSchema {
                found: 99,
                supported: 2
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the database's idem schema is version 99, newer than this build reads (at most 2); use a newer idem"
    );
    assert_eq!(
        server.sql(&format!(
            "SELECT value FROM {db}.idem_meta WHERE name = 'schema_version'"
        )),
        "99\n"
    );
}

/// A database of version 1 (before the claimant): refused as older without the right to
/// change it, upgraded by a connection that may, its records kept and the claimant there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_schema_is_upgraded_and_keeps_its_records() {
    let server = shared_server();
    let db = fresh_database(&server);
    let golden = include_str!("../../../testdata/mariadb-schema-v1.sql");
    server.sql(&format!("USE {db};\n{golden}"));
    server.sql(&format!(
        "INSERT INTO {db}.idem_records (tenant, operation, idem_key, fingerprint, generation, \
           revision, state, created_at, updated_at, lease_until) \
         VALUES ('shop', 'charge', 'kept', UNHEX(SHA2('a', 256)), NEXTVAL({db}.idem_generation), \
           0, 0, 1, 1, 2)"
    ));
    let url = server.url_of(&db);
    let refused = MySqlStore::builder()
        .create_schema(false)
        .connect(&url)
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            ConnectError::OlderSchema {
                found: 1,
                supported: 2
            }
        ),
        "{refused:?}"
    );
    let store = MySqlStore::connect(&url).await.unwrap();
    assert_eq!(
        server.sql(&format!(
            "SELECT value FROM {db}.idem_meta WHERE name = 'schema_version'"
        )),
        "2\n"
    );
    let kept = RecordId::new("shop", "charge", "kept").unwrap();
    let record = store.get(&kept).await.unwrap().expect("the record is kept");
    assert!(matches!(
        record.status,
        Status::Unknown | Status::Pending { .. }
    ));
    // A claim on the upgraded table carries its mark.
    let fresh = RecordId::new("shop", "charge", "fresh").unwrap();
    store
        .begin(&fresh, Fingerprint::of_bytes(b"a"), Timestamp(0))
        .await
        .unwrap();
    assert_eq!(
        server.sql(&format!(
            "SELECT idem_key FROM {db}.idem_records WHERE claimant IS NOT NULL"
        )),
        "fresh\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_that_counts_by_one_steps_by_the_servers_increment_after_connect() {
    let server = shared_server();
    let db = fresh_database(&server);
    let url = server.url_of(&db);
    drop(MySqlStore::connect(&url).await.unwrap());
    // As an earlier idem made it, with values handed out.
    server.sql(&format!(
        "ALTER SEQUENCE {db}.idem_generation INCREMENT BY 1; \
         SELECT NEXTVAL({db}.idem_generation); SELECT NEXTVAL({db}.idem_generation)"
    ));
    let increment = || server.sql(&format!("SELECT increment FROM {db}.idem_generation"));
    assert_eq!(increment(), "1\n");
    let store = MySqlStore::connect(&url).await.unwrap();
    assert_eq!(increment(), "0\n", "steps by auto_increment_increment");
    let id = RecordId::new("shop", "charge", "after").unwrap();
    match store
        .begin(&id, Fingerprint::of_bytes(b"a"), Timestamp(0))
        .await
        .unwrap()
    {
        Decision::Claimed { generation, .. } => assert!(generation.0 > 2, "{generation}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_schema_creation_an_empty_database_is_refused_and_left_empty() {
    let server = shared_server();
    let db = fresh_database(&server);
    let error = MySqlStore::builder()
        .create_schema(false)
        .connect(&server.url_of(&db))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::NoSchema), "{error:?}");
    assert_eq!(tables(&server, &db), "");
    // The schema a DBA applies with the `mariadb` client is what the engine reads.
    server.sql(&format!("USE {db};\n{}", MySqlStore::schema_sql()));
    let store = MySqlStore::builder()
        .create_schema(false)
        .connect(&server.url_of(&db))
        .await
        .unwrap();
    let id = RecordId::new("shop", "charge", "k").unwrap();
    let fp = Fingerprint::of_bytes(b"a");
    let claimed = store.begin(&id, fp, Timestamp(0)).await.unwrap();
    assert!(matches!(claimed, Decision::Claimed { .. }), "{claimed:?}");
    let again = store.begin(&id, fp, Timestamp(0)).await.unwrap();
    assert!(matches!(again, Decision::InProgress { .. }), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_timeout_the_server_cannot_keep_is_refused_as_input() {
    let server = shared_server();
    let db = fresh_database(&server);
    let error = MySqlStore::builder()
        .lock_timeout(std::time::Duration::from_millis(500))
        .connect(&server.url_of(&db))
        .await
        .unwrap_err();
    assert!(error.is_input(), "{error:?}");
    assert_eq!(
        error.to_string(),
        "lock_timeout: 500ms, must be a whole number of seconds, at least 1 (innodb_lock_wait_timeout)"
    );
    assert_eq!(tables(&server, &db), "");
}

/// Connects to a fresh database on `server` as told, and returns the error, if any, with
/// the tables the attempt left.
async fn connect_to(server: &Server, accept: bool, url_accept: bool) -> (Option<String>, String) {
    let db = fresh_database(server);
    let mut url = server.url_of(&db);
    if url_accept {
        url.push_str("?accept_unsafe_durability=true");
    }
    let connected = MySqlStore::builder()
        .accept_unsafe_durability(accept)
        .connect(&url)
        .await;
    (connected.err().map(|e| e.to_string()), tables(server, &db))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flushed_once_a_second_is_refused_unless_accepted() {
    let server = Server::start_with(&[("innodb_flush_log_at_trx_commit", "2")]);
    let (error, tables) = connect_to(&server, false, false).await;
    assert_eq!(
        error.as_deref(),
        Some(
            "innodb_flush_log_at_trx_commit is 2: an answered request could be lost in a crash; \
             set innodb_flush_log_at_trx_commit = 1 (SET GLOBAL, and in the server's configuration) \
             (or accept the risk: accept_unsafe_durability=true in the URL)"
        )
    );
    assert_eq!(tables, "", "nothing was written");
    let (error, tables) = connect_to(&server, true, false).await;
    assert_eq!(error, None, "the builder's opt-in");
    assert!(tables.contains("idem_records"));
    let (error, _) = connect_to(&server, false, true).await;
    assert_eq!(error, None, "the URL's opt-in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_log_without_sync_is_refused_unless_accepted() {
    let server = Server::start_with(&[
        ("log-bin", "mariadb-bin"),
        ("server-id", "1"),
        ("sync_binlog", "0"),
    ]);
    let (error, tables) = connect_to(&server, false, false).await;
    let error = error.expect("refused");
    assert!(
        error.starts_with("sync_binlog is 0: an answered request could be lost in a crash; with the binary log on, set sync_binlog = 1"),
        "{error}"
    );
    assert_eq!(tables, "", "nothing was written");
    let (error, _) = connect_to(&server, false, true).await;
    assert_eq!(error, None, "the URL's opt-in");
    // With sync_binlog = 1 the same server is safe.
    server.sql("SET GLOBAL sync_binlog = 1");
    let (error, _) = connect_to(&server, false, false).await;
    assert_eq!(error, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_replicas_connecting_at_once_to_an_empty_database_make_one_schema() {
    let server = shared_server();
    let db = fresh_database(&server);
    let url = server.url_of(&db);
    let connecting: Vec<_> = (0..10)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { MySqlStore::connect(&url).await.map(drop) })
        })
        .collect();
    for connected in connecting {
        connected.await.unwrap().unwrap();
    }
    assert_eq!(
        server.sql(&format!(
            "SELECT value FROM {db}.idem_meta WHERE name = 'schema_version'"
        )),
        "2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_table_changed_by_hand_is_refused_naming_the_column() {
    let server = shared_server();
    for (change, detail) in [
        (
            "DROP COLUMN revision",
            "idem's schema was changed: idem_records has no column revision (bigint)",
        ),
        (
            // A collation would fold keys that differ in case or trailing spaces.
            "MODIFY idem_key VARCHAR(255) COLLATE utf8mb4_general_ci NOT NULL",
            "idem's schema was changed: idem_records.idem_key is varchar, expected varbinary",
        ),
    ] {
        let db = fresh_database(&server);
        MySqlStore::connect(&server.url_of(&db)).await.unwrap();
        server.sql(&format!("ALTER TABLE {db}.idem_records {change}"));
        let error = MySqlStore::connect(&server.url_of(&db)).await.unwrap_err();
        assert_eq!(error.to_string(), detail);
    }
}
