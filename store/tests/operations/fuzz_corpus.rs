//! Every input of the import's fuzz corpus (`fuzz/corpus/import/`), through the fuzz
//! target's own check (`fuzz/src/import.rs`), on stable.
//!
//! `write_the_seed_corpus` made the seeds (ignored).

#[allow(dead_code, unreachable_pub)] // the fuzz crate's public check, a private module here
#[path = "../../../fuzz/src/import.rs"]
mod import;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/import")
}

#[test]
fn the_import_passes_its_fuzz_corpus() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if catch_unwind(AssertUnwindSafe(|| import::import(&bytes))).is_err() {
            panic!("fuzz target import: {} fails", file.display());
        }
    }
}

#[test]
#[ignore = "writes the seeds of fuzz/corpus/import"]
fn write_the_seed_corpus() {
    use std::convert::Infallible;

    use idem_core::{Fingerprint, LedgerConfig, Outcome, RecordId, Timestamp, Verdict};
    use idem_store::Store;
    use idem_store::redb::backends::InMemoryBackend;

    let t0 = Timestamp(1_700_000_000_000);
    let store = Store::builder()
        .open_on_backend(InMemoryBackend::new())
        .unwrap();
    let id = |key: &str| RecordId::new("shop", "import", key).unwrap();
    let fp = |key: &str| Fingerprint::of_bytes(key.as_bytes());
    for (key, verdict) in [("i-1", Verdict::Succeeded), ("i-2", Verdict::Failed)] {
        let _ = store
            .execute(&id(key), fp(key), t0, |_| {
                Ok::<_, Infallible>((verdict, Outcome::new(200, vec![0, 159, 255]), ()))
            })
            .unwrap();
    }
    store.begin(&id("i-3"), fp("i-3"), t0).unwrap();
    let outbox = store.outbox(LedgerConfig::with_seed(5)).unwrap();
    outbox
        .enqueue("sale.forward", b"sale".to_vec(), fp("sale"), t0, [9; 16])
        .unwrap();
    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    let text = String::from_utf8(export.clone()).unwrap();
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let write =
        |name: &str, bytes: &[u8]| std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    write("export", &export);
    // Records alone, without a header: what version 1 and hand-made files look like.
    let records: String = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("{\"intent\""))
        .map(|l| format!("{l}\n"))
        .collect();
    write("records-only", records.as_bytes());
    // A header that announces more than the input holds: refused as truncated.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    write("truncated", lines.join("\n").as_bytes());
    // The same id as the store's own record, with another outcome: refused.
    write(
        "conflicting",
        br#"{"tenant":"shop","operation":"sale","key":"sale-1","state":"succeeded","generation":1,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","created_at":1,"updated_at":1,"expires_at":2,"completed_at":1,"code":1,"outcome_b64":""}"#,
    );
}
