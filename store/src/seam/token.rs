//! One-time tokens (docs/design.md §9) as every engine offers them: the trait, and the
//! rule of a token's key.

use core::future::Future;

use idem_core::protocol::Decision;
use idem_core::token::Issue;
use idem_core::{Fingerprint, IssuedToken, RecordId, Timestamp, Token};

use crate::error::Error;
use crate::seam::report::{Consumed, SweepReport};

/// One-time tokens: issued by the store, consumed once, swept after they expire. As in
/// [`crate::Receiver`], `now` is the caller's time; a server engine uses its database's
/// clock instead. Consuming a token inside the caller's own transaction
/// (`consume_execute`) is each engine's own, since the transaction is the engine's.
pub trait Tokens: Send + Sync + 'static {
    /// Issues a token for `(tenant, operation)`, valid for `ttl_ms`, made of `random`
    /// (128 bits from a secure source); with `intent_id`, the token issued earlier for
    /// that intent while it is unused and unexpired ([`Issue::Existing`]).
    fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> impl Future<Output = Result<Issue, Error>> + Send;

    /// Uses the token in `id`'s key once, as a begin: [`Consumed::Admitted`] with the
    /// begin's decision, or the token's refusal.
    fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> impl Future<Output = Result<Consumed<Decision>, Error>> + Send;

    /// The token in `id`'s key as issued, if it is kept.
    fn get_token(
        &self,
        id: &RecordId,
    ) -> impl Future<Output = Result<Option<IssuedToken>, Error>> + Send;

    /// Deletes tokens expired at `now`, at most `limit`.
    fn sweep_tokens(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<SweepReport, Error>> + Send;
}

/// The token in `id`'s key, validated.
pub(crate) fn token_of(id: &RecordId) -> Result<Token, Error> {
    Ok(Token::parse(id.key())?)
}
