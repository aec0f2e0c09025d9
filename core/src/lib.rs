//! The pure state machines of idem: the receiver protocol and the sender ledger.
//!
//! idem makes "retry after a timeout" safe. Every business intent gets one idempotency
//! key; the receiver decides atomically who may execute it, keeps the outcome and replays
//! it to every retry, so the effect happens once.
//!
//! This crate does no I/O. It never reads a clock and never asks the OS for randomness:
//! time ([`Timestamp`]) and random bytes are arguments. Every function here is a pure
//! function of its inputs, so the store (`idem-store`), the browser bindings (`idem-wasm`)
//! and the tests all drive the same code and get the same bytes.
//!
//! # Receiver protocol
//!
//! A [`Record`] is addressed by a [`RecordId`] (tenant, operation, key). The functions in
//! [`protocol`] take the current record (or none), one input, the time and the
//! [`Config`], and return a [`protocol::Transition`]: the decision to answer and the
//! [`protocol::Write`] to apply. A store applies that write in the same transaction in
//! which it read the record, and answers only after it committed.
//!
//! # HTTP
//!
//! [`http`] maps the protocol onto HTTP (draft-ietf-httpapi-idempotency-key-header): the
//! `Idempotency-Key` header, the request fingerprint, and the status, headers and RFC
//! 9457 problem document of every decision.
//!
//! # Panics are bugs, errors are input
//!
//! Nothing a caller sends makes this crate panic: every malformed key, oversized outcome,
//! stale generation or undecodable byte string is an error value that names the field and
//! the rule it broke.
//!
//! # Features
//!
//! - `json` (default): canonical JSON fingerprints (RFC 8785) with ignored field paths.
//! - `std`: conversions from the standard library's types, such as a [`Timestamp`] from a
//!   `std::time::SystemTime` the caller read. The core still reads no clock.
//! - `test-unguarded-deadline`: test-only. Adds [`LedgerConfig`]'s switch that turns the
//!   sender's deadline guard off, so that a simulation can show the guard is needed.
//!   Never enable it in a product: intents sent past their deadline may execute twice.
//!   Only idem-tests' dev-dependencies enable it, and a release build with it fails.
//!
//! The crate is `#![no_std]` with `alloc` (the `std` feature links std for its
//! conversions only), and builds for `wasm32-unknown-unknown` and bare-metal targets.
#![no_std]
#![forbid(unsafe_code)]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]

// A test-only switch never ships: whatever unified it into a release build, the build
// fails instead of linking it.
#[cfg(all(feature = "test-unguarded-deadline", not(debug_assertions)))]
compile_error!(
    "idem-core: the feature test-unguarded-deadline is test-only and is refused in a release build"
);

extern crate alloc;
// The unit tests use std's clock types to test the `std` conversions.
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod config;
pub mod encoding;
pub mod fingerprint;
pub mod http;
pub mod id;
pub mod ledger;
pub mod machine;
pub mod memory;
mod order;
pub mod protocol;
pub mod quote;
pub mod record;
pub mod time;
pub mod token;

pub use config::{Config, ConfigError, LeaseExpiry, Terms};
pub use encoding::DecodeError;
#[cfg(feature = "json")]
pub use fingerprint::JsonPaths;
pub use fingerprint::{Fingerprint, FingerprintError};
pub use id::{Field, IdError, RecordId};
pub use ledger::{
    Attempt, Effect, Intent, IntentResolution, IntentState, Ledger, LedgerConfig,
    LedgerConfigError, LedgerError, Reply, ResolvedAs,
};
pub use machine::{Entity, EntityDecision, Machine, MachineError, MachineSpec};
pub use protocol::{Decision, Refusal, Resolution, Swept, Transition, Write};
pub use record::{Outcome, OutcomeError, Record, State, Status, Verdict};
pub use time::{Generation, Timestamp};
pub use token::{IssuedToken, Token, TokenError, TokenRefusal};
