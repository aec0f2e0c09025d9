//! Text quoted inside error messages.
//!
//! Rust's `{:?}` on a `str` would do, but it carries Unicode tables (which characters are
//! printable, which extend a grapheme) that cost the browser package about 8 KB of wasm.
//! [`Quoted`] writes the same text for everything an error message is likely to quote.

use core::fmt::{self, Write as _};

/// `text` between double quotes, written as `{:?}` writes a `str` except for characters
/// beyond ASCII that `{:?}` escapes without being control characters (zero-width and
/// other format characters, unassigned code points, a leading combining mark): those are
/// written as they are. `"` and `\` get a backslash; tab, line feed, carriage return and
/// NUL are `\t`, `\n`, `\r`, `\0`; the other control characters are `\u{…}` in hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\t' => f.write_str("\\t")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\0' => f.write_str("\\0")?,
                c if c.is_control() => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn writes_what_debug_writes_for_text_in_messages() {
        for text in [
            "",
            "plain",
            "say \"hi\"",
            "back\\slash",
            "tab\tnl\ncr\rnul\0",
            "bell\u{7}esc\u{1b}del\u{7f}c1\u{85}",
            "caf\u{e9} \u{20ac} \u{1f600} \u{5b57}",
            "'single'",
        ] {
            assert_eq!(format!("{}", Quoted(text)), format!("{text:?}"), "{text:?}");
        }
    }

    #[test]
    fn writes_other_unicode_as_it_is() {
        // `{:?}` would write "\u{200b}": a format character, not a control character.
        assert_eq!(format!("{}", Quoted("a\u{200b}b")), "\"a\u{200b}b\"");
    }
}
