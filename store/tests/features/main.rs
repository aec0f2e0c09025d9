//! The layers after the key and the sender side: entities and uniqueness, tokens, the inbox, the outbox.
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod entities;
mod inbox;
mod outbox;
mod tokens;
