//! Browser bindings of idem: the sender ledger, the fingerprints and an in-memory
//! receiver, for JavaScript through wasm-bindgen.
//!
//! This crate is the Rust half of the npm package `idem-wasm` (docs/design.md §6). It adds no
//! logic of its own: every decision is made by `idem-core`, so a browser, Node and the
//! Rust store compute the same keys, fingerprints and transitions. What lives here is the
//! translation: JS values in (checked, with errors that name the field), JS objects out,
//! and Rust errors thrown as JS `Error`s carrying the Rust `Display` message.
//!
//! | JS | Rust |
//! |---|---|
//! | [`IdemClient`] | [`idem_core::ledger::Ledger`] |
//! | [`MemoryReceiver`] | [`idem_core::memory::MemoryReceiver`] |
//! | `fingerprintBytes`, `fingerprintFields`, `fingerprintJson`, `canonicalJson` | [`idem_core::Fingerprint`] |
//! | [`Machine`] | [`idem_core::machine`] |
//!
//! # Time and randomness
//!
//! Like the core, the bindings never read a clock: every call that needs the time takes
//! `nowMs` (milliseconds since the Unix epoch, `Date.now()`). A new key needs 16 random
//! bytes: `IdemClient.begin` takes them as its optional fourth argument, and when they are
//! left out draws them from `crypto.getRandomValues` (Web Crypto; browsers, workers and
//! Node 19+). The ledger's seeded PRNG is only for backoff jitter and never makes keys,
//! so keys stay unique across reloads and across clients that share a seed.
//!
//! # Panics are bugs, errors are input
//!
//! Every value a caller passes is checked; a bad one throws an `Error` whose message names
//! the argument or field and the rule it broke. Every string must be well-formed UTF-16:
//! one with a lone surrogate has no UTF-8 form (converting it would put U+FFFD in its
//! place, and different strings would get one fingerprint), so it is refused before it is
//! converted.

mod client;
mod fingerprint;
mod js;
mod machine;
mod receiver;
pub mod sys;
pub mod types;

pub use client::IdemClient;
pub use fingerprint::{canonical_json, fingerprint_bytes, fingerprint_fields, fingerprint_json};
pub use machine::Machine;
pub use receiver::MemoryReceiver;

/// The allocator of the wasm build: TLSF (rlsf), 8 KB less wasm than Rust's default
/// dlmalloc (2.4 KB gzipped). Measured with `wasm/js/tools/workload-bench.mjs` (30,000
/// records, 6 x 2,000 intents): times within the run-to-run spread of dlmalloc's, peak
/// memory 103 MiB against 101. It grows in place on realloc and merges the pages it takes:
/// without that (`SmallGlobalTlsf`, 0.5 KB gzipped less) the same run peaks at 135 MiB.
/// A free-list allocator (lol_alloc, 0.3 KB gzipped less still) took twice as long on the
/// intents. The wasm build has one thread, which rlsf's wasm32 lock relies on.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: rlsf::GlobalTlsf = rlsf::GlobalTlsf::new();
