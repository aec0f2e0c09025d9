//! Strings as canonical text writes them: writing one character, and reading a written
//! name back, to compare names in RFC 8785 order without keeping them unescaped.

use alloc::string::String;
use core::cmp::Ordering;

/// Writes `c` as RFC 8785 §3.2.2.2 does inside a string: short escapes, `\u00xx` for
/// other controls, else the character itself.
pub(super) fn write_char(c: char, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\u{c}' => out.push_str("\\f"),
        '\r' => out.push_str("\\r"),
        c if c < ' ' => {
            let code = c as usize; // below 0x20
            out.push_str("\\u00");
            out.push(char::from(HEX[code >> 4]));
            out.push(char::from(HEX[code & 0xf]));
        }
        c => out.push(c),
    }
}

/// Orders two names as RFC 8785 §3.2.3 does, by their UTF-16 code units; each is given
/// as written, from just after its opening quote.
pub(super) fn compare_names(a: &str, b: &str) -> Ordering {
    name_chars(a)
        .map(utf16_rank)
        .cmp(name_chars(b).map(utf16_rank))
}

/// A character's rank in UTF-16 order: the code point, except that U+E000 to U+FFFF
/// (one code unit above the surrogates) rank after everything from U+10000 (a pair that
/// starts with a high surrogate). Comparing ranks character by character compares the
/// code units.
fn utf16_rank(c: char) -> u32 {
    let code = u32::from(c);
    if (0xE000..=0xFFFF).contains(&code) {
        code + 0x11_0000
    } else {
        code
    }
}

/// The characters of a string written in canonical form, from just after its opening
/// quote to its closing quote, unescaped.
pub(super) fn name_chars(written: &str) -> impl Iterator<Item = char> + '_ {
    let mut chars = written.chars();
    core::iter::from_fn(move || match chars.next()? {
        '"' => None,
        '\\' => Some(match chars.next()? {
            'b' => '\u{8}',
            't' => '\t',
            'n' => '\n',
            'f' => '\u{c}',
            'r' => '\r',
            'u' => {
                let code =
                    (0..4).try_fold(0, |code, _| Some(code * 16 + chars.next()?.to_digit(16)?))?;
                char::from_u32(code)?
            }
            escaped => escaped, // '"' or '\\'
        }),
        c => Some(c),
    })
}
