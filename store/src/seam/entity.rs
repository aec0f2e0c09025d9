//! The vocabulary of the layers after the key (docs/design.md §8) that every engine
//! shares: an entity's address, what a claim of a business value found, and the rules
//! of a claimed value and its holder.

use core::future::Future;
use std::fmt;

use idem_core::{Entity, EntityDecision, IdError, Machine, RecordId, Timestamp};

use crate::error::Error;

/// The address of an entity: tenant, kind (the kind of business object: `payment`,
/// `order`), id. The tenant and the kind follow the rules of a record's tenant and
/// operation, the id the rule of a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityId(pub(crate) RecordId);

impl EntityId {
    /// A checked entity address.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] naming `tenant`, `kind` or `id` and its rule.
    pub fn new(tenant: &str, kind: &str, id: &str) -> Result<EntityId, Error> {
        RecordId::new(tenant, kind, id)
            .map(EntityId)
            .map_err(|e| renamed(&e, ["tenant", "kind", "id"]))
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &str {
        self.0.tenant()
    }

    /// The kind of business object.
    #[must_use]
    pub fn kind(&self) -> &str {
        self.0.operation()
    }

    /// The object's id.
    #[must_use]
    pub fn id(&self) -> &str {
        self.0.key()
    }

    pub(crate) fn to_key_bytes(&self) -> Vec<u8> {
        self.0.to_key_bytes()
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// An id error with the caller's names for the three parts.
pub(crate) fn renamed(error: &IdError, names: [&'static str; 3]) -> Error {
    let field = match error.field() {
        idem_core::Field::Tenant => names[0],
        idem_core::Field::Operation => names[1],
        _ => names[2],
    };
    Error::Name {
        field,
        problem: error.problem().to_string(),
    }
}

/// What a claim of a business value found ([`crate::entity::Entities::claim_unique`], and
/// each engine's `claim_unique_in`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a taken value must not be used"]
pub enum Uniqueness {
    /// The value is this holder's (now, or already before: claiming again is harmless).
    Claimed,
    /// Another holder has the value.
    Taken {
        /// Who holds it.
        by: String,
    },
}

/// The key of a claimed value, checked: tenant, scope (the operation rule) and value
/// (the key rule).
pub(crate) fn unique_key(tenant: &str, scope: &str, value: &str) -> Result<Vec<u8>, Error> {
    RecordId::new(tenant, scope, value)
        .map(|id| id.to_key_bytes())
        .map_err(|e| renamed(&e, ["tenant", "scope", "value"]))
}

/// Checks a claimed value's tenant, scope and value (the rules of a record's tenant,
/// operation and key).
pub(crate) fn check_unique(tenant: &str, scope: &str, value: &str) -> Result<(), Error> {
    unique_key(tenant, scope, value).map(drop)
}

/// Checks a holder: 1 to 255 bytes.
pub(crate) fn check_holder(by: &str) -> Result<(), Error> {
    if by.is_empty() || by.len() > 255 {
        return Err(Error::Name {
            field: "by",
            problem: format!("{} bytes, needs 1 to 255", by.len()),
        });
    }
    Ok(())
}

/// The layers after the key as an engine offers them on their own, outside a caller's
/// transaction (docs/design.md §8): entities moved by a state machine with a version
/// check, and business values claimed once. Each call commits on its own. Inside a
/// caller's transaction (with the key's record and the business write) each engine has
/// its own `transition_in` and `claim_unique_in`, since the transaction is the engine's.
///
/// As in [`crate::Receiver`], `now` is the caller's time; a server engine uses its
/// database's clock instead.
pub trait Entities: Send + Sync + 'static {
    /// Moves the entity `id` to `to` when `machine` allows it and, with
    /// `expected_version`, when its version is that one. Only
    /// [`EntityDecision::Applied`] writes.
    fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> impl Future<Output = Result<EntityDecision, Error>> + Send;

    /// The entity `id`, if it has made a move.
    fn get_entity(
        &self,
        id: &EntityId,
    ) -> impl Future<Output = Result<Option<Entity>, Error>> + Send;

    /// Entities of `kind` (in `state`, when given), by state, then by id (tenant, then
    /// id), each in the order of its key bytes (a shorter name first, then byte by
    /// byte), at most `limit`.
    fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(EntityId, Entity)>, Error>> + Send;

    /// Claims `value` in `scope` for `by`: [`Uniqueness::Claimed`] when it is `by`'s now
    /// (or was already), [`Uniqueness::Taken`] when another holder has it.
    fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> impl Future<Output = Result<Uniqueness, Error>> + Send;

    /// Gives `value` in `scope` back; true when it was claimed.
    fn release_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Who holds `value` in `scope`, if anyone.
    fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send;
}
