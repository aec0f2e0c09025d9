//! The layers after the key on Redis: not offered yet. Entities, claimed values and
//! tokens are refused by name ([`Error::Unsupported`]), with nothing read or written;
//! they are offered by the file, PostgreSQL and MariaDB.

use idem_core::protocol::Decision;
use idem_core::token::Issue;
use idem_core::{Entity, EntityDecision, Fingerprint, IssuedToken, Machine, RecordId, Timestamp};

use super::RedisStore;
use crate::error::Error;
use crate::seam::entity::{Entities, EntityId, Uniqueness};
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

impl Entities for RedisStore {
    async fn transition(
        &self,
        _machine: &Machine,
        _id: &EntityId,
        _to: &str,
        _expected_version: Option<u64>,
        _now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        Err(refused("entity transition"))
    }

    async fn get_entity(&self, _id: &EntityId) -> Result<Option<Entity>, Error> {
        Err(refused("entity get"))
    }

    async fn list_entities(
        &self,
        _kind: &str,
        _state: Option<&str>,
        _limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        Err(refused("entity list"))
    }

    async fn claim_unique(
        &self,
        _tenant: &str,
        _scope: &str,
        _value: &str,
        _by: &str,
    ) -> Result<Uniqueness, Error> {
        Err(refused("unique claim"))
    }

    async fn release_unique(
        &self,
        _tenant: &str,
        _scope: &str,
        _value: &str,
    ) -> Result<bool, Error> {
        Err(refused("unique release"))
    }

    async fn unique_holder(
        &self,
        _tenant: &str,
        _scope: &str,
        _value: &str,
    ) -> Result<Option<String>, Error> {
        Err(refused("unique holder"))
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
