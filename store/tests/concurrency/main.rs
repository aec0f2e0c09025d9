//! Many callers and many processes: group commit and the multi-process modes.
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod group_commit;
mod multiprocess;
