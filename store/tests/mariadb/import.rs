//! Claims wait while an import runs: none draws a generation between the import's writes
//! and its raise of the sequence, so no generation is handed out twice.

use std::io::{BufReader, Cursor, Read};
use std::sync::mpsc;
use std::time::Duration;

use idem_core::protocol::Decision;
use idem_store::mysql::MySqlStore;
use idem_store::{Fingerprint, Outcome, Receiver, RecordId, Timestamp, Verdict};

use crate::{fresh_database, shared_server};

/// An import's input that stops after its first part until the test lets it go on.
struct Held {
    first: Cursor<Vec<u8>>,
    rest: Cursor<Vec<u8>>,
    go_on: mpsc::Receiver<()>,
    let_go: bool,
}

impl Read for Held {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.first.read(buf)?;
        if read > 0 {
            return Ok(read);
        }
        if !self.let_go {
            // The import has read its first part and waits here, its tables locked.
            let _ = self.go_on.recv();
            self.let_go = true;
        }
        self.rest.read(buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_made_while_an_import_runs_waits_and_gets_a_generation_above_the_imported() {
    let server = shared_server();
    let connect = |db: String| {
        let url = server.url_of(&db);
        async move { MySqlStore::connect(&url).await.unwrap() }
    };
    // A box whose generations run far ahead of the fleet's database.
    let source_db = fresh_database(&server);
    let source = connect(source_db.clone()).await;
    server.sql(&format!("SELECT SETVAL({source_db}.idem_generation, 1000)"));
    let fingerprint = Fingerprint::of_bytes(b"order");
    let mut highest = 0;
    for key in ["a", "b", "c"] {
        let id = RecordId::new("shop", "charge", key).unwrap();
        let Decision::Claimed { generation, .. } =
            source.begin(&id, fingerprint, Timestamp(0)).await.unwrap()
        else {
            panic!("a fresh key is claimed");
        };
        source
            .complete(
                &id,
                generation,
                Verdict::Succeeded,
                Outcome::new(201, "made"),
                Timestamp(0),
            )
            .await
            .unwrap();
        highest = highest.max(generation.0);
    }
    assert!(highest > 1000);
    let mut export = Vec::new();
    source.export(&mut export).await.unwrap();
    let split = export.iter().position(|&b| b == b'\n').unwrap() + 1;
    let split = split + export[split..].iter().position(|&b| b == b'\n').unwrap() + 1;

    let fleet_db = fresh_database(&server);
    let importer = connect(fleet_db.clone()).await;
    let claimer = connect(fleet_db).await;
    let (go_on, wait) = mpsc::channel();
    let held = Held {
        first: Cursor::new(export[..split].to_vec()),
        rest: Cursor::new(export[split..].to_vec()),
        go_on: wait,
        let_go: false,
    };
    // On a thread of its own: its input blocks that thread while held.
    let runtime = tokio::runtime::Handle::current();
    let import = tokio::task::spawn_blocking(move || {
        let mut input = BufReader::new(held);
        runtime.block_on(importer.import(&mut input))
    });
    // The import holds its first lines; a claim of another key now waits for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = RecordId::new("shop", "charge", "fresh").unwrap();
    let claim = tokio::spawn(async move { claimer.begin(&fresh, fingerprint, Timestamp(0)).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!claim.is_finished(), "a claim waits while the import runs");
    assert!(
        !import.is_finished(),
        "the import waits for the rest of its input"
    );

    go_on.send(()).unwrap();
    let imported = tokio::time::timeout(Duration::from_secs(30), import)
        .await
        .expect("the import ends")
        .unwrap()
        .unwrap();
    assert_eq!(imported.records, 3);
    let claimed = tokio::time::timeout(Duration::from_secs(30), claim)
        .await
        .expect("the claim is answered once the import ended")
        .unwrap()
        .unwrap();
    let Decision::Claimed { generation, .. } = claimed else {
        panic!("a fresh key is claimed: {claimed:?}");
    };
    assert!(
        generation.0 > highest,
        "the claim's generation {} is above every imported one ({highest})",
        generation.0
    );
}
