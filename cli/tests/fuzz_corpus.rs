//! Every input of the time parsers' fuzz corpus (`fuzz/corpus/cli_time/`), through the
//! fuzz target's own check (`fuzz/src/cli_time.rs`), on stable. The CLI is a binary, so
//! its parsers are compiled here from their source, as the fuzz crate does.

#[allow(dead_code, unreachable_pub)] // the CLI's module, of which the check uses a part
#[path = "../src/time/parse.rs"]
mod parse;

#[allow(dead_code, unreachable_pub)] // the fuzz crate's public check, a private module here
#[path = "../../fuzz/src/cli_time.rs"]
mod cli_time;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[test]
fn the_time_parsers_pass_their_fuzz_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cli_time");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if catch_unwind(AssertUnwindSafe(|| cli_time::parse(&bytes))).is_err() {
            panic!("fuzz target cli_time: {} fails", file.display());
        }
    }
}
