//! Idempotency keys of new intents: UUIDv7 strings (RFC 9562 §5.7) from injected time and
//! random bytes.

use alloc::string::String;

use crate::Timestamp;

/// Length of a key: 32 hex digits and 4 hyphens.
pub const KEY_LEN: usize = 36;

/// The UUIDv7 of `now` and `random`, as 36 lower-case characters
/// (`xxxxxxxx-xxxx-7xxx-Vxxx-xxxxxxxxxxxx`, V one of 8, 9, a, b).
///
/// The 16 bytes are `random` with the low 48 bits of `now` (milliseconds, big-endian)
/// written over bytes 0–5, the version `7` over the high nibble of byte 6 and the variant
/// `0b10` over the two high bits of byte 8: 74 of the random bits survive. Keys made in
/// later milliseconds sort after earlier ones, as strings too.
///
/// Never reads a clock and never draws randomness: give it the caller's time and 16 fresh
/// random bytes (`crypto.getRandomValues`, `getrandom`).
#[must_use]
pub fn uuid_v7(now: Timestamp, random: [u8; 16]) -> String {
    let mut bytes = random;
    let millis = now.as_millis().to_be_bytes();
    bytes[..6].copy_from_slice(&millis[2..]);
    bytes[6] = 0x70 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);

    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(KEY_LEN);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}
