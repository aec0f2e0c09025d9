//! The `idem` CLI's parsers of durations and instants on arbitrary text: no panic; a
//! duration is at least 1 ms and reads back from its own `ms` form; an instant printed
//! as RFC 3339 parses back to itself.

use super::parse::{format_instant, parse_duration, parse_instant};

pub fn parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ms) = parse_duration(text) {
        assert!(ms >= 1, "{text:?} is a duration of 0 ms");
        assert_eq!(parse_duration(&format!("{ms}ms")), Ok(ms), "{text:?}");
    }
    if let Ok(at) = parse_instant(text) {
        let printed = format_instant(at);
        // Years past 9999 print with more digits than RFC 3339 has.
        if printed.len() >= 20 && printed.as_bytes()[4] == b'-' {
            assert_eq!(
                parse_instant(&printed),
                Ok(at),
                "{text:?} printed {printed:?}"
            );
        }
        assert_eq!(parse_instant(&at.0.to_string()), Ok(at), "{text:?}");
    }
}
