//! The layers after the key and the sender side on the file: entities and uniqueness and tokens
//! inside a caller's transaction, the inbox, the outbox. (Entities, claimed values and tokens
//! through the seam, on every engine, are the conformance suite's: `tests/conformance`.)
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod entities;
mod inbox;
mod outbox;
mod tokens;
