//! What a commit costs the disk: bytes written, write calls and syncs per commit, counted.
//!
//! The counting is a redb [`StorageBackend`](idem_store::redb::StorageBackend) that
//! passes every call to a real file and counts it ([`Counting`]).
//!
//! Counts, unlike times, do not depend on the machine's load: the same run gives the same
//! figures. [`run`] counts the store's own paths (one execute per transaction in both
//! concurrency modes, begin + complete, and group commit at 64 callers); [`layout`]
//! counts bare redb commits that insert into one to four tables, which is what a commit
//! of the store pays per B-tree it modifies, and so what folding tables would save.

mod counting;
mod layout;
mod paths;

use idem_core::Timestamp;
use serde::Serialize;

pub use counting::{Calls, Counter, Counting};
pub use layout::{LayoutRow, layout, layout_table};
pub use paths::{IoRow, io_table, run};

/// The time every input runs at.
const NOW: Timestamp = Timestamp(1_750_000_000_000);

/// The size of a redb page.
pub const PAGE: u64 = 4096;

fn per(count: u64, of: u64) -> f64 {
    count as f64 / of.max(1) as f64
}

/// How much [`run`] and [`layout`] do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IoPlan {
    /// Inputs (or bare commits) run before counting, so that the file has grown past its
    /// first allocations and the B-trees have more than one level.
    pub warm_up: u32,
    /// Inputs counted per path (group commit: per caller); bare commits counted.
    pub inputs: u32,
}

impl Default for IoPlan {
    /// 2,000 inputs of warm-up, 500 counted.
    fn default() -> IoPlan {
        IoPlan {
            warm_up: 2_000,
            inputs: 500,
        }
    }
}
