//! A store on a redb storage backend instead of a file
//! (`StoreBuilder::open_on_backend`): what differs from a file, and the settings it
//! refuses.

use std::convert::Infallible;

use crate::common::disk::SimDisk;
use crate::common::{T0, fp, id};
use idem_core::protocol::Decision;
use idem_core::{Outcome, Timestamp, Verdict};
use idem_store::redb::backends::InMemoryBackend;
use idem_store::redb::{self, ConcurrencyMode, Durability, TableDefinition};
use idem_store::{Error, OpenError, Store};

const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");

fn settle(store: &Store, key: &str) {
    let _ = store
        .execute(&id("shop", "credit", key), fp(key), Timestamp(T0), |_| {
            Ok::<_, Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
        })
        .unwrap();
}

#[test]
fn a_store_on_a_backend_has_no_path_and_counts_the_backends_length() {
    let disk = SimDisk::default();
    let store = Store::builder().open_on_backend(disk.clone()).unwrap();
    settle(&store, "k-1");
    assert_eq!(store.path(), None);
    let stats = store.stats(Timestamp(T0)).unwrap();
    assert_eq!(stats.succeeded, 1);
    assert_eq!(stats.file_bytes, disk.live_image().len() as u64);
    assert!(store.check().unwrap().is_ok());
    drop(store);
    // Reopened from the same bytes, it holds the record.
    let store = Store::builder().open_on_backend(disk).unwrap();
    assert!(matches!(
        store.begin(&id("shop", "credit", "k-1"), fp("k-1"), Timestamp(T0 + 1)),
        Ok(Decision::Replay { .. })
    ));

    // A file's store still has its path.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.path(), Some(path.as_path()));
}

#[test]
fn a_multi_process_mode_needs_a_backend_that_locks() {
    for mode in [ConcurrencyMode::SingleWriter, ConcurrencyMode::MultiWriter] {
        let err = Store::builder()
            .concurrency(mode)
            .open_on_backend(InMemoryBackend::new())
            .unwrap_err();
        assert!(matches!(err, OpenError::Options(_)), "{mode:?}: {err:?}");
        assert_eq!(
            err.to_string(),
            "options: a concurrency mode other than ExclusiveWriter needs a backend that implements redb's byte-range locks, and this backend does not"
        );
    }
    // The default on a backend is the exclusive mode, which needs no locks, and in
    // which non-durable commits are allowed.
    let store = Store::builder()
        .durability(Durability::None)
        .open_on_backend(InMemoryBackend::new())
        .unwrap();
    settle(&store, "k-1");
    // A backend that implements the locks opens in the mode a file uses.
    let store = Store::builder()
        .concurrency(ConcurrencyMode::MultiWriter)
        .open_on_backend(SimDisk::default())
        .unwrap();
    settle(&store, "k-1");
    let err = Store::builder()
        .concurrency(ConcurrencyMode::MultiWriter)
        .durability(Durability::None)
        .open_on_backend(SimDisk::default())
        .unwrap_err();
    assert!(matches!(err, OpenError::Options(_)), "{err:?}");
}

#[test]
fn a_newer_schema_on_a_backend_is_refused_untouched() {
    let disk = SimDisk::default();
    settle(
        &Store::builder().open_on_backend(disk.clone()).unwrap(),
        "k-1",
    );
    {
        let db = redb::Database::builder()
            .create_with_backend(disk.clone())
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(&b"schema"[..], &5u64.to_be_bytes()[..])
            .unwrap();
        txn.commit().unwrap();
    }
    let before = disk.live_image();
    let err = Store::builder().open_on_backend(disk.clone()).unwrap_err();
    assert!(
        matches!(
            err,
            OpenError::NewerFormat {
                found: 5,
                supported: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "(storage backend): schema version 5 is newer than this build reads (at most 4); use a newer idem"
    );
    assert_eq!(disk.live_image(), before, "the backend's bytes changed");
    assert!(!disk.has_pending(), "the refused open wrote");
}

#[test]
fn a_read_only_store_on_a_backend_reads_and_refuses_writes() {
    let err = Store::builder()
        .read_only(true)
        .open_on_backend(SimDisk::default())
        .unwrap_err();
    assert!(matches!(err, OpenError::NoStore { .. }), "{err:?}");
    let disk = SimDisk::default();
    settle(
        &Store::builder().open_on_backend(disk.clone()).unwrap(),
        "k-1",
    );
    let before = disk.live_image();
    let store = Store::builder()
        .read_only(true)
        .open_on_backend(disk.clone())
        .unwrap();
    assert!(store.get(&id("shop", "credit", "k-1")).unwrap().is_some());
    assert!(matches!(
        store.begin(&id("shop", "credit", "k-2"), fp("k-2"), Timestamp(T0)),
        Err(Error::ReadOnly { .. })
    ));
    drop(store);
    assert_eq!(disk.live_image(), before);
}
