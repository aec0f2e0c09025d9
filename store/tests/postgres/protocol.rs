//! What only a database server does to the protocol's inputs: a statement cancelled by
//! its timeout. (The protocol's answers on PostgreSQL are the conformance suite's.)

use idem_core::Timestamp;
use idem_core::protocol::Decision;
use idem_store::Receiver;
use idem_store::postgres::PgStore;

use super::{Server, client, fp, id};

/// A statement held past the statement timeout (here: a claim waiting on another
/// session's uncommitted insert of the same key) is cancelled by the server: the begin
/// fails naming the timeout, writes nothing, and the next one claims once the way is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_past_its_timeout_fails_and_writes_nothing() {
    let server = Server::start();
    let store = PgStore::builder()
        .statement_timeout(std::time::Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let mut other = client(&server).await;
    let holding = other.transaction().await.unwrap();
    holding
        .execute(
            "INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, \
               created_at, updated_at, lease_until) \
             VALUES ('shop', 'charge', 'held', $1, nextval('idem_generation'), 0, 0, 0, 0)",
            &[&fp("a").0.as_slice()],
        )
        .await
        .unwrap();
    let failed = store
        .begin(&id("held"), fp("a"), Timestamp(0))
        .await
        .unwrap_err();
    let mut chain = failed.to_string();
    let mut cause = std::error::Error::source(&failed);
    while let Some(e) = cause {
        chain.push_str(": ");
        chain.push_str(&e.to_string());
        cause = e.source();
    }
    assert!(chain.contains("statement timeout"), "{chain}");
    holding.rollback().await.unwrap();
    assert_eq!(
        store.get(&id("held")).await.unwrap(),
        None,
        "nothing written"
    );
    assert!(matches!(
        store
            .begin(&id("held"), fp("a"), Timestamp(0))
            .await
            .unwrap(),
        Decision::Claimed { .. }
    ));
}
