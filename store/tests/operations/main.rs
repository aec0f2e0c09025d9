//! The file as an operator meets it: maintenance, golden files of every schema, refused opens, read-only stores, fuzz seeds.
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod fuzz_corpus;
mod golden;
mod maintenance;
mod open_errors;
mod read_only;
mod write;
