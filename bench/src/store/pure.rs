//! The pure core's decision, timed without any storage.

use std::hint::black_box;
use std::time::Instant;

use idem_core::protocol;
use idem_core::{Config, Fingerprint, Generation};

use super::NOW;
use crate::measure::{Row, Timing};

/// The pure core's begin on an absent key: the decision without any storage. Timed in
/// blocks of 100 calls, since one call is shorter than the clock's resolution.
pub(super) fn core_decisions(calls: u32) -> Row {
    const BLOCK: u32 = 100;
    let config = Config::default();
    let fingerprint = Fingerprint::of_bytes(b"bench payload");
    let blocks = calls.div_ceil(BLOCK).max(1);
    let mut each = Vec::with_capacity(blocks as usize * BLOCK as usize);
    let start = Instant::now();
    for block in 0..blocks {
        let one = Instant::now();
        for i in 0..BLOCK {
            let next = Generation(u64::from(block * BLOCK + i) + 1);
            let transition = protocol::begin(None, black_box(fingerprint), next, NOW, &config);
            drop(black_box(transition));
        }
        let per_call = one.elapsed() / BLOCK;
        each.extend(std::iter::repeat_n(per_call, BLOCK as usize));
    }
    let timing = Timing {
        total: start.elapsed(),
        calls: each,
    };
    Row::new(
        "core_begin",
        "core begin decision (pure, no I/O)",
        1,
        &timing,
    )
}
