//! The file's own receiver paths: the atomic path, the blocking API under threads, tombstones on
//! the atomic path, the clock floor on every write path, the replay cache, the HTTP layer and
//! the examples. (The protocol through the seam, reconciliation and the recovery of abandoned
//! claims included, on every engine, is the conformance suite's: `tests/conformance`.)
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod atomic;
mod clock;
mod examples;
#[cfg(feature = "http")]
mod http_layer;
mod protocol;
mod replay_cache;
mod tombstones;
