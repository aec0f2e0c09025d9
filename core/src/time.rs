//! Time and fencing: [`Timestamp`] and [`Generation`].

use core::fmt;
use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (1970-01-01T00:00:00Z), passed in by the caller.
///
/// The core never reads a clock: every function that needs "now" takes a `Timestamp`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The epoch itself.
    pub const ZERO: Timestamp = Timestamp(0);

    /// Milliseconds since the epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + ms`, saturating at the largest representable time.
    #[must_use]
    pub const fn plus_millis(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// `self - earlier` in milliseconds, or 0 when `earlier` is later.
    #[must_use]
    pub const fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// The time `time` names, which the caller read from a clock: milliseconds since the
/// epoch, sub-millisecond parts dropped. A time before the epoch converts to
/// [`Timestamp::ZERO`] (a clock set before 1970 makes every lease look fresh, the safe
/// direction: nothing is declared abandoned early); one past `u64::MAX` ms saturates.
#[cfg(any(feature = "std", test))]
impl From<std::time::SystemTime> for Timestamp {
    fn from(time: std::time::SystemTime) -> Timestamp {
        let since = time
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A fencing token: a store-wide counter, strictly increasing, never reused.
///
/// Every claim gets a new generation. Heartbeat, complete, release and mark-unknown name
/// the generation they hold; a generation that is no longer the current pending one is
/// refused as stale, so a late executor never overwrites a newer one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation after this one.
    ///
    /// # Panics
    ///
    /// At `u64::MAX`: a store would need 2^64 claims to get there, and reusing a
    /// generation would break the fencing guarantee, so stopping is the only safe answer.
    #[must_use]
    pub fn next(self) -> Generation {
        Generation(self.0.checked_add(1).expect("generation counter exhausted"))
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Timestamp;
    use core::time::Duration;
    use std::time::UNIX_EPOCH;

    #[test]
    fn system_times_convert_to_milliseconds_since_the_epoch() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(Timestamp::from(UNIX_EPOCH), Timestamp::ZERO);
        assert_eq!(
            Timestamp::from(at(1_700_000_000_123)),
            Timestamp(1_700_000_000_123)
        );
        let below_a_millisecond = at(42) + Duration::from_nanos(999_999);
        assert_eq!(Timestamp::from(below_a_millisecond), Timestamp(42));
        let before_the_epoch = UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(Timestamp::from(before_the_epoch), Timestamp::ZERO);
        if let Some(far) = UNIX_EPOCH.checked_add(Duration::from_secs(u64::MAX / 500)) {
            assert_eq!(Timestamp::from(far), Timestamp(u64::MAX));
        }
    }
}
