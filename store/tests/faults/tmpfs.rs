//! The library on a real small filesystem (a tmpfs the test mounts; root, as the test
//! command runs): 16 threads `execute` sales with 20 KB receipts on fresh keys until the
//! store has refused 50, then the filesystem is grown without dropping the store. Every
//! sale that ran is in the file and replays byte for byte, nothing ran twice, new keys
//! run again within a second or so of the space coming back, and the check is clean.
//! Once with the reserve kept for settles (claims refused before the disk is full), once
//! without (the disk full to the last byte: ENOSPC, and the store reopens itself).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use idem_store::redb::{ReadableTableMetadata, TableDefinition, WriteTransaction};
use idem_store::{Decision, Error, Executed, Fingerprint, Outcome, RecordId, Store, Verdict, now};

use crate::common::tmpfs::Tmpfs;

const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");

/// Sells under `key`: a 20 KB receipt in the shop's table and as the outcome.
fn sell(store: &Store, key: &str) -> Result<Executed<()>, Error> {
    let id = RecordId::new("shop", "sale", key).unwrap();
    let receipt = format!("{key}:{}", "r".repeat(20_000));
    store
        .execute(
            &id,
            Fingerprint::of_bytes(b"tea"),
            now(),
            |txn: &WriteTransaction| {
                txn.open_table(SALES)?.insert(key, receipt.as_bytes())?;
                Ok::<_, idem_store::redb::Error>((
                    Verdict::Succeeded,
                    Outcome::new(201, receipt.clone()),
                    (),
                ))
            },
        )
        .map_err(|e| match e {
            idem_store::ExecuteError::Store(e) => e,
            other => panic!("{key}: the work failed: {other}"),
        })
}

#[test]
fn below_the_reserve_executes_are_refused_and_come_back_with_the_space() {
    fill_and_grow(256 << 10);
}

#[test]
fn a_disk_full_to_the_last_byte_recovers_without_dropping_the_store() {
    fill_and_grow(0);
}

fn fill_and_grow(reserve: u64) {
    let disk = Tmpfs::mount("2m");
    let store = Arc::new(
        Store::builder()
            .space_reserve(reserve)
            .open(disk.path().join("shop.redb"))
            .unwrap(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ran: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
    let sellers: Vec<_> = (0..16)
        .map(|_| {
            let (store, next, refused, stop, ran) = (
                Arc::clone(&store),
                Arc::clone(&next),
                Arc::clone(&refused),
                Arc::clone(&stop),
                Arc::clone(&ran),
            );
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("k{}", next.fetch_add(1, Ordering::SeqCst));
                    match sell(&store, &key) {
                        Ok(executed @ Executed::Ran { .. }) => {
                            let body = executed.outcome().unwrap().1.body.clone();
                            ran.lock().unwrap().insert(key, body);
                        }
                        Ok(Executed::NotRun(decision)) => panic!("{key}: a fresh key {decision:?}"),
                        Err(_) => {
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    let filling = Instant::now();
    while refused.load(Ordering::SeqCst) < 50 {
        assert!(
            filling.elapsed() < Duration::from_secs(120),
            "the disk never filled: {} sales ran",
            ran.lock().unwrap().len()
        );
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    for seller in sellers {
        seller.join().unwrap();
    }
    let ran = std::mem::take(&mut *ran.lock().unwrap());
    println!(
        "reserve {reserve} bytes: {} sales ran, {} refused as the disk filled",
        ran.len(),
        refused.load(Ordering::SeqCst)
    );
    assert!(!ran.is_empty(), "some sales ran first");

    // Space comes back; the same store, nothing reopened by the caller.
    disk.resize("64m");
    let grown = Instant::now();
    let mut fresh = 0;
    while !matches!(
        sell(&store, &format!("after-{fresh}")),
        Ok(Executed::Ran { .. })
    ) {
        fresh += 1;
        assert!(
            grown.elapsed() < Duration::from_secs(5),
            "no sale within 5 s of the space coming back"
        );
        thread::sleep(Duration::from_millis(20));
    }
    println!(
        "a fresh sale ran {:?} after the space came back",
        grown.elapsed()
    );

    // Every sale that ran replays its receipt and is in the shop's table once.
    for (key, body) in &ran {
        match sell(&store, key).unwrap() {
            Executed::NotRun(Decision::Replay { outcome, .. }) => {
                assert!(outcome.body == *body, "{key}: the replay differs");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    let sales = store
        .read(|txn| -> Result<u64, idem_store::redb::Error> { Ok(txn.open_table(SALES)?.len()?) })
        .unwrap()
        .unwrap();
    assert_eq!(
        sales,
        ran.len() as u64 + 1,
        "each sale once, and the fresh one"
    );
    let report = store.check().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}
