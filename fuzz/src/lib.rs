//! The checks behind idem's fuzz targets, one function per target (`fuzz_targets/`):
//! each takes arbitrary bytes and panics only when idem mishandles them.
//!
//! The workspace's `cargo test` runs the same functions over every file of
//! `fuzz/corpus/<target>/`: `core/tests/fuzz_corpus.rs`, `store/tests/fuzz_corpus.rs` and
//! `cli/tests/fuzz_corpus.rs` compile these files with `#[path]`.

pub mod cli_time;
pub mod decoders;
pub mod import;
pub mod json;

/// The CLI's time parsers, compiled from its source as they are (the CLI is a binary).
#[allow(dead_code)]
#[path = "../../cli/src/time/parse.rs"]
mod parse;
