//! The vocabulary of one-time tokens that every engine shares.

use idem_core::{RecordId, Token};

use crate::error::Error;

/// The token in `id`'s key, validated.
pub(crate) fn token_of(id: &RecordId) -> Result<Token, Error> {
    Ok(Token::parse(id.key())?)
}
