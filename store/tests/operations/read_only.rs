//! A read-only store ([`StoreBuilder::read_only`]): it reads what every handle and
//! process commits, refuses every write with [`Error::ReadOnly`] naming the operation,
//! and changes no byte of the file, which may be read-only.

use std::fs;
use std::io::Cursor;
use std::ops::ControlFlow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

use crate::common::{T0, expect_report, fp, id, report, reports, spawn_child};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Generation, LedgerConfig, Outcome, Timestamp, Verdict};
use idem_store::outbox::OutboxError;
use idem_store::redb::{self, TableDefinition};
use idem_store::{Error, ExecuteError, ImportError, ListFilter, MaintainError, OpenError, Store};

const SALES: TableDefinition<&str, u64> = TableDefinition::new("shop.sales");
const NOW: Timestamp = Timestamp(T0);

fn read_only(path: &Path) -> Result<Store, OpenError> {
    Store::builder().read_only(true).open(path)
}

/// A closed store file with a settled record `shop/credit/sale-1` (and a sale row), a
/// pending `shop/charge/card-1` and an outbox intent.
fn store_file(path: &Path) {
    let store = Store::open(path).unwrap();
    let _ = store
        .execute(&id("shop", "credit", "sale-1"), fp("1"), NOW, |txn| {
            txn.open_table(SALES)?.insert("sale-1", 5)?;
            Ok::<_, redb::Error>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
        })
        .unwrap();
    store
        .begin(&id("shop", "charge", "card-1"), fp("c"), NOW)
        .unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(7)).unwrap();
    outbox
        .enqueue("sale.forward", b"{}".to_vec(), fp("{}"), NOW, [1; 16])
        .unwrap();
}

/// The store's own error inside a maintenance error.
#[track_caller]
fn maintain_store_error(e: MaintainError) -> Error {
    match e {
        MaintainError::Store(e) => e,
        other => panic!("expected a store error, got {other:?}"),
    }
}

/// Asserts `result` is the read-only refusal of `operation`.
#[track_caller]
fn refused<T: std::fmt::Debug>(operation: &str, result: Result<T, Error>) {
    match result {
        Err(Error::ReadOnly { operation: named }) => {
            assert_eq!(named, operation);
            let message = Error::ReadOnly { operation: named }.to_string();
            assert!(
                message.starts_with(&format!("{operation}: refused")),
                "{message}"
            );
            assert!(message.contains("opened read-only"), "{message}");
        }
        other => panic!("{operation}: expected the read-only refusal, got {other:?}"),
    }
}

#[test]
fn every_write_is_refused_with_its_name_and_the_file_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path);
    let before = fs::read(&path).unwrap();

    let mut store = read_only(&path).unwrap();
    assert!(store.is_read_only());
    let settled = id("shop", "credit", "sale-1");
    let pending = id("shop", "charge", "card-1");
    let fresh = id("shop", "charge", "card-2");
    let generation = store.get(&pending).unwrap().unwrap().generation;

    // Refused whatever the key's state: a begin that would replay, and one that would claim.
    refused("begin", store.begin(&settled, fp("1"), NOW));
    refused("begin", store.begin(&fresh, fp("2"), NOW));
    refused("heartbeat", store.heartbeat(&pending, generation, NOW));
    refused(
        "complete",
        store.complete(
            &pending,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, ""),
            NOW,
        ),
    );
    refused("release", store.release(&pending, generation, NOW));
    refused(
        "mark_unknown",
        store.mark_unknown(&pending, generation, NOW),
    );
    refused(
        "resolve",
        store.resolve(&pending, Resolution::NotExecuted, NOW),
    );
    for (operation, executed) in [
        (
            "execute",
            store.execute(
                &fresh,
                fp("2"),
                NOW,
                |_| -> Result<(Verdict, Outcome, ()), ()> {
                    unreachable!("a read-only store runs no work")
                },
            ),
        ),
        (
            "execute_grouped",
            store.execute_grouped(
                &fresh,
                fp("2"),
                NOW,
                |_| -> Result<(Verdict, Outcome, ()), ()> {
                    unreachable!("a read-only store runs no work")
                },
            ),
        ),
    ] {
        match executed {
            Err(ExecuteError::Store(e)) => refused(operation, Err::<(), _>(e)),
            other => panic!("{operation}: {other:?}"),
        }
    }
    refused("sweep", store.sweep(Timestamp(u64::MAX), 10, false));
    refused(
        "import",
        store.import(Cursor::new("")).map_err(|e| match e {
            ImportError::Store(e) => e,
            other => panic!("import: expected a store error, got {other:?}"),
        }),
    );
    refused("check", store.check());
    refused("compact", store.compact().map_err(maintain_store_error));

    let outbox = store.outbox(LedgerConfig::with_seed(7)).unwrap();
    let key = outbox.intents(&Default::default()).unwrap()[0].key.clone();
    let outboxed = |operation: &str, result: Result<(), OutboxError>| match result {
        Err(OutboxError::Store(e)) => refused(operation, Err::<(), _>(e)),
        other => panic!("{operation}: {other:?}"),
    };
    outboxed(
        "enqueue",
        outbox
            .enqueue("sale.forward", vec![], fp(""), NOW, [2; 16])
            .map(drop),
    );
    refused("due", outbox.due(NOW, 10));
    refused("restart", outbox.restart());
    outboxed(
        "record_transport_error",
        outbox.record_transport_error(&key, NOW).map(drop),
    );
    outboxed("forget", outbox.forget(&key).map(drop));
    outboxed(
        "resolve",
        outbox
            .resolve(&key, idem_core::ResolvedAs::Failed, "declined", NOW)
            .map(drop),
    );

    // Nothing was written, and reads still work.
    assert!(store.get(&fresh).unwrap().is_none());
    assert_eq!(store.stats(NOW).unwrap().records(), 2);
    assert!(!store.needs_reopen());
    drop(store);
    assert!(fs::read(&path).unwrap() == before, "the file changed");
}

#[test]
fn reads_answer_like_a_writable_store_and_change_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path);
    let writable = Store::open(&path).unwrap();
    let mut answers = Vec::new();
    for store in [&writable, &read_only(&path).unwrap()] {
        let mut listed = Vec::new();
        store
            .list(&ListFilter::default(), |id, record| {
                listed.push((id.to_string(), record));
                ControlFlow::Continue(())
            })
            .unwrap();
        let mut export = Vec::new();
        store.export(&mut export).unwrap();
        let outbox = store.outbox(LedgerConfig::with_seed(7)).unwrap();
        let sales = store
            .read(|txn| {
                txn.open_table(SALES)
                    .unwrap()
                    .get("sale-1")
                    .unwrap()
                    .unwrap()
                    .value()
            })
            .unwrap();
        answers.push((
            store.get(&id("shop", "credit", "sale-1")).unwrap(),
            listed,
            store.stats(NOW).unwrap(),
            store.generation().unwrap(),
            String::from_utf8(export).unwrap(),
            store.sweep(Timestamp(u64::MAX), 10, true).unwrap(),
            outbox.intents(&Default::default()).unwrap(),
            outbox.next_wakeup().unwrap(),
            sales,
        ));
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[1].2.records(), 2);
    assert_eq!(answers[1].5.removed, 1);
    drop(writable);

    let before = fs::read(&path).unwrap();
    let store = read_only(&path).unwrap();
    store.stats(NOW).unwrap();
    store.export(std::io::sink()).unwrap();
    drop(store);
    assert!(fs::read(&path).unwrap() == before, "the file changed");
}

#[test]
fn a_read_only_store_sees_what_another_handle_commits_after_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let writer = Store::open(&path).unwrap();
    let reader = read_only(&path).unwrap();
    assert_eq!(reader.stats(NOW).unwrap().records(), 0);

    let key = id("shop", "charge", "card-9");
    let Decision::Claimed { generation, .. } = writer.begin(&key, fp("9"), NOW).unwrap() else {
        panic!("not claimed")
    };
    assert_eq!(reader.get(&key).unwrap().unwrap().generation, generation);
    writer
        .complete(
            &key,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, "r"),
            NOW,
        )
        .unwrap();
    let stats = reader.stats(NOW).unwrap();
    assert_eq!((stats.pending, stats.succeeded), (0, 1));
    assert_eq!(reader.generation().unwrap(), generation);
    assert_eq!(generation, Generation(1));
}

#[test]
fn a_read_only_store_refuses_a_schema_a_newer_idem_upgraded_the_file_to() {
    const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let writer = Store::open(&path).unwrap();
    let reader = read_only(&path).unwrap();
    assert_eq!(reader.stats(NOW).unwrap().records(), 0);
    // What a newer idem's upgrade would record, in a transaction of this file.
    let _ = writer
        .execute(&id("shop", "op", "upgrade"), fp("u"), NOW, |txn| {
            txn.open_table(META)?
                .insert(&b"schema"[..], &5u64.to_be_bytes()[..])?;
            Ok::<_, redb::Error>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
        })
        .unwrap();
    let err = reader.generation().unwrap_err();
    assert!(
        matches!(
            err,
            Error::NewerSchema {
                found: 5,
                supported: 4
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("use a newer idem"), "{err}");
}

#[test]
fn a_read_only_file_opens_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path);
    let mut permissions = fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&path, permissions).unwrap();
    let before = fs::read(&path).unwrap();
    assert!(matches!(
        Store::open(&path).unwrap_err(),
        OpenError::ReadOnly { .. }
    ));
    let store = read_only(&path).unwrap();
    assert_eq!(store.stats(NOW).unwrap().records(), 2);
    drop(store);
    assert!(fs::read(&path).unwrap() == before, "the file changed");
}

#[test]
fn a_read_only_open_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.redb");
    let err = read_only(&missing).unwrap_err();
    assert!(matches!(err, OpenError::NoStore { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: holds no idem store (the file is missing, empty or without idem's tables), and a read-only open creates none",
            missing.display()
        )
    );
    assert!(!missing.exists());

    let empty = dir.path().join("empty.redb");
    fs::write(&empty, b"").unwrap();
    assert!(matches!(
        read_only(&empty).unwrap_err(),
        OpenError::NoStore { .. }
    ));
    assert_eq!(fs::read(&empty).unwrap(), b"");

    // A redb file that holds only the application's tables.
    let theirs = dir.path().join("app.redb");
    {
        let db = redb::Database::create(&theirs).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(SALES).unwrap().insert("sale-1", 5).unwrap();
        txn.commit().unwrap();
    }
    let before = fs::read(&theirs).unwrap();
    assert!(matches!(
        read_only(&theirs).unwrap_err(),
        OpenError::NoStore { .. }
    ));
    assert!(fs::read(&theirs).unwrap() == before);

    assert!(matches!(
        read_only(dir.path()).unwrap_err(),
        OpenError::IsDirectory { .. }
    ));
}

#[test]
fn a_damaged_file_is_reported_corrupt_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    // One pending record, and 64 bytes in the middle of the file flipped: redb's header
    // is intact, so the file opens, and its pages are damaged.
    drop(
        Store::open(&path)
            .unwrap()
            .begin(&id("t", "o", "k"), fp("k"), NOW),
    );
    let mut bytes = fs::read(&path).unwrap();
    // Every page past redb's header page, so the damage hits the pages that hold data
    // wherever the allocator put them.
    for page in bytes.chunks_mut(4096).skip(1) {
        for b in page.iter_mut().take(64) {
            *b ^= 0xa5;
        }
    }
    fs::write(&path, &bytes).unwrap();
    let store = match read_only(&path) {
        Ok(store) => store,
        // Met the damage already while reading the schema: refused, not a panic.
        // The damage was met already while reading the schema: refused, not a panic.
        Err(OpenError::Corrupt { .. }) => {
            assert!(fs::read(&path).unwrap() == bytes, "the file changed");
            return;
        }
        Err(e) => panic!("open: {e:?}"),
    };
    let reads: Vec<(&str, Result<(), Error>)> = vec![
        ("get", store.get(&id("t", "o", "k")).map(drop)),
        (
            "list",
            store.list(&ListFilter::default(), |_, _| ControlFlow::Continue(())),
        ),
        (
            "stats",
            store.stats(NOW).map(drop).map_err(maintain_store_error),
        ),
        (
            "export",
            store
                .export(std::io::sink())
                .map(drop)
                .map_err(maintain_store_error),
        ),
        ("sweep", store.sweep(NOW, 10, true).map(drop)),
    ];
    let mut corrupt = 0;
    for (read, result) in reads {
        match result {
            Ok(()) => {}
            Err(Error::Corrupt { detail }) => {
                assert!(detail.contains("redb could not read"), "{read}: {detail}");
                corrupt += 1;
            }
            Err(e) => panic!("{read}: {e:?}"),
        }
    }
    assert!(corrupt > 0, "no read met the damage: move it");
    assert!(fs::read(&path).unwrap() == bytes, "the file changed");
}

#[test]
fn a_visitor_panic_is_the_callers_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path);
    let store = read_only(&path).unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        store.list(&ListFilter::default(), |_, _| {
            panic!("the visitor's own bug")
        })
    }))
    .unwrap_err();
    assert_eq!(
        panicked.downcast_ref::<&str>().copied(),
        Some("the visitor's own bug")
    );
    // The store is still fine.
    assert_eq!(store.stats(NOW).unwrap().records(), 2);
}

#[test]
#[ignore = "a child process of a_crashed_writer_leaves_a_file_only_a_writable_open_recovers"]
fn crashing_writer_child() {
    let Ok(path) = std::env::var("IDEM_RO_DB") else {
        return;
    };
    let store = Store::open(&path).unwrap();
    store
        .begin(&id("shop", "charge", "card-7"), fp("7"), NOW)
        .unwrap();
    report("open");
    // Killed here, with the store open.
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_crashed_writer_leaves_a_file_only_a_writable_open_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path);
    let mut child = spawn_child(
        module_path!(),
        "crashing_writer_child",
        &[("IDEM_RO_DB", path.display().to_string())],
    );
    let lines = reports(child.stdout.take().unwrap());
    expect_report(&lines, "open", Duration::from_secs(120));
    // While the writer lives, a read-only open reads its commits.
    let reader = read_only(&path).unwrap();
    assert!(
        reader
            .get(&id("shop", "charge", "card-7"))
            .unwrap()
            .is_some()
    );
    drop(reader);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let before = fs::read(&path).unwrap();
    let err = read_only(&path).unwrap_err();
    assert!(matches!(err, OpenError::NeedsRecovery { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("did not close it cleanly, and only a writable open recovers it"),
        "{err}"
    );
    assert!(fs::read(&path).unwrap() == before, "the file changed");

    drop(Store::open(&path).unwrap());
    let store = read_only(&path).unwrap();
    assert_eq!(store.stats(NOW).unwrap().records(), 3);
}
