//! Crashes, power cuts and failing disks: a killed writer, cuts at every sync, I/O errors, the journal, storage backends.
//!
//! One test binary of idem-store's integration tests, grouped by concern; each module
//! was a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod backend;
mod crash;
#[cfg(feature = "http")]
mod full_disk;
mod io_errors;
mod journal;
mod power_loss;
mod tmpfs;
