//! `Store::import` on arbitrary bytes, into a store that holds records in every state
//! and intents: it never panics; a refused import changes no byte of any table; an
//! accepted one leaves a store that passes `check`.

use std::cell::RefCell;
use std::convert::Infallible;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, LedgerConfig, Outcome, RecordId, Timestamp, Verdict};
use idem_store::redb::backends::InMemoryBackend;
use idem_store::redb::{ReadTransaction, ReadableTable, TableDefinition, TableHandle, Value};
use idem_store::{ImportError, Store};

const T0: u64 = 1_700_000_000_000;

thread_local! {
    // Kept while imports are refused (they change nothing), made again after one is
    // accepted, so that every input meets the same store.
    static STORE: RefCell<Option<Store>> = const { RefCell::new(None) };
}

/// A store in memory with a record in every state and two intents.
fn fresh() -> Store {
    let store = Store::builder()
        .open_on_backend(InMemoryBackend::new())
        .expect("a store opens in memory");
    let id = |key: &str| RecordId::new("shop", "sale", key).expect("a valid id");
    let fp = |key: &str| Fingerprint::of_bytes(key.as_bytes());
    for (key, verdict) in [("sale-1", Verdict::Succeeded), ("sale-2", Verdict::Failed)] {
        let _ = store
            .execute(&id(key), fp(key), Timestamp(T0), |_| {
                Ok::<_, Infallible>((verdict, Outcome::new(200, key), ()))
            })
            .expect("execute in memory");
    }
    store
        .begin(&id("sale-3"), fp("sale-3"), Timestamp(T0))
        .expect("begin in memory");
    if let Decision::Claimed { generation, .. } = store
        .begin(&id("sale-4"), fp("sale-4"), Timestamp(T0))
        .expect("begin in memory")
    {
        store
            .mark_unknown(&id("sale-4"), generation, Timestamp(T0))
            .expect("mark_unknown in memory");
    }
    let outbox = store
        .outbox(LedgerConfig::with_seed(3))
        .expect("a valid config");
    for n in 0..2u8 {
        outbox
            .enqueue("sale.forward", vec![n], fp("x"), Timestamp(T0), [n; 16])
            .expect("enqueue in memory");
    }
    store
}

/// Every table of the store, byte for byte (idem's tables are all byte strings).
type Tables = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

fn contents(store: &Store) -> Tables {
    store
        .read(|txn| {
            let mut all = Tables::new();
            for handle in txn.list_tables().expect("list tables in memory") {
                let name = handle.name().to_string();
                let entries = dump::<&[u8]>(txn, &name, |v| v.to_vec())
                    .or_else(|| dump::<()>(txn, &name, |()| Vec::new()))
                    .unwrap_or_else(|| panic!("table {name}: not one of idem's"));
                all.push((name, entries));
            }
            all
        })
        .expect("read in memory")
}

fn dump<V: Value + 'static>(
    txn: &ReadTransaction,
    name: &str,
    bytes: impl Fn(V::SelfType<'_>) -> Vec<u8>,
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let table = txn
        .open_table(TableDefinition::<&[u8], V>::new(name))
        .ok()?;
    let entries = table.iter().expect("iterate in memory");
    Some(
        entries
            .map(|entry| {
                let (k, v) = entry.expect("an entry in memory");
                (k.value().to_vec(), bytes(v.value()))
            })
            .collect(),
    )
}

pub fn import(data: &[u8]) {
    STORE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let store = slot.get_or_insert_with(fresh);
        let before = contents(store);
        match store.import(data) {
            Ok(_) => {
                let report = store.check().expect("check in memory");
                assert!(
                    report.is_ok(),
                    "an accepted import left {:?}",
                    report.problems
                );
                *slot = None;
            }
            Err(ImportError::Line { .. }) => {
                assert!(
                    contents(store) == before,
                    "a refused import changed the store"
                );
            }
            Err(e) => panic!("import failed other than on a line: {e}"),
        }
    });
}
