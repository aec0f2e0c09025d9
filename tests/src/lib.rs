//! Suites of idem that cross crates.
//!
//! [`sim`] is the deterministic simulation of senders and a receiver joined by a faulty
//! network; `tests/simulation.rs` runs it over many seeds and checks exactly-once.

pub mod sim;
