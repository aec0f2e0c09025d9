//! The simulation's only source of randomness: a seeded SplitMix64.

use idem_core::ledger::BackoffRng;

/// A deterministic generator: the same seed gives the same run, byte for byte.
///
/// The bits come from the ledger's own SplitMix64 ([`BackoffRng`]); this type adds the
/// distributions the simulation draws from.
#[derive(Debug, Clone)]
pub(crate) struct SimRng {
    bits: BackoffRng,
}

impl SimRng {
    /// A generator starting from `seed`.
    #[must_use]
    pub(crate) fn new(seed: u64) -> SimRng {
        SimRng {
            bits: BackoffRng::new(seed ^ 0x5eed_1de3_0000_0000),
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.bits.next_u64()
    }

    /// An independent generator for one part of the world, so that adding draws in one
    /// part does not shift every other part's sequence.
    pub(crate) fn fork(&mut self) -> SimRng {
        SimRng {
            bits: BackoffRng::new(self.next_u64()),
        }
    }

    /// Uniform in `[lo, hi]`, both included.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.bits.up_to(hi - lo)
    }

    /// Uniform in `[0, n)`; 0 when `n` is 0.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let top = u64::try_from(n - 1).unwrap_or(u64::MAX);
        usize::try_from(self.range(0, top)).unwrap_or(0)
    }

    /// A uniform float in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        // 53 random bits fit an f64 mantissa exactly: the values are equally spaced.
        let bits = (self.next_u64() >> 11) as f64;
        bits / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An exponentially distributed wait with the given mean, in ms (at least 1).
    pub(crate) fn exponential(&mut self, mean_ms: u64) -> u64 {
        let mean = mean_ms as f64;
        let wait = -mean * (1.0 - self.unit()).ln();
        // The wait is ≥ 0 and capped far below u64::MAX, so the cast is exact enough.
        let wait = wait.min(1e15) as u64;
        wait.max(1)
    }

    /// 16 random bytes, for the random part of a new key.
    pub(crate) fn bytes16(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        out[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SimRng::new(8).next_u64(), SimRng::new(7).next_u64());
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut rng = SimRng::new(1);
        for _ in 0..10_000 {
            let x = rng.range(3, 9);
            assert!((3..=9).contains(&x));
            assert!(rng.below(5) < 5);
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(rng.range(4, 4), 4);
        assert_eq!(rng.below(0), 0);
    }
}
