//! One-time tokens on Redis: not offered yet. Each call is refused by name
//! ([`Error::Unsupported`]), with nothing read or written; tokens are offered by the
//! file, PostgreSQL and MariaDB.

use idem_core::protocol::Decision;
use idem_core::token::Issue;
use idem_core::{Fingerprint, IssuedToken, RecordId, Timestamp};

use super::RedisStore;
use crate::error::Error;
use crate::seam::report::{Consumed, SweepReport};
use crate::seam::token::Tokens;

/// The refusal of `what` on this engine.
fn refused(what: &'static str) -> Error {
    Error::Unsupported {
        what,
        engine: "redis",
        hint: "a store file, PostgreSQL and MariaDB offer it",
    }
}

impl Tokens for RedisStore {
    async fn issue_token(
        &self,
        _tenant: &str,
        _operation: &str,
        _ttl_ms: u64,
        _intent_id: Option<&str>,
        _random: [u8; 16],
        _now: Timestamp,
    ) -> Result<Issue, Error> {
        Err(refused("token issue"))
    }

    async fn consume(
        &self,
        _id: &RecordId,
        _fingerprint: Fingerprint,
        _now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        Err(refused("token consume"))
    }

    async fn get_token(&self, _id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        Err(refused("token get"))
    }

    async fn sweep_tokens(&self, _now: Timestamp, _limit: usize) -> Result<SweepReport, Error> {
        Err(refused("token sweep"))
    }
}
