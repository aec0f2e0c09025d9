//! Runs N executes of fresh keys, one per transaction, single process, for counting
//! instructions under valgrind: the difference between two runs of different N, divided
//! by the difference of N, is the CPU of one execute without the start-up.
//!
//! Without fsync (durability None) by default; with `journal` as the second argument,
//! as a store with its journal runs them (durability Immediate: each commit appends a
//! record to the journal and syncs it).
//!
//! ```text
//! cargo build --release -p idem-bench --example instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/instructions 1000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/instructions 3000
//! ```
//!
//! (instructions of the second − the first) / 2000 = instructions per execute. Add
//! `journal` after the count (`... instructions 1000 journal`) for journaled executes.

use std::convert::Infallible;
use std::error::Error;

use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::redb::{ConcurrencyMode, Durability};
use idem_store::{Executed, Store};

fn main() -> Result<(), Box<dyn Error>> {
    let n: u32 = match std::env::args().nth(1) {
        Some(n) => n.parse().map_err(|e| format!("N: {e}"))?,
        None => 1_000,
    };
    let journal = match std::env::args().nth(2).as_deref() {
        None => false,
        Some("journal") => true,
        Some(other) => {
            return Err(
                format!("the second argument is `journal` or nothing, not {other:?}").into(),
            );
        }
    };
    let dir = tempfile::tempdir()?;
    let durability = if journal {
        Durability::Immediate
    } else {
        Durability::None
    };
    let store = Store::builder()
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .durability(durability)
        .open(dir.path().join("instructions.redb"))?;
    let outcome = Outcome::new(200, vec![7u8; 64]);
    for i in 0..n {
        let id = RecordId::new("bench", "cpu", &format!("k-{i:08}"))?;
        let fingerprint = Fingerprint::of_bytes(id.key().as_bytes());
        let executed = store.execute(&id, fingerprint, Timestamp(1_750_000_000_000), |_| {
            Ok::<_, Infallible>((Verdict::Succeeded, outcome.clone(), ()))
        })?;
        if !matches!(executed, Executed::Ran { .. }) {
            return Err(format!("{id} did not run: {executed:?}").into());
        }
    }
    println!("{n} executes");
    Ok(())
}
