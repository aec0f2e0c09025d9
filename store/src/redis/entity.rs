//! The layers after the key on Redis (docs/design.md §8): entities moved by a state
//! machine with a version check, and business values claimed once. idem-core decides
//! each move ([`idem_core::machine::transition`]) on the entity and the server's clock
//! read together (`idem_read`); the engine writes it with `idem_swap`, which re-checks
//! the entity's bytes and keeps its indexes, and reads again when another writer was
//! first. Sweep never touches them.

use idem_core::machine::{self, Entity, EntityDecision, Machine};
use idem_core::{RecordId, Timestamp};

use super::RedisStore;
use super::two_phase::failed;
use crate::error::Error;
use crate::seam::entity::{Entities, EntityId, Uniqueness, check_holder, check_unique, unique_key};

/// No member: an index left as it is.
const NONE: &[u8] = &[];

/// How many times a move reads and tries to write before it gives up
/// ([`Error::Contended`]): each loss means another writer moved the entity first.
const MOVE_ATTEMPTS: u32 = 16;

/// Every entity's address, in the order of their key bytes.
pub(super) const ENTITIES: &str = "{idem}:entities";

/// Every claimed value's key, in the order of its bytes.
pub(super) const UNIQUE: &str = "{idem}:unique";

/// The key of the entity at `id`'s key bytes.
pub(super) fn entity_key(id_bytes: &[u8]) -> Vec<u8> {
    [b"{idem}:e:".as_slice(), id_bytes].concat()
}

/// The key of the claimed value whose key bytes are `unique`.
pub(super) fn unique_value_key(unique: &[u8]) -> Vec<u8> {
    [b"{idem}:u:".as_slice(), unique].concat()
}

/// The index of the entities of `kind`.
fn kind_index(kind: &str) -> Vec<u8> {
    [b"{idem}:ek:".as_slice(), kind.as_bytes()].concat()
}

/// An entity's member in its kind's index: its state (length first, so that a shorter
/// state comes first), then its address's key bytes.
fn kind_member(state: &str, id: &EntityId) -> Vec<u8> {
    let mut member = vec![u8::try_from(state.len()).unwrap_or(u8::MAX)];
    member.extend_from_slice(state.as_bytes());
    member.extend_from_slice(&id.to_key_bytes());
    member
}

/// The address in a member of a kind's index.
fn id_of_member(member: &[u8]) -> Result<EntityId, Error> {
    let corrupt = || Error::Corrupt {
        detail: "an entity index holds a member that does not decode".into(),
    };
    let (&len, rest) = member.split_first().ok_or_else(corrupt)?;
    let id = rest.get(usize::from(len)..).ok_or_else(corrupt)?;
    id_of_bytes(id)
}

/// The address whose key bytes are `bytes`.
pub(super) fn id_of_bytes(bytes: &[u8]) -> Result<EntityId, Error> {
    RecordId::from_key_bytes(bytes)
        .map(EntityId)
        .map_err(|source| Error::Decode {
            what: "an entity's address".into(),
            source,
        })
}

/// The entity in `bytes` (empty: none), at `id`.
pub(super) fn entity_of(bytes: &[u8], id: &EntityId) -> Result<Option<Entity>, Error> {
    if bytes.is_empty() {
        return Ok(None);
    }
    Entity::decode(bytes)
        .map(Some)
        .map_err(|source| Error::Decode {
            what: format!("the entity {id}"),
            source,
        })
}

impl RedisStore {
    /// Writes `next` over the entity whose bytes were `seen` (`current` decoded), keeping
    /// the indexes; false when another writer was first.
    pub(super) async fn swap_entity(
        &self,
        id: &EntityId,
        seen: &[u8],
        current: Option<&Entity>,
        next: &Entity,
    ) -> Result<bool, Error> {
        let id_bytes = id.to_key_bytes();
        let mut conn = self.conn();
        let written: i64 = redis::cmd("FCALL")
            .arg("idem_swap")
            .arg(1)
            .arg(entity_key(&id_bytes))
            .arg(seen)
            .arg(next.encode())
            .arg(kind_index(id.kind()))
            .arg(
                current
                    .map(|e| kind_member(&e.state, id))
                    .unwrap_or_default(),
            )
            .arg(kind_member(&next.state, id))
            .arg(ENTITIES)
            .arg("")
            .arg(&id_bytes)
            .query_async(&mut conn)
            .await
            .map_err(failed("transition"))?;
        Ok(written == 1)
    }

    /// Writes `holder` as the holder of the claimed value `unique` where `seen` was (an
    /// empty `seen`: nobody; an empty `holder`: a release); false when it changed.
    pub(super) async fn swap_unique(
        &self,
        operation: &'static str,
        unique: &[u8],
        seen: &str,
        holder: &str,
    ) -> Result<bool, Error> {
        let mut conn = self.conn();
        let written: i64 = redis::cmd("FCALL")
            .arg("idem_swap")
            .arg(1)
            .arg(unique_value_key(unique))
            .arg(seen)
            .arg(holder)
            .arg(UNIQUE)
            .arg(if holder.is_empty() { unique } else { NONE })
            .arg(if holder.is_empty() { NONE } else { unique })
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        Ok(written == 1)
    }

    /// The holder of the claimed value `unique`, if anyone.
    pub(super) async fn holder_of(
        &self,
        operation: &'static str,
        unique: &[u8],
    ) -> Result<Option<String>, Error> {
        let mut conn = self.conn();
        redis::cmd("GET")
            .arg(unique_value_key(unique))
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))
    }
}

impl Entities for RedisStore {
    /// Moves the entity on the server's clock (never before its last move); `now` is not
    /// used.
    async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        _now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        let key = entity_key(&id.to_key_bytes());
        for _ in 0..MOVE_ATTEMPTS {
            let mut conn = self.conn();
            let (seen, now, _): (Vec<u8>, u64, u64) = redis::cmd("FCALL")
                .arg("idem_read")
                .arg(1)
                .arg(&key)
                .arg("")
                .query_async(&mut conn)
                .await
                .map_err(failed("transition"))?;
            let current = entity_of(&seen, id)?;
            let now = Timestamp(now).max(current.as_ref().map_or(Timestamp(0), |e| e.updated_at));
            let decision =
                machine::transition(machine, current.as_ref(), to, expected_version, now);
            let EntityDecision::Applied { entity } = &decision else {
                return Ok(decision);
            };
            if self
                .swap_entity(id, &seen, current.as_ref(), entity)
                .await?
            {
                return Ok(decision);
            }
            // Another writer moved the entity since it was read: decide again.
        }
        Err(Error::Contended {
            attempts: MOVE_ATTEMPTS,
        })
    }

    async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        let mut conn = self.conn();
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(entity_key(&id.to_key_bytes()))
            .query_async(&mut conn)
            .await
            .map_err(failed("get_entity"))?;
        entity_of(&bytes.unwrap_or_default(), id)
    }

    async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The members of one state start with it; the first member past them starts
        // with the prefix whose last byte is one higher (a length byte, or a byte of
        // UTF-8, which is never 0xff).
        let (from, to) = match state {
            Some(state) => {
                let mut prefix = vec![u8::try_from(state.len()).unwrap_or(u8::MAX)];
                prefix.extend_from_slice(state.as_bytes());
                let mut past = prefix.clone();
                if let Some(last) = past.last_mut() {
                    *last = last.saturating_add(1);
                }
                (
                    [b"[".as_slice(), &prefix].concat(),
                    [b"(".as_slice(), &past].concat(),
                )
            }
            None => (b"-".to_vec(), b"+".to_vec()),
        };
        let mut conn = self.conn();
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(kind_index(kind))
            .arg(from)
            .arg(to)
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.min(i64::MAX as usize))
            .query_async(&mut conn)
            .await
            .map_err(failed("list_entities"))?;
        let mut listed = Vec::with_capacity(members.len());
        for member in members {
            let id = id_of_member(&member)?;
            if let Some(entity) = self.get_entity(&id).await? {
                listed.push((id, entity));
            }
        }
        Ok(listed)
    }

    async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        let unique = unique_key(tenant, scope, value)?;
        check_holder(by)?;
        for _ in 0..MOVE_ATTEMPTS {
            match self.holder_of("claim_unique", &unique).await? {
                Some(holder) if holder == by => return Ok(Uniqueness::Claimed),
                Some(holder) => return Ok(Uniqueness::Taken { by: holder }),
                None => {
                    if self.swap_unique("claim_unique", &unique, "", by).await? {
                        return Ok(Uniqueness::Claimed);
                    }
                }
            }
        }
        Err(Error::Contended {
            attempts: MOVE_ATTEMPTS,
        })
    }

    async fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        let unique = unique_key(tenant, scope, value)?;
        for _ in 0..MOVE_ATTEMPTS {
            let Some(holder) = self.holder_of("release_unique", &unique).await? else {
                return Ok(false);
            };
            if self
                .swap_unique("release_unique", &unique, &holder, "")
                .await?
            {
                return Ok(true);
            }
        }
        Err(Error::Contended {
            attempts: MOVE_ATTEMPTS,
        })
    }

    async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        check_unique(tenant, scope, value)?;
        let unique = unique_key(tenant, scope, value)?;
        self.holder_of("unique_holder", &unique).await
    }
}
