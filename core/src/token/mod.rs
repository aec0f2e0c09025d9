//! One-time tokens: the rules of issuing a [`Token`] and of admitting its first use.
//!
//! A token is a key that must exist before use. The server issues it (128 random bits,
//! injected by the caller, written as 22 characters of URL-safe base64 without padding)
//! for one `(tenant, operation)`, with a time to live. Consuming it is the receiver
//! protocol's `begin` on the record id `(tenant, operation, token)`, after [`admit`]:
//!
//! | token entry | record of its use | answer |
//! |---|---|---|
//! | any | live, or past its retention while its tombstone lasts | the protocol decides: claim, replay, conflict, in progress, unknown, forgotten |
//! | none | none, or past its tombstone's time too | [`TokenRefusal::NotIssued`] |
//! | `now >= expires_at` | none, or past its tombstone's time too | [`TokenRefusal::Expired`] |
//! | live | none | the protocol claims |
//!
//! A settled record past its retention stands for its tombstone, as in the protocol's
//! `begin`: a used token is answered Forgotten while the tombstone lasts, whether or not
//! a sweep has replaced the record yet, and never Expired, which would say it was
//! never used.
//!
//! So a retry of a consumed token with the same fingerprint is replayed, and another
//! fingerprint is a conflict, exactly as for any key. A token's ttl is at most the
//! store's retention ([`Config::success_retention_ms`] and
//! [`Config::failure_retention_ms`]): the record of a use, settled no earlier than the
//! token was issued, then outlives the token, and a used token can never be claimed a
//! second time.
//!
//! With an intent id, issuing is idempotent too: while the token issued for that intent
//! is unused and unexpired, issuing again returns it ([`Issue::Existing`]).

use alloc::string::String;
use core::fmt;
use serde::{Deserialize, Serialize};

use crate::encoding::{self, DecodeError};
use crate::id::MAX_LEN;
use crate::{Config, Record, Timestamp};

/// Length of a token's text: 128 bits in URL-safe base64 without padding.
pub const TOKEN_LEN: usize = 22;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A one-time token's text: 22 characters of URL-safe base64 (`A-Z a-z 0-9 - _`) that
/// decode to exactly 128 bits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(String);

impl Token {
    /// The token made of 128 random bits, which the caller draws from a secure source.
    #[must_use]
    pub fn from_random(random: [u8; 16]) -> Token {
        let bits = u128::from_be_bytes(random);
        let mut text = String::with_capacity(TOKEN_LEN);
        for i in 0..TOKEN_LEN - 1 {
            let sextet = (bits >> (122 - 6 * i)) & 0x3f;
            text.push(char::from(ALPHABET[sextet as usize]));
        }
        // The last character carries the two lowest bits, then four zero bits.
        text.push(char::from(ALPHABET[((bits & 0x3) << 4) as usize]));
        Token(text)
    }

    /// Validates a token's text.
    ///
    /// # Errors
    ///
    /// [`TokenError::Length`], [`TokenError::Alphabet`] or [`TokenError::NotCanonical`].
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let chars = text.chars().count();
        if chars != TOKEN_LEN || text.len() != TOKEN_LEN {
            return Err(TokenError::Length { chars });
        }
        let mut bits: u128 = 0;
        for (offset, byte) in text.bytes().enumerate() {
            let sextet = ALPHABET
                .iter()
                .position(|&a| a == byte)
                .ok_or(TokenError::Alphabet {
                    offset,
                    found: char::from(byte),
                })?;
            if offset == TOKEN_LEN - 1 {
                if sextet & 0xf != 0 {
                    return Err(TokenError::NotCanonical);
                }
                bits = (bits << 2) | (sextet >> 4) as u128;
            } else {
                bits = (bits << 6) | sextet as u128;
            }
        }
        debug_assert_eq!(Token::from_random(bits.to_be_bytes()).0, text);
        Ok(Token(String::from(text)))
    }

    /// The token's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The persisted bytes of this token, as the value of an intent's entry.
    #[must_use]
    pub fn encode(&self) -> alloc::vec::Vec<u8> {
        encoding::encode(&self.0)
    }

    /// Decodes bytes made by [`Token::encode`].
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format or malformed bytes, or text that is not a
    /// token.
    pub fn decode(bytes: &[u8]) -> Result<Token, DecodeError> {
        let text: String = encoding::decode(bytes, "token")?;
        Token::parse(&text).map_err(|_| DecodeError::Invalid { what: "token" })
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the store keeps about an issued token, under `(tenant, operation, token)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedToken {
    /// When it was issued.
    pub issued_at: Timestamp,
    /// From this time on, an unused token is refused ([`TokenRefusal::Expired`]) and may
    /// be swept.
    pub expires_at: Timestamp,
    /// The intent it was issued for, if the issuer named one.
    pub intent_id: Option<String>,
}

impl IssuedToken {
    /// The persisted bytes: the format-version byte, then postcard.
    #[must_use]
    pub fn encode(&self) -> alloc::vec::Vec<u8> {
        encoding::encode(self)
    }

    /// Decodes bytes made by [`IssuedToken::encode`].
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format or malformed bytes.
    pub fn decode(bytes: &[u8]) -> Result<IssuedToken, DecodeError> {
        encoding::decode(bytes, "issued token")
    }

    /// True when the token can no longer be used for the first time at `now`.
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        now >= self.expires_at
    }
}

/// Input to issuing or consuming a token that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// The token is not 22 characters long.
    Length {
        /// Its length in characters.
        chars: usize,
    },
    /// The token holds a character outside URL-safe base64.
    Alphabet {
        /// Byte offset of the first offending character.
        offset: usize,
        /// The offending character (its first byte, for a non-ASCII one).
        found: char,
    },
    /// The last character sets bits beyond the 128 a token holds.
    NotCanonical,
    /// A ttl of 0 ms: the token would expire as it is issued.
    ZeroTtl,
    /// A ttl longer than the store's retention.
    TtlTooLong {
        /// The ttl asked for, in ms.
        ttl_ms: u64,
        /// The longest allowed, in ms.
        max_ms: u64,
    },
    /// The intent id is empty, longer than 255 bytes, or not printable ASCII.
    IntentId {
        /// Its length in bytes.
        len: usize,
    },
}

impl TokenError {
    /// The field the error is about: `"token"`, `"ttl"` or `"intent"`.
    #[must_use]
    pub const fn field(&self) -> &'static str {
        match self {
            TokenError::Length { .. } | TokenError::Alphabet { .. } | TokenError::NotCanonical => {
                "token"
            }
            TokenError::ZeroTtl | TokenError::TtlTooLong { .. } => "ttl",
            TokenError::IntentId { .. } => "intent",
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::Length { chars } => write!(
                f,
                "token: {chars} characters, expected {TOKEN_LEN} (128 bits in URL-safe base64 without padding)"
            ),
            TokenError::Alphabet { offset, found } => write!(
                f,
                "token: {found:?} at offset {offset} is outside the URL-safe base64 alphabet (A-Z a-z 0-9 - _)"
            ),
            TokenError::NotCanonical => f.write_str(
                "token: the last character sets bits beyond 128 (it must be one of A Q g w)",
            ),
            TokenError::ZeroTtl => f.write_str("ttl: 0 ms, must be at least 1 ms"),
            TokenError::TtlTooLong { ttl_ms, max_ms } => write!(
                f,
                "ttl: {ttl_ms} ms, at most the store's retention of {max_ms} ms (the record of a token's use must outlive the token)"
            ),
            TokenError::IntentId { len } => write!(
                f,
                "intent: {len} bytes, needs 1 to {MAX_LEN} bytes of printable ASCII (0x20-0x7E)"
            ),
        }
    }
}

impl core::error::Error for TokenError {}

/// Why a token cannot be used: it is not the key of any use yet, and cannot become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenRefusal {
    /// No such token was issued for this tenant and operation (or it expired and was
    /// swept).
    NotIssued,
    /// The token's ttl passed before its first use.
    Expired {
        /// When it expired.
        expires_at: Timestamp,
    },
}

impl fmt::Display for TokenRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenRefusal::NotIssued => {
                f.write_str("token: not issued for this tenant and operation")
            }
            TokenRefusal::Expired { expires_at } => write!(
                f,
                "token: expired at {} ms before its first use",
                expires_at.as_millis()
            ),
        }
    }
}

/// May a consume of a token go on to the protocol's `begin`? `entry` is the issued
/// token under the consumed `(tenant, operation, token)`, `record` the record under the
/// same id, `config` the store's (its tombstone retention). See the module's table.
///
/// # Errors
///
/// [`TokenRefusal`] when the token was never issued here or expired unused.
pub fn admit(
    entry: Option<&IssuedToken>,
    record: Option<&Record>,
    now: Timestamp,
    config: &Config,
) -> Result<(), TokenRefusal> {
    // A settled record past its retention stands for its tombstone (`protocol::begin`).
    let lasts = |record: &Record| {
        !record.is_expired(now)
            || record
                .tombstone(config.tombstone_retention_ms)
                .is_some_and(|tombstone| !tombstone.is_expired(now))
    };
    if record.is_some_and(lasts) {
        return Ok(());
    }
    match entry {
        None => Err(TokenRefusal::NotIssued),
        Some(entry) if entry.is_expired(now) => Err(TokenRefusal::Expired {
            expires_at: entry.expires_at,
        }),
        Some(_) => Ok(()),
    }
}

/// The longest ttl a store with `config` issues: its shorter retention.
#[must_use]
pub fn max_ttl_ms(config: &Config) -> u64 {
    config.success_retention_ms.min(config.failure_retention_ms)
}

/// Validates a ttl against the store's retention.
///
/// # Errors
///
/// [`TokenError::ZeroTtl`] or [`TokenError::TtlTooLong`].
pub fn check_ttl(ttl_ms: u64, config: &Config) -> Result<(), TokenError> {
    let max_ms = max_ttl_ms(config);
    if ttl_ms == 0 {
        Err(TokenError::ZeroTtl)
    } else if ttl_ms > max_ms {
        Err(TokenError::TtlTooLong { ttl_ms, max_ms })
    } else {
        Ok(())
    }
}

/// Validates an intent id: 1–255 bytes of printable ASCII, as a key.
///
/// # Errors
///
/// [`TokenError::IntentId`].
pub fn check_intent_id(intent_id: &str) -> Result<(), TokenError> {
    let len = intent_id.len();
    if (1..=MAX_LEN).contains(&len) && intent_id.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        Ok(())
    } else {
        Err(TokenError::IntentId { len })
    }
}

/// The token an issue answers, and whether it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the token is what the issuer hands out"]
pub enum Issue {
    /// The token issued earlier for the same intent, unused and unexpired: answer it,
    /// write nothing.
    Existing {
        /// The token.
        token: Token,
        /// Its entry, as stored.
        entry: IssuedToken,
    },
    /// A new token: store `entry` under it (and the intent's entry, when there is an
    /// intent id), then answer it.
    New {
        /// The token.
        token: Token,
        /// Its entry, to store.
        entry: IssuedToken,
    },
}

impl Issue {
    /// The token answered.
    #[must_use]
    pub fn token(&self) -> &Token {
        match self {
            Issue::Existing { token, .. } | Issue::New { token, .. } => token,
        }
    }

    /// Its entry.
    #[must_use]
    pub fn entry(&self) -> &IssuedToken {
        match self {
            Issue::Existing { entry, .. } | Issue::New { entry, .. } => entry,
        }
    }
}

/// The token issued earlier for the same intent id, as the store found it.
#[derive(Debug, Clone, Copy)]
pub struct Earlier<'a> {
    /// The token.
    pub token: &'a Token,
    /// Its entry, if it is still stored (it may have been swept).
    pub entry: Option<&'a IssuedToken>,
    /// True when a record of its use exists.
    pub used: bool,
}

/// Issues a token valid for `ttl_ms` from `now`, made of `random`, or answers the one
/// issued earlier for the same intent while it is unused and unexpired.
///
/// # Errors
///
/// [`TokenError`] for a ttl of 0 or above the retention, or an invalid intent id.
pub fn issue(
    earlier: Option<Earlier<'_>>,
    ttl_ms: u64,
    intent_id: Option<&str>,
    random: [u8; 16],
    now: Timestamp,
    config: &Config,
) -> Result<Issue, TokenError> {
    check_ttl(ttl_ms, config)?;
    if let Some(intent_id) = intent_id {
        check_intent_id(intent_id)?;
    }
    if let Some(Earlier {
        token,
        entry: Some(entry),
        used: false,
    }) = earlier
    {
        if !entry.is_expired(now) {
            return Ok(Issue::Existing {
                token: token.clone(),
                entry: entry.clone(),
            });
        }
    }
    Ok(Issue::New {
        token: Token::from_random(random),
        entry: IssuedToken {
            issued_at: now,
            expires_at: now.plus_millis(ttl_ms),
            intent_id: intent_id.map(String::from),
        },
    })
}

#[cfg(test)]
mod tests;
