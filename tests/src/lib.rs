//! Suites of idem that cross crates, as test targets of this package:
//! `tests/simulation.rs` runs the deterministic simulation of senders and a receiver
//! joined by a faulty network (`tests/sim/`) over many seeds and checks exactly-once;
//! `examples/e2e-server.rs` is the browser end-to-end test's server.
//!
//! The simulation turns the senders' deadline guard and the receiver's clock floor
//! off in some scenarios, to show that each is load-bearing. Those switches are
//! test-only features of idem-core and idem-store, enabled by this package's
//! dev-dependencies alone: cargo enables a dev-dependency's features only for the
//! targets that need dev-dependencies (tests, examples, benchmarks), so a
//! `cargo build --workspace` (the `idem` binary) never has them.
