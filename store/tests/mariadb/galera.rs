//! Two nodes of a Galera cluster, one store on each, both beginning every key at once:
//! each key must be claimed once. It is not yet (docs/mariadb.md, "A Galera cluster"):
//! about one key in 400 is answered Claimed on both nodes, one of them with the row of a
//! claim that certification rolled back, so the test is run by hand (`--ignored`).

use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Receiver, RecordId, Timestamp};
use tokio::sync::Barrier;

use crate::server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "Galera is not supported yet: about one key in 400 is claimed on both nodes"]
async fn two_nodes_beginning_every_key_at_once_claim_each_key_once() {
    const KEYS: usize = 400;
    let nodes = Server::galera_cluster(2);
    nodes[0].sql("CREATE DATABASE shop");
    let mut stores = Vec::new();
    for node in &nodes {
        stores.push(Arc::new(
            MySqlStore::builder()
                .pool_size(4)
                .connect(&node.url_of("shop"))
                .await
                .unwrap(),
        ));
    }
    let barrier = Arc::new(Barrier::new(2));
    let runs: Vec<_> = stores
        .iter()
        .map(|store| {
            let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
            tokio::spawn(async move {
                let mut claimed = Vec::new();
                for k in 0..KEYS {
                    let id = RecordId::new("shop", "charge", &format!("k{k}")).unwrap();
                    barrier.wait().await;
                    // Refused (certification lost too often in a row) is no claim.
                    if let Ok(Decision::Claimed { generation, .. }) = store
                        .begin(&id, Fingerprint::of_bytes(b"x"), Timestamp(0))
                        .await
                    {
                        claimed.push((k, generation));
                    }
                }
                claimed
            })
        })
        .collect();
    let mut claims = vec![0; KEYS];
    let mut seen = Vec::new();
    for run in runs {
        for (k, g) in run.await.unwrap() {
            claims[k] += 1;
            seen.push((k, g));
        }
    }
    for (k, g) in &seen {
        if claims[*k] > 1 {
            println!("k{k}: generation {g}; now {}", nodes[0].sql(&format!("SELECT generation, claimant, revision, state FROM shop.idem_records WHERE idem_key = 'k{k}'")).trim());
        }
    }
    let twice: Vec<usize> = (0..KEYS).filter(|&k| claims[k] > 1).collect();
    let conflicts = nodes[0].sql("SHOW STATUS LIKE 'wsrep_local_cert_failures'");
    println!(
        "{} of {KEYS} keys claimed, {} twice; {}",
        claims.iter().filter(|&&c| c > 0).count(),
        twice.len(),
        conflicts.trim()
    );
    assert!(twice.is_empty(), "claimed by both nodes: {twice:?}");
}
