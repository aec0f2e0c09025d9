//! `Store::write`: the application's own tables in one write transaction, committed
//! durably or rolled back whole; refused on a read-only store and inside an execute's
//! work.

use std::convert::Infallible;

use idem_store::redb::TableDefinition;
use idem_store::{Error, Outcome, RecordId, Store, Timestamp, Verdict, WriteError};

const SALES: TableDefinition<&str, u64> = TableDefinition::new("shop_sales");

fn total(store: &Store) -> Option<u64> {
    store
        .read(|txn| -> Option<u64> {
            let table = txn.open_table(SALES).ok()?;
            table.get("total").ok()?.map(|v| v.value())
        })
        .unwrap()
}

#[test]
fn a_write_commits_what_its_work_wrote_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("till.redb");
    let store = Store::open(&path).unwrap();
    store
        .write(|txn| -> Result<(), idem_store::redb::Error> {
            txn.open_table(SALES)?.insert("total", 5)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(total(&store), Some(5));

    // A work that fails after writing leaves nothing of it.
    let failed = store.write(|txn| -> Result<(), String> {
        txn.open_table(SALES)
            .map_err(|e| e.to_string())?
            .insert("total", 99)
            .map_err(|e| e.to_string())?;
        Err("the card was declined".into())
    });
    assert!(
        matches!(&failed, Err(WriteError::Work(reason)) if reason == "the card was declined"),
        "{failed:?}"
    );
    assert_eq!(total(&store), Some(5));

    // Durable: a reopen reads it.
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(total(&store), Some(5));

    // Inside an execute's work, the transaction is the execute's: a write is refused.
    let id = RecordId::new("shop", "sale", "s-1").unwrap();
    let nested = store
        .execute(
            &id,
            idem_store::Fingerprint::of_bytes(b"s"),
            Timestamp(1),
            |_| {
                let inner = store.write(|_| Ok::<(), Infallible>(()));
                Ok::<_, Infallible>((
                    Verdict::Succeeded,
                    Outcome::new(200, "ok"),
                    matches!(inner, Err(WriteError::Store(Error::Reentrant))),
                ))
            },
        )
        .unwrap();
    assert!(
        matches!(nested, idem_store::Executed::Ran { value: true, .. }),
        "{nested:?}"
    );

    // Read-only: refused by name.
    drop(store);
    let read_only = Store::builder().read_only(true).open(&path).unwrap();
    let refused = read_only.write(|_| Ok::<(), Infallible>(()));
    assert!(
        matches!(
            refused,
            Err(WriteError::Store(Error::ReadOnly { operation: "write" }))
        ),
        "{refused:?}"
    );
}
