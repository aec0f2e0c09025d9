//! Connecting: the schema created on first use, printable, refused when newer or changed
//! by hand; and the causes of a failed connection, named.

use idem_core::Config;
use idem_store::postgres::{ConnectError, PgStore};

use super::{Server, client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_made_once_checked_and_refused_when_newer_or_changed() {
    let server = Server::start();
    let db = client(&server).await;
    db.batch_execute("CREATE DATABASE bare").await.unwrap();
    db.batch_execute("CREATE DATABASE concurrent")
        .await
        .unwrap();
    let url = |name: &str| super::url_of(&server, name);

    // A role that may not create tables must find the schema applied by hand.
    let refused = PgStore::builder()
        .create_schema(false)
        .connect(&url("bare"))
        .await;
    assert!(
        matches!(refused, Err(ConnectError::NoSchema)),
        "{refused:?}"
    );

    // Ten replicas starting at once on an empty database: one schema, every one connects.
    let replicas: Vec<_> = (0..10)
        .map(|_| {
            let url = url("concurrent");
            tokio::spawn(async move { PgStore::connect(&url).await.map(drop) })
        })
        .collect();
    for replica in replicas {
        replica.await.unwrap().unwrap();
    }

    // The printed schema is what a DBA applies: the store then connects without creating.
    let bare = super::client_of(&url("bare")).await;
    bare.batch_execute(PgStore::schema_sql()).await.unwrap();
    bare.batch_execute(PgStore::schema_sql()).await.unwrap(); // may run again
    PgStore::builder()
        .create_schema(false)
        .connect(&url("bare"))
        .await
        .unwrap();

    // A newer idem's schema is refused, naming both versions.
    bare.execute(
        "UPDATE idem_meta SET value = 5 WHERE name = 'schema_version'",
        &[],
    )
    .await
    .unwrap();
    let newer = PgStore::connect(&url("bare")).await.unwrap_err();
    assert!(
        matches!(
            newer,
            ConnectError::NewerSchema {
                found: 5,
                supported: 4
            }
        ),
        "{newer:?}"
    );
    assert_eq!(
        newer.to_string(),
        "the database's idem schema is version 5, newer than this build reads (at most 4); use a newer idem"
    );
    bare.execute(
        "UPDATE idem_meta SET value = 4 WHERE name = 'schema_version'",
        &[],
    )
    .await
    .unwrap();

    // A column dropped by hand is named.
    bare.batch_execute("ALTER TABLE idem_records DROP COLUMN outcome_body")
        .await
        .unwrap();
    let changed = PgStore::connect(&url("bare")).await.unwrap_err();
    assert_eq!(
        changed.to_string(),
        "idem's schema was changed: idem_records has no column outcome_body (bytea)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_connection_names_its_cause() {
    let server = Server::start();
    let bad_url = PgStore::connect("postgres://[::1").await.unwrap_err();
    assert!(matches!(bad_url, ConnectError::Url(_)), "{bad_url:?}");

    // Nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = PgStore::connect(&format!("postgres://postgres@127.0.0.1:{closed}/postgres"))
        .await
        .unwrap_err();
    assert!(
        matches!(unreachable, ConnectError::Connect(_)),
        "{unreachable:?}"
    );
    assert!(
        chain(&unreachable).contains("refused"),
        "{}",
        chain(&unreachable)
    );

    let missing = PgStore::connect(&super::url_of(&server, "no_such_db"))
        .await
        .unwrap_err();
    let cause = chain(&missing);
    assert!(
        cause.contains(r#"database "no_such_db" does not exist"#),
        "{cause}"
    );

    let user = PgStore::connect(&server.url().replace("postgres@127", "nobody@127"))
        .await
        .unwrap_err();
    let cause = chain(&user);
    assert!(cause.contains(r#"role "nobody" does not exist"#), "{cause}");

    let config = Config {
        lease_ms: 0,
        ..Config::default()
    };
    let zero = PgStore::builder()
        .config(config)
        .connect(&server.url())
        .await;
    assert!(matches!(zero, Err(ConnectError::Config(_))), "{zero:?}");
}

/// Every message of an error's chain, joined as the CLI prints them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_named_and_nothing_is_written() {
    let server = Server::start_with_password("s3cret");
    PgStore::connect(&server.url()).await.unwrap();
    let wrong = server.url().replace(":s3cret@", ":guess@");
    let refused = PgStore::connect(&wrong).await.unwrap_err();
    assert!(matches!(refused, ConnectError::Connect(_)), "{refused:?}");
    let cause = chain(&refused);
    assert!(
        cause.contains(r#"password authentication failed for user "postgres""#),
        "{cause}"
    );
}
