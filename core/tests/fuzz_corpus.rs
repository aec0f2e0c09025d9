//! Every input of the fuzz corpus of the core's targets (`fuzz/corpus/<target>/`: the
//! seeds, and what fuzzing found and was kept), through the fuzz targets' own checks
//! (`fuzz/src/`), on stable: a crash fuzzing found once stays fixed.
//!
//! `write_the_seed_corpus` made the binary seeds (ignored; run it after a format change
//! that should be fuzzed from new seeds).

#[allow(dead_code, unreachable_pub)] // the fuzz crate's public checks, a private module here
#[path = "../../fuzz/src/decoders.rs"]
mod decoders;
#[cfg(feature = "json")]
#[allow(dead_code, unreachable_pub)] // the fuzz crate's public checks, a private module here
#[path = "../../fuzz/src/json.rs"]
mod json;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Feeds every file of `target`'s corpus to `check`, naming the file that fails.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if catch_unwind(AssertUnwindSafe(|| check(&bytes))).is_err() {
            panic!("fuzz target {target}: {} fails", file.display());
        }
    }
}

#[test]
fn the_decoders_pass_their_fuzz_corpus() {
    replay("record", decoders::record);
    replay("intent", decoders::intent);
    replay("ledger_snapshot", decoders::ledger_snapshot);
    replay("receiver_snapshot", decoders::receiver_snapshot);
}

#[cfg(feature = "json")]
#[test]
fn canonical_json_passes_its_fuzz_corpus() {
    replay("json_canonical", json::canonical);
    replay("json_number", json::number);
}

#[test]
#[ignore = "writes the binary seeds of fuzz/corpus/{record,intent,ledger_snapshot,receiver_snapshot}"]
fn write_the_seed_corpus() {
    use idem_core::ledger::{Ledger, LedgerConfig, Reply};
    use idem_core::memory::MemoryReceiver;
    use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};

    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    let t0 = Timestamp(1_700_000_000_000);
    let mut receiver = MemoryReceiver::new(Config::default());
    let id = |key: &str| RecordId::new("shop", "sale", key).unwrap();
    let fp = |key: &str| Fingerprint::of_bytes(key.as_bytes());
    for (n, key) in ["pending", "succeeded", "failed", "unknown"]
        .iter()
        .enumerate()
    {
        let at = Timestamp(t0.0 + n as u64);
        let Ok(idem_core::Decision::Claimed { generation, .. }) =
            receiver.begin(&id(key), fp(key), at)
        else {
            panic!("a new key is claimed")
        };
        match *key {
            "succeeded" => receiver
                .complete(
                    &id(key),
                    generation,
                    Verdict::Succeeded,
                    Outcome::new(200, "ok"),
                    at,
                )
                .unwrap(),
            "failed" => receiver
                .complete(
                    &id(key),
                    generation,
                    Verdict::Failed,
                    Outcome::new(402, vec![0, 255]),
                    at,
                )
                .unwrap(),
            "unknown" => receiver.mark_unknown(&id(key), generation, at).unwrap(),
            _ => {}
        }
        write("record", key, &receiver.get(&id(key)).unwrap().encode());
    }
    write("record", "id", &id("pending").to_key_bytes());
    write("receiver_snapshot", "four-states", &receiver.snapshot());
    write(
        "receiver_snapshot",
        "empty",
        &MemoryReceiver::new(Config::default()).snapshot(),
    );

    let mut ledger = Ledger::new(LedgerConfig::with_seed(9)).unwrap();
    let mut keys = Vec::new();
    for n in 0..4u8 {
        let payload = vec![b'p', n];
        let intent = ledger
            .begin(
                "sale.forward",
                payload.clone(),
                Fingerprint::of_bytes(&payload),
                t0,
                [n; 16],
            )
            .unwrap();
        keys.push(intent.key.clone());
    }
    let sent = ledger.due(t0);
    assert_eq!(sent.len(), 4);
    let replies = [(201, "created"), (422, "conflict"), (503, "retry")];
    for (key, (status, body)) in keys.iter().zip(replies) {
        let reply = Reply {
            status,
            body: body.as_bytes().to_vec(),
            retry_at: None,
        };
        ledger.on_reply(key, reply, t0).unwrap();
    }
    for (n, intent) in ledger.iter().enumerate() {
        write(
            "intent",
            &format!("{n}-{:?}", intent.state).to_lowercase(),
            &intent.encode(),
        );
    }
    write("ledger_snapshot", "four-intents", &ledger.snapshot());
    write(
        "ledger_snapshot",
        "empty",
        &Ledger::new(LedgerConfig::with_seed(1)).unwrap().snapshot(),
    );
}
