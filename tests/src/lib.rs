//! Suites of idem that cross crates.
