//! Files the store must refuse: each gets its own error naming the cause, and the file
//! is left byte for byte as it was.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{T0, fp, id};
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::redb::{self, ConcurrencyMode, Durability, TableDefinition};
use idem_store::{OpenError, Store};

const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");

/// A store file with `n` settled records, closed.
fn store_file(path: &Path, n: u32) {
    let store = Store::open(path).unwrap();
    for k in 0..n {
        let key = id("shop", "credit", &format!("sale-{k}"));
        let _ = store
            .execute(&key, fp(&k.to_string()), Timestamp(T0), |_| {
                Ok::<_, ()>((Verdict::Succeeded, Outcome::new(200, vec![7u8; 100]), ()))
            })
            .unwrap();
    }
}

/// Opens `path` expecting an error, and checks the file did not change.
fn refused(path: &Path, builder: idem_store::StoreBuilder) -> OpenError {
    let before = fs::read(path).unwrap();
    let err = match builder.open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e,
    };
    assert_eq!(fs::read(path).unwrap(), before, "the file changed: {err}");
    err
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, OpenError::IsDirectory { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: is a directory, expected a store file",
            dir.path().display()
        )
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_read_only_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path, 3);
    let mut permissions = fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    fs::set_permissions(&path, permissions).unwrap();
    let err = refused(&path, Store::builder());
    assert!(matches!(err, OpenError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("the file is read-only"), "{err}");
}

#[test]
fn a_file_that_is_not_a_redb_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    fs::write(&path, b"id,amount\n1,5\n".repeat(500)).unwrap();
    let err = refused(&path, Store::builder());
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: corrupt store file: Not a redb database: magic number mismatch",
            path.display()
        )
    );
}

#[test]
fn a_damaged_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine.redb");
    // Records with a findable body, written in one transaction (an import), so every
    // copy of a marker in the file is in a live page.
    let lines: String = (0..2_000)
        .map(|k| {
            let record = idem_core::Record {
                fingerprint: fp(&k.to_string()),
                generation: idem_core::Generation(k + 1),
                created_at: Timestamp(T0),
                updated_at: Timestamp(T0),
                status: idem_core::Status::Settled {
                    verdict: Verdict::Succeeded,
                    outcome: Outcome::new(200, format!("MARKER{k:05}").repeat(8)),
                    completed_at: Timestamp(T0),
                    expires_at: Timestamp(T0 + 1_000),
                },
            };
            let key = id("shop", "credit", &format!("sale-{k}"));
            format!("{}\n", idem_store::maintain::record_json(&key, &record))
        })
        .collect();
    Store::open(&pristine)
        .unwrap()
        .import(lines.as_bytes())
        .unwrap();
    let bytes = fs::read(&pristine).unwrap();
    // Every copy of a marker, so that the live one is certainly among them.
    let all = |needle: &[u8]| -> Vec<usize> {
        let found: Vec<usize> = bytes
            .windows(needle.len())
            .enumerate()
            .filter(|(_, w)| *w == needle)
            .map(|(at, _)| at)
            .collect();
        assert!(!found.is_empty());
        found
    };
    // Both commit slots in the header, and pages holding records at the start,
    // middle and end of the key space (each marker's 11 bytes).
    let marker = |text: &[u8]| all(text).into_iter().map(|at| at..at + 11).collect();
    let damages: [Vec<std::ops::Range<usize>>; 4] = [
        std::iter::once(32..320).collect(),
        marker(b"MARKER00003"),
        marker(b"MARKER01000"),
        marker(b"MARKER01999"),
    ];
    for (n, offsets) in damages.into_iter().enumerate() {
        let path = dir.path().join(format!("damaged-{n}.redb"));
        let mut damaged = bytes.clone();
        for range in offsets.iter().cloned() {
            for b in &mut damaged[range] {
                *b ^= 0x5a;
            }
        }
        fs::write(&path, &damaged).unwrap();
        let err = refused(&path, Store::builder());
        assert!(
            matches!(err, OpenError::Corrupt { .. }),
            "offsets {offsets:?}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{}: corrupt store file: ", path.display())),
            "{err}"
        );
    }
    let truncated = dir.path().join("truncated.redb");
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = refused(&truncated, Store::builder());
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path, 3);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(&b"schema"[..], &5u64.to_be_bytes()[..])
            .unwrap();
        txn.commit().unwrap();
    }
    let err = refused(&path, Store::builder());
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
        format!(
            "{}: schema version 5 is newer than this build reads (at most 4); use a newer idem",
            path.display()
        )
    );
}

#[test]
fn records_without_their_meta_table_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path, 3);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(META).unwrap());
        txn.commit().unwrap();
    }
    let err = refused(&path, Store::builder());
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("idem.meta is missing"), "{err}");
}

#[test]
fn a_file_locked_past_the_timeout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    store_file(&path, 3);
    // redb's default mode locks the whole file for this handle alone.
    let holder = redb::Database::create(&path).unwrap();
    let start = Instant::now();
    let err = refused(
        &path,
        Store::builder().lock_timeout(Duration::from_millis(300)),
    );
    let elapsed = start.elapsed();
    let OpenError::Locked { waited, .. } = err else {
        panic!("{err:?}")
    };
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(
        err.to_string()
            .contains("another process holds the file locked exclusively"),
        "{err}"
    );
    drop(holder);
    // Once the lock is gone the same file opens, with its records.
    let store = Store::open(&path).unwrap();
    assert!(
        store
            .get(&id("shop", "credit", "sale-0"))
            .unwrap()
            .is_some()
    );
}

#[test]
fn contradictory_options_and_bad_configs_are_refused_before_touching_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    let err = Store::builder()
        .durability(Durability::None)
        .open(&path)
        .unwrap_err();
    assert!(matches!(err, OpenError::Options(_)), "{err:?}");
    assert!(err.to_string().contains("durability None needs"), "{err}");
    let err = Store::builder()
        .config(Config {
            lease_ms: 0,
            ..Config::default()
        })
        .open(&path)
        .unwrap_err();
    assert!(matches!(err, OpenError::Config(_)), "{err:?}");
    // The message names the field; the chain says the rule once.
    let source = std::error::Error::source(&err).expect("the config error is the source");
    assert_eq!(
        format!("{err}: {source}"),
        "config: lease_ms: 0, must be at least 1 ms"
    );
    assert!(!path.exists());

    // Non-durable commits work when this process has the file to itself.
    let store = Store::builder()
        .durability(Durability::None)
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .open(&path)
        .unwrap();
    store
        .begin(&id("shop", "credit", "k"), fp("a"), Timestamp(T0))
        .unwrap();
    assert_eq!(store.stats(Timestamp(T0)).unwrap().pending, 1);
}

#[test]
fn an_empty_file_becomes_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.redb");
    fs::write(&path, b"").unwrap();
    let store = Store::open(&path).unwrap();
    assert!(store.check().unwrap().is_ok());
}
