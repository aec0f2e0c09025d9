//! The receiver protocol and its answers: the two-phase and atomic paths, tombstones, reconciliation, the clock floor, the replay cache, the HTTP layer and the examples.
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
mod reconcile;
mod replay_cache;
mod tombstones;
