//! Time on the command line: durations (`30s`), instants (`--now`, RFC 3339) and ages.
//!
//! RFC 3339 is parsed and printed here by hand: the proleptic Gregorian calendar in UTC
//! is a few lines of arithmetic, and the CLI needs nothing else from a date library.

use idem_core::Timestamp;

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// The rule every duration flag follows, quoted in its errors.
const DURATION_RULE: &str = "a whole number and a unit, as in 500ms, 30s, 15m, 24h or 7d";

/// Parses a duration such as `500ms`, `30s`, `15m`, `24h` or `7d` into milliseconds.
/// Zero is refused: no lease, retention or wait of 0 ms can work.
///
/// # Errors
///
/// A message that states the rule; clap puts the flag's name in front of it.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let scale = match unit {
        "ms" => 1,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        "" if !number.is_empty() => return Err(format!("no unit; expected {DURATION_RULE}")),
        _ => return Err(format!("expected {DURATION_RULE}")),
    };
    if number.is_empty() {
        return Err(format!("no number; expected {DURATION_RULE}"));
    }
    let value: u64 = number
        .parse()
        .map_err(|_| format!("too large; expected {DURATION_RULE}"))?;
    let ms = value
        .checked_mul(scale)
        .ok_or_else(|| format!("too large; expected {DURATION_RULE}"))?;
    if ms == 0 {
        return Err("zero; must be at least 1ms".into());
    }
    Ok(ms)
}

/// Parses `--now`: RFC 3339 (`2025-03-01T12:00:00Z`, any offset, fractions down to the
/// millisecond) or an integer count of milliseconds since the Unix epoch.
///
/// # Errors
///
/// A message that states what was wrong and the accepted forms.
pub(crate) fn parse_instant(text: &str) -> Result<Timestamp, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Timestamp)
            .map_err(|_| "milliseconds since the epoch: too large for 64 bits".to_string());
    }
    parse_rfc3339(text).map_err(|why| {
        format!("{why}; expected RFC 3339 (2025-03-01T12:00:00Z) or milliseconds since the epoch")
    })
}

fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let shape = || "not a date-time".to_string();
    let year = digits(0, 4).ok_or_else(shape)?;
    let month = digits(5, 2).ok_or_else(shape)?;
    let day = digits(8, 2).ok_or_else(shape)?;
    let hour = digits(11, 2).ok_or_else(shape)?;
    let minute = digits(14, 2).ok_or_else(shape)?;
    let second = digits(17, 2).ok_or_else(shape)?;
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(shape());
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(format!("date {year:04}-{month:02}-{day:02} does not exist"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!(
            "time {hour:02}:{minute:02}:{second:02} is out of range"
        ));
    }
    let mut at = 19;
    let mut millis = 0i64;
    if b.get(at) == Some(&b'.') {
        let frac = b[at + 1..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if frac == 0 {
            return Err("a '.' with no fraction digits".into());
        }
        for (i, d) in b[at + 1..at + 1 + frac.min(3)].iter().enumerate() {
            millis += i64::from(d - b'0') * [100, 10, 1][i];
        }
        at += 1 + frac;
    }
    let offset_minutes = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if at + 6 == b.len() && b[at + 3] == b':' => {
            let h = digits(at + 1, 2).ok_or_else(shape)?;
            let m = digits(at + 4, 2).ok_or_else(shape)?;
            if h > 23 || m > 59 {
                return Err("offset out of range".into());
            }
            if sign == b'+' {
                h * 60 + m
            } else {
                -(h * 60 + m)
            }
        }
        _ => return Err("no time zone; end with Z or an offset such as +02:00".into()),
    };
    let days = days_from_civil(year, month, day);
    let ms = (((days * 24 + hour) * 60 + minute - offset_minutes) * 60 + second) * 1000 + millis;
    u64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| "before 1970-01-01T00:00:00Z".into())
}

/// Formats `at` as RFC 3339 in UTC, with milliseconds only when they are not zero.
pub(crate) fn format_instant(at: Timestamp) -> String {
    let ms = at.as_millis();
    let days = i64::try_from(ms / DAY).unwrap_or(i64::MAX);
    let (year, month, day) = civil_from_days(days);
    let rest = ms % DAY;
    let (h, m, s, frac) = (
        rest / HOUR,
        rest % HOUR / MINUTE,
        rest % MINUTE / SECOND,
        rest % SECOND,
    );
    if frac == 0 {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{frac:03}Z")
    }
}

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
    pub(crate) fn now(self) -> Timestamp {
        self.fixed.unwrap_or_else(idem_store::now)
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
