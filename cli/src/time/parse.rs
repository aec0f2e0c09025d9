//! Parsing and printing instants and durations: the CLI's text forms of time.
//!
//! It depends on nothing but [`Timestamp`], so that the fuzz targets of `fuzz/` compile
//! it as it is (`#[path]`) and feed it arbitrary text.

use idem_core::Timestamp;

pub(crate) const SECOND: u64 = 1_000;
pub(crate) const MINUTE: u64 = 60 * SECOND;
pub(crate) const HOUR: u64 = 60 * MINUTE;
pub(crate) const DAY: u64 = 24 * HOUR;

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

/// Formats `at` as RFC 3339 in UTC, with milliseconds only when they are not zero
/// (`Timestamp`'s own display).
pub(crate) fn format_instant(at: Timestamp) -> String {
    at.to_string()
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
