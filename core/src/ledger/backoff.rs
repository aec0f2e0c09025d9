//! Retry delays: exponential backoff with full jitter, from a seeded [`BackoffRng`].

use serde::{Deserialize, Serialize};

use super::LedgerConfig;

/// The jitter source: SplitMix64 (Steele, Lea, Flood 2014), 8 bytes of state.
///
/// Seeded from [`LedgerConfig::seed`]; its state is plain data, persisted with the ledger
/// (or by the store next to its intents) so a restored ledger continues the same
/// sequence. Not for secrets: it only spreads retries apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffRng {
    state: u64,
}

impl BackoffRng {
    /// A generator starting from `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> BackoffRng {
        BackoffRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, max]`, both ends included (Lemire's multiply-shift; the bias is
    /// below 2^-64 · max, far under a millisecond's worth).
    pub fn up_to(&mut self, max: u64) -> u64 {
        let span = u128::from(max) + 1;
        // The product is below 2^64 · span, so the shift leaves a value ≤ max.
        u64::try_from((u128::from(self.next_u64()) * span) >> 64).unwrap_or(max)
    }

    /// The wait before the retry that follows attempt number `attempts` (1 for the first
    /// send): uniform in `[0, min(max_backoff, base_backoff · 2^(attempts − 1))]`.
    pub fn delay(&mut self, attempts: u32, config: &LedgerConfig) -> u64 {
        self.up_to(backoff_cap(attempts, config))
    }
}

/// The upper end of the jitter window after `attempts` sends:
/// `min(max_backoff, base_backoff · 2^(attempts − 1))`, without overflow.
#[must_use]
pub fn backoff_cap(attempts: u32, config: &LedgerConfig) -> u64 {
    let doublings = attempts.saturating_sub(1);
    let grown = 1u64.checked_shl(doublings).map_or(u64::MAX, |factor| {
        config.base_backoff_ms.saturating_mul(factor)
    });
    grown.min(config.max_backoff_ms)
}
