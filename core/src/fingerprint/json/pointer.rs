//! Ignored paths: RFC 6901 JSON Pointers with the wildcard `*`, matched against names in
//! their canonical (escaped) form.

use alloc::string::String;
use alloc::vec::Vec;

use super::JsonError;
use super::written::write_char;

/// One reference token of an ignored path.
pub(super) enum Token {
    /// `*`: every member or element.
    Any,
    /// A member name, or an array index when it is one.
    Name {
        /// The name as a canonical string writes it, without its quotes: equal names have
        /// equal canonical forms, so a member matches when its written name is this.
        escaped: String,
        /// The RFC 6901 array index the token spells (`0`, or digits without a leading
        /// zero), if it spells one.
        index: Option<usize>,
    },
}

impl Token {
    /// Whether the token matches a member whose name is written `escaped`.
    pub(super) fn matches_name(&self, escaped: &str) -> bool {
        match self {
            Token::Any => true,
            Token::Name { escaped: name, .. } => name == escaped,
        }
    }

    /// Whether the token matches the array element at `index`.
    pub(super) fn matches_index(&self, index: usize) -> bool {
        match self {
            Token::Any => true,
            Token::Name { index: at, .. } => *at == Some(index),
        }
    }
}

/// The tokens of `path`, which must be a non-empty RFC 6901 pointer.
pub(super) fn parse(path: &str) -> Result<Vec<Token>, JsonError> {
    if path.is_empty() {
        return Err(JsonError::WholeDocumentPath);
    }
    let invalid = |reason| JsonError::InvalidPath {
        path: path.into(),
        reason,
    };
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("must be empty or start with '/'"))?;
    rest.split('/')
        .map(|raw| {
            if raw == "*" {
                return Ok(Token::Any);
            }
            let mut escaped = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                let c = match c {
                    '~' => match chars.next() {
                        Some('0') => '~',
                        Some('1') => '/',
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    },
                    c => c,
                };
                write_char(c, &mut escaped);
            }
            let digits = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
            let canonical = raw == "0" || !raw.starts_with('0');
            let index = if digits && canonical {
                raw.parse().ok()
            } else {
                None
            };
            Ok(Token::Name { escaped, index })
        })
        .collect()
}
