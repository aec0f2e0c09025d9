//! The outbox's sender over HTTP (`--features sender-http`): every intent once through
//! a receiver's faults and the sender killed mid-drain, and what it forgets.

#[path = "../common/mod.rs"]
mod common;

mod sender;
