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

/// The time a timestamp names, for the caller's clock arithmetic and for people's
/// libraries: `UNIX_EPOCH` plus its milliseconds.
#[cfg(any(feature = "std", test))]
impl From<Timestamp> for std::time::SystemTime {
    fn from(at: Timestamp) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + core::time::Duration::from_millis(at.0)
    }
}

impl Timestamp {
    /// How long from `self` until `later` (a lease's end, an expiry), zero when `later`
    /// is past: what "retry in 28 s" needs.
    #[must_use]
    pub const fn until(self, later: Timestamp) -> core::time::Duration {
        core::time::Duration::from_millis(later.0.saturating_sub(self.0))
    }
}

/// RFC 3339 in UTC, with milliseconds only when they are not zero:
/// `2026-12-04T21:09:05.862Z`, as a person reads a time. [`Timestamp::as_millis`] gives
/// the number.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DAY: u64 = 86_400_000;
        let days = self.0 / DAY;
        let (year, month, day) = civil_from_days(days);
        let rest = self.0 % DAY;
        let (h, m, s, ms) = (
            rest / 3_600_000,
            rest % 3_600_000 / 60_000,
            rest % 60_000 / 1_000,
            rest % 1_000,
        );
        write!(f, "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}")?;
        if ms != 0 {
            write!(f, ".{ms:03}")?;
        }
        f.write_str("Z")
    }
}

/// The civil date (year, month, day) of `days` since 1970-01-01, in the proleptic
/// Gregorian calendar (Howard Hinnant's `civil_from_days`).
const fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as u64;
    (year, month, day)
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

#[cfg(test)]
mod display_tests {
    use alloc::string::ToString;

    use super::Timestamp;

    #[test]
    fn a_timestamp_reads_as_rfc_3339_and_converts_to_system_time() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Timestamp(1_740_830_400_000).to_string(),
            "2025-03-01T12:00:00Z"
        );
        assert_eq!(
            Timestamp(1_796_417_345_862).to_string(),
            "2026-12-04T20:49:05.862Z"
        );
        // A leap day, and the last millisecond of a year.
        assert_eq!(
            Timestamp(951_782_400_000).to_string(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            Timestamp(1_735_689_599_999).to_string(),
            "2024-12-31T23:59:59.999Z"
        );
        let at = Timestamp(1_740_830_400_123);
        assert_eq!(Timestamp::from(std::time::SystemTime::from(at)), at);
        assert_eq!(
            at.until(at.plus_millis(28_000)),
            core::time::Duration::from_secs(28)
        );
        assert_eq!(at.plus_millis(5).until(at), core::time::Duration::ZERO);
    }
}
