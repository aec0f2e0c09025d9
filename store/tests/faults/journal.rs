//! The journal of a store file (`StoreBuilder::journal`): what a crash leaves in it is
//! written into the file by the next writable open, in any mode; a read-only open asks
//! for that first; a closed store leaves it empty, unless a sync failed; a new store
//! never takes the journal of a deleted one, nor a file the journal of another; and its
//! file keeps its size.
//!
//! A crash of the machine is made by copying files: the store file as the last
//! checkpoint left it (its later writes, never synced, lost) and the journal as the
//! commits left it (each synced before its answer), while the store that wrote them is
//! leaked, never closed, so that it never checkpoints. The copies are new files, and a
//! journal names the file it belongs to, so the copied journal's header is made to name
//! the copy, as it names the file after a power cut in place (`adopt`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::disk::{IoKind, SimDisk, Survival};
use crate::common::{Rng, T0, fp, id};
use idem_core::{Outcome, Timestamp, Verdict};
use idem_store::redb::{ConcurrencyMode, ReadableDatabase, TableDefinition};
use idem_store::{Executed, ListFilter, OpenError, Store};

fn journal_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

fn exclusive() -> idem_store::StoreBuilder {
    Store::builder().concurrency(ConcurrencyMode::ExclusiveWriter)
}

/// The journal `journal` rewritten to belong to the store file at `file` (its header's
/// identity, device and inode, and the header's CRC; the layout is in `journal.rs`).
fn adopt(mut journal: Vec<u8>, file: &Path) -> Vec<u8> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(file).unwrap();
    journal[20..28].copy_from_slice(&meta.dev().to_le_bytes());
    journal[28..36].copy_from_slice(&meta.ino().to_le_bytes());
    let crc = crc32fast::hash(&journal[0..36]);
    journal[36..40].copy_from_slice(&crc.to_le_bytes());
    journal
}

fn execute(store: &Store, key: &str) {
    let ran = store
        .execute(&id("shop", "pay", key), fp(key), Timestamp(T0), |_| {
            Ok::<_, std::convert::Infallible>((
                Verdict::Succeeded,
                Outcome::new(200, key.as_bytes().to_vec()),
                (),
            ))
        })
        .unwrap();
    assert!(matches!(ran, Executed::Ran { .. }), "{key}: {ran:?}");
}

fn keys(store: &Store) -> Vec<String> {
    let mut keys = Vec::new();
    store
        .list(&ListFilter::default(), |id, _| {
            keys.push(id.key().to_string());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    keys.sort();
    keys
}

fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("k{i:04}")).collect()
}

/// What the store file holds after the crash.
#[derive(Clone, Copy)]
enum File {
    /// What the close before the commits synced: a power cut lost every later write.
    AsClosed,
    /// Every write: the process was killed, the machine kept its page cache.
    AsWritten,
}

/// A store file at `dir/store.redb` as a crash leaves it after `before` keys were
/// committed and closed and `after` more were answered through the journal: the file
/// as `file` says, and the journal as the answers left it.
/// A journal limit these runs never reach, so that no checkpoint empties the journal
/// (the store's default, 4 MiB).
const JOURNAL_LIMIT: u64 = 4 << 20;

fn crashed(dir: &Path, before: u32, after: u32, limit: u64, file: File) -> PathBuf {
    let path = dir.join("store.redb");
    let store = exclusive().journal_limit(limit).open(&path).unwrap();
    for key in names(0..before) {
        execute(&store, &key);
    }
    drop(store);
    let file_at_close = fs::read(&path).unwrap();
    let store = exclusive().journal_limit(limit).open(&path).unwrap();
    for key in names(before..before + after) {
        execute(&store, &key);
    }
    let journal = fs::read(journal_of(&path)).unwrap();
    let file_at_cut = match file {
        File::AsClosed => file_at_close,
        File::AsWritten => fs::read(&path).unwrap(),
    };
    // Never closed: it never checkpoints (and keeps its locks on files no longer used).
    std::mem::forget(store);
    let cut = dir.join("after-the-cut");
    fs::create_dir(&cut).unwrap();
    let restored = cut.join("store.redb");
    fs::write(&restored, file_at_cut).unwrap();
    fs::write(journal_of(&restored), adopt(journal, &restored)).unwrap();
    restored
}

#[test]
fn the_next_open_writes_what_the_journal_holds_into_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed(dir.path(), 5, 20, JOURNAL_LIMIT, File::AsClosed);
    // The file alone misses the commits only the journal holds: the journal is what
    // kept them. (Opened from a copy without the journal beside it.)
    let alone = dir.path().join("file-alone.redb");
    fs::copy(&path, &alone).unwrap();
    assert_eq!(keys(&Store::open(&alone).unwrap()), names(0..5));

    let store = exclusive().open(&path).unwrap();
    assert_eq!(keys(&store), names(0..25));
    assert!(store.check().unwrap().is_ok());
    execute(&store, "after");
    drop(store);
    // Closed, the file alone is the whole store.
    let alone = dir.path().join("file-after-close.redb");
    fs::copy(&path, &alone).unwrap();
    let keys_after = keys(&Store::open(&alone).unwrap());
    assert_eq!(keys_after.len(), 26);
}

#[test]
fn a_killed_process_leaves_a_journal_whose_replay_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The smallest journal checkpoints every few commits. (What a power cut leaves
    // across checkpoints is `power_loss.rs`'s subject: it alone sees the file as the
    // last checkpoint synced it.)
    let path = crashed(dir.path(), 3, 60, 0, File::AsWritten);
    let store = exclusive().journal_limit(0).open(&path).unwrap();
    assert_eq!(keys(&store), names(0..63));
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn an_open_in_another_mode_writes_the_journal_in_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed(dir.path(), 2, 10, JOURNAL_LIMIT, File::AsClosed);
    // The default multi-process mode uses no journal, and still reads what one holds.
    let store = Store::open(&path).unwrap();
    assert_eq!(keys(&store), names(0..12));
    assert!(store.check().unwrap().is_ok());
    execute(&store, "multi");
    drop(store);
    let store = exclusive().open(&path).unwrap();
    assert_eq!(keys(&store).len(), 13);
}

#[test]
fn a_read_only_open_asks_for_the_recovery_the_journal_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed(dir.path(), 2, 10, JOURNAL_LIMIT, File::AsClosed);
    let file_before = fs::read(&path).unwrap();
    let err = Store::builder().read_only(true).open(&path).unwrap_err();
    assert!(
        matches!(err, OpenError::NeedsRecovery { .. }),
        "a read-only open of a file whose journal holds commits: {err}"
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        file_before,
        "the read-only open wrote"
    );
    drop(exclusive().open(&path).unwrap());
    let store = Store::builder().read_only(true).open(&path).unwrap();
    assert_eq!(keys(&store), names(0..12));
}

#[test]
fn a_new_store_never_takes_the_journal_a_deleted_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed(dir.path(), 2, 10, JOURNAL_LIMIT, File::AsClosed);
    fs::remove_file(&path).unwrap();
    assert!(journal_of(&path).exists());
    let store = exclusive().open(&path).unwrap();
    assert_eq!(keys(&store), Vec::<String>::new());
    assert!(store.check().unwrap().is_ok());
    execute(&store, "fresh");
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(keys(&store), vec!["fresh".to_string()]);
}

#[test]
fn a_second_open_waits_for_the_process_that_holds_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = exclusive().open(&path).unwrap();
    execute(&store, "held");
    for builder in [exclusive(), Store::builder(), exclusive().journal(false)] {
        let err = builder
            .lock_timeout(Duration::from_millis(50))
            .open(&path)
            .unwrap_err();
        assert!(matches!(err, OpenError::Locked { .. }), "{err}");
    }
    drop(store);
    assert_eq!(keys(&Store::open(&path).unwrap()), vec!["held".to_string()]);
}

#[test]
fn the_journal_keeps_its_size_and_a_closed_one_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let limit = 256 << 10;
    let store = exclusive().journal_limit(limit).open(&path).unwrap();
    let journal = journal_of(&path);
    assert_eq!(fs::metadata(&journal).unwrap().len(), limit);
    for key in names(0..100) {
        execute(&store, &key);
    }
    // Checkpoints reuse the file from its start.
    assert_eq!(fs::metadata(&journal).unwrap().len(), limit);
    drop(store);
    // A read-only open would refuse a journal holding commits.
    let store = Store::builder().read_only(true).open(&path).unwrap();
    assert_eq!(keys(&store).len(), 100);
}

#[test]
fn without_the_journal_an_exclusive_store_syncs_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = exclusive().journal(false).open(&path).unwrap();
    execute(&store, "plain");
    assert!(!journal_of(&path).exists());
    drop(store);
    // The default mode never journals either.
    let store = Store::open(&path).unwrap();
    execute(&store, "multi");
    assert!(!journal_of(&path).exists());
}

/// The schema version the synced bytes `image` of a store hold.
fn durable_schema(image: Vec<u8>) -> u64 {
    const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");
    let db = idem_store::redb::Database::builder()
        .open_read_only_with_backend(SimDisk::from_image(image))
        .unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    let bytes = meta.get(&b"schema"[..]).unwrap().unwrap();
    u64::from_be_bytes(bytes.value().try_into().unwrap())
}

/// A file of schema 3 (whose builds know no journal) opened with the journal: the
/// upgrade to schema 4 is synced in the file itself before any commit sits in the
/// journal alone, so that a build of schema 3 refuses the file rather than reading it
/// without the journal's commits.
#[test]
fn an_older_file_is_upgraded_in_the_file_itself_before_the_journal_holds_a_commit() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/store-v3.redb");
    let v3 = fs::read(golden).expect("testdata/store-v3.redb is committed");
    assert_eq!(durable_schema(v3.clone()), 3);
    let (main, journal) = SimDisk::pair(v3, Vec::new());
    let store = Store::builder()
        .open_on_backend_with_journal(main.clone(), journal)
        .unwrap();
    execute(&store, "first");
    // A power cut now: what the file alone holds, none of its unsynced writes kept.
    let synced = main.cut_now().image(Survival::Nothing, &mut Rng::new(1));
    assert_eq!(durable_schema(synced), 4);
}

/// A journal holding commits of another store file (the one that crashed was replaced,
/// here by a restored backup, and its journal left beside the new one) is refused, and
/// both files are left as they are; with the journal moved away, the file opens.
#[test]
fn a_journal_of_another_file_is_refused_and_nothing_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed(dir.path(), 2, 10, JOURNAL_LIMIT, File::AsClosed);
    let journal = journal_of(&path);
    // The backup: the same bytes, a new file.
    let backup = dir.path().join("backup.redb");
    fs::copy(&path, &backup).unwrap();
    fs::remove_file(&path).unwrap();
    fs::rename(&backup, &path).unwrap();
    let before = (fs::read(&path).unwrap(), fs::read(&journal).unwrap());
    for builder in [
        exclusive(),
        Store::builder(),
        Store::builder().read_only(true),
    ] {
        let err = builder.open(&path).unwrap_err();
        match &err {
            OpenError::Corrupt { detail, .. } if detail.contains("another store file") => {}
            // A read-only open does not read the journal's owner: it asks for the
            // writable open that replays, which then refuses.
            OpenError::NeedsRecovery { .. } => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(
        (fs::read(&path).unwrap(), fs::read(&journal).unwrap()),
        before,
        "a refused open wrote"
    );
    fs::rename(&journal, dir.path().join("kept-journal")).unwrap();
    let store = exclusive().open(&path).unwrap();
    assert_eq!(keys(&store), names(0..2));
    assert!(store.check().unwrap().is_ok());
}

/// A failed sync of the store file at a checkpoint (Linux drops the unsynced pages and
/// reports the error once), then the store is dropped: the journal is left as it is,
/// not emptied by a second checkpoint whose sync would report success, so the next open
/// replays every answered commit.
#[test]
fn after_a_failed_sync_closing_keeps_the_journal_for_the_next_open() {
    let (main, journal) = SimDisk::pair(Vec::new(), Vec::new());
    let store = Store::builder()
        .journal_limit(0)
        .open_on_backend_with_journal(main.clone(), journal.clone())
        .unwrap();
    let mut answered = Vec::new();
    for key in names(0..3) {
        execute(&store, &key);
        answered.push(key);
    }
    main.lose_unsynced_on_failed_sync();
    let (_, syncs) = main.counts();
    // The store file's next sync: the next checkpoint's.
    main.fail(IoKind::Sync, syncs);
    for key in names(3..500) {
        let ran = store.execute(&id("shop", "pay", &key), fp(&key), Timestamp(T0), |_| {
            Ok::<_, std::convert::Infallible>((Verdict::Succeeded, Outcome::new(200, "ok"), ()))
        });
        if ran.is_err() {
            break;
        }
        answered.push(key);
    }
    assert!(main.faulted(), "no checkpoint came");
    assert!(store.needs_reopen());
    drop(store);
    // A power cut after the close.
    let store = reopen_after_a_cut(&main);
    let found = keys(&store);
    let lost: Vec<&String> = answered.iter().filter(|k| !found.contains(k)).collect();
    assert!(lost.is_empty(), "answered and lost: {lost:?}");
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn a_read_only_open_waits_for_the_process_that_holds_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = exclusive().open(&path).unwrap();
    execute(&store, "held");
    let err = Store::builder()
        .read_only(true)
        .lock_timeout(Duration::from_millis(50))
        .open(&path)
        .unwrap_err();
    assert!(matches!(err, OpenError::Locked { .. }), "{err}");
    drop(store);
    let store = Store::builder().read_only(true).open(&path).unwrap();
    assert_eq!(keys(&store), vec!["held".to_string()]);
}

/// A compaction moves many pages between syncs (past the journal's size, which then
/// checkpoints): every record is kept, through a crash right after it too.
#[test]
fn a_compaction_through_the_journal_keeps_every_record() {
    let (main, journal) = SimDisk::pair(Vec::new(), Vec::new());
    let mut store = Store::builder()
        .journal_limit(0)
        .open_on_backend_with_journal(main.clone(), journal)
        .unwrap();
    for key in names(0..400) {
        execute(&store, &key);
    }
    let swept = store
        .sweep(Timestamp(T0 + 400 * 24 * 3_600_000), 100_000, false)
        .unwrap();
    assert!(swept.removed + swept.tombstoned > 0, "{swept:?}");
    for key in names(400..420) {
        execute(&store, &key);
    }
    let before = keys(&store);
    assert!(store.compact().unwrap());
    assert_eq!(keys(&store), before);
    // A power cut right after.
    let after = reopen_after_a_cut(&main);
    drop(store);
    assert!(after.check().unwrap().is_ok());
    assert_eq!(keys(&after), before);
}

/// The store reopened from what both disks of `main`'s pair hold synced now: a power
/// cut that none of their unsynced writes survive.
fn reopen_after_a_cut(main: &SimDisk) -> Store {
    let cut = main.cut_now();
    let mut rng = Rng::new(1);
    let (main, journal) = SimDisk::pair(
        cut.image(Survival::Nothing, &mut rng),
        cut.journal_image(Survival::Nothing, &mut rng).unwrap(),
    );
    Store::builder()
        .open_on_backend_with_journal(main, journal)
        .unwrap()
}
