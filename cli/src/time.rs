//! Time on the command line: durations (`30s`), instants (`--now`, RFC 3339) and ages.
//!
//! RFC 3339 is parsed and printed by hand (`time/parse.rs`): the proleptic Gregorian
//! calendar in UTC is a few lines of arithmetic, and the CLI needs nothing else from a
//! date library.

use idem_core::Timestamp;

mod parse;

use parse::{DAY, HOUR, MINUTE, SECOND};
pub(crate) use parse::{format_instant, parse_duration, parse_instant};

/// A span in at most two units, largest first: `850ms`, `42s`, `3m 20s`, `5h 2m`, `7d`.
pub(crate) fn format_span(ms: u64) -> String {
    let units = [(DAY, "d"), (HOUR, "h"), (MINUTE, "m"), (SECOND, "s")];
    let Some(i) = units.iter().position(|(size, _)| ms >= *size) else {
        return format!("{ms}ms");
    };
    let (size, name) = units[i];
    let whole = format!("{}{name}", ms / size);
    match units.get(i + 1) {
        Some((next, next_name)) if ms % size / next > 0 => {
            format!("{whole} {}{next_name}", ms % size / next)
        }
        _ => whole,
    }
}

/// How far ahead of the system clock `--now` may be for a command that writes: 5 min.
pub(crate) const NOW_AHEAD_LIMIT_MS: u64 = 5 * MINUTE;

/// The wall clock, or `--now` when given: `--now` replaces the clock for the whole run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    fixed: Option<Timestamp>,
}

impl Clock {
    /// A clock that reads `fixed` when given, the system time otherwise.
    pub(crate) fn new(fixed: Option<Timestamp>) -> Clock {
        Clock { fixed }
    }

    /// Refuses a `--now` more than [`NOW_AHEAD_LIMIT_MS`] ahead of `system` for a command
    /// that writes: the store would carry it to every later write as its clock floor, and
    /// a sweep at it deletes outcomes whose retention has not ended, so the next retry
    /// runs again. Reads, and a `--now` in the past, are free.
    pub(crate) fn check_for_write(self, system: Timestamp) -> Result<(), String> {
        let Some(fixed) = self.fixed else {
            return Ok(());
        };
        let ahead = fixed.millis_since(system);
        if ahead <= NOW_AHEAD_LIMIT_MS {
            return Ok(());
        }
        Err(format!(
            "--now: {} is {} ahead of the system clock ({}); a command that writes accepts at most 5m ahead, since the store keeps the latest time a write used as its clock floor and a sweep would delete outcomes whose retention has not ended (read commands take any --now)",
            format_instant(fixed),
            format_span(ahead),
            format_instant(system)
        ))
    }

    /// The current time.
    /// True when `--now` replaced the clock.
    pub(crate) fn is_fixed(self) -> bool {
        self.fixed.is_some()
    }

    pub(crate) fn now(self) -> Timestamp {
        self.fixed.unwrap_or_else(idem_store::now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_now_far_ahead_is_refused_for_writes_only_past_five_minutes() {
        let system = Timestamp(1_700_000_000_000);
        assert!(Clock::new(None).check_for_write(system).is_ok());
        let at = |ms: u64| Clock::new(Some(Timestamp(ms)));
        assert!(at(system.0 - 365 * DAY).check_for_write(system).is_ok());
        assert!(at(system.0 + 5 * MINUTE).check_for_write(system).is_ok());
        let refused = at(system.0 + 5 * MINUTE + 1)
            .check_for_write(system)
            .unwrap_err();
        assert!(refused.starts_with("--now: "), "{refused}");
        assert!(
            refused.contains("5m 0s ahead") || refused.contains("5m ahead"),
            "{refused}"
        );
    }

    #[test]
    fn durations_take_every_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("15m"), Ok(900_000));
        assert_eq!(parse_duration("24h"), Ok(86_400_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        for bad in [
            "",
            "30",
            "s",
            "1.5s",
            "30 s",
            "-1s",
            "30sec",
            "1w",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            parse_duration("0s").unwrap_err(),
            "zero; must be at least 1ms"
        );
        assert!(
            parse_duration("30")
                .unwrap_err()
                .contains("500ms, 30s, 15m, 24h or 7d")
        );
    }

    #[test]
    fn instants_round_trip_through_rfc3339() {
        let cases = [
            ("1970-01-01T00:00:00Z", 0),
            ("2025-03-01T12:00:00Z", 1_740_830_400_000),
            ("2024-02-29T23:59:59.999Z", 1_709_251_199_999),
            ("2000-01-01T00:00:00.5Z", 946_684_800_500),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_instant(text), Ok(Timestamp(ms)), "{text}");
        }
        assert_eq!(
            format_instant(Timestamp(1_709_251_199_999)),
            "2024-02-29T23:59:59.999Z"
        );
        assert_eq!(
            format_instant(Timestamp(946_684_800_500)),
            "2000-01-01T00:00:00.500Z"
        );
        assert_eq!(
            format_instant(Timestamp(1_740_830_400_000)),
            "2025-03-01T12:00:00Z"
        );
        for ms in (0..4_000_000_000_000u64).step_by(77_777_777_777) {
            assert_eq!(
                parse_instant(&format_instant(Timestamp(ms))),
                Ok(Timestamp(ms))
            );
        }
    }

    #[test]
    fn instants_take_offsets_and_integers() {
        assert_eq!(
            parse_instant("2025-03-01T14:00:00+02:00"),
            parse_instant("2025-03-01T12:00:00Z")
        );
        assert_eq!(
            parse_instant("2025-03-01t11:30:00-00:30"),
            parse_instant("2025-03-01T12:00:00Z")
        );
        assert_eq!(
            parse_instant("1740830400000"),
            Ok(Timestamp(1_740_830_400_000))
        );
        for bad in [
            "2025-02-29T00:00:00Z",
            "2025-03-01T24:00:00Z",
            "2025-03-01T12:00:00",
            "2025-03-01",
            "1969-12-31T23:59:59Z",
            "yesterday",
            "-5",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn spans_use_two_units_at_most() {
        assert_eq!(format_span(850), "850ms");
        assert_eq!(format_span(42_000), "42s");
        assert_eq!(format_span(200_000), "3m 20s");
        assert_eq!(format_span(3 * HOUR + 59_000), "3h");
        assert_eq!(format_span(7 * DAY), "7d");
        assert_eq!(format_span(DAY + 2 * HOUR), "1d 2h");
    }
}
