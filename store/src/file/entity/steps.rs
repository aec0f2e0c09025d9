//! The layers after the key (docs/design.md §8): entities moved by a state machine with a
//! version check, and business values claimed once.
//!
//! | table | key | value |
//! |---|---|---|
//! | `idem.entities` | [`EntityId`] bytes (tenant, kind, id) | [`Entity::encode`] |
//! | `idem.entity.state` | kind, state (each behind its length byte) ++ entity bytes | `()` |
//! | `idem.unique` | (tenant, scope, value) bytes | the holder, UTF-8 |
//!
//! Every function that takes a transaction works inside [`crate::Store::execute`]'s
//! work, so the key's record, the business write and the state change commit together
//! or not at all. Sweep never touches these tables: an entity and a claimed value
//! outlive any retention.

use idem_core::machine::{self, Entity, EntityDecision, Machine};
use idem_core::{RecordId, Timestamp};
use redb::{
    ReadTransaction, ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction,
};

use crate::error::Error;
use crate::file::schema::open_read;
use crate::seam::entity::{EntityId, Uniqueness, check_holder, unique_key};
use crate::seam::transfer::{BusinessLine, EntityView, UniqueView};

/// Entity bytes → entity.
pub(crate) const ENTITIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.entities");
/// Kind and state, then entity bytes → ().
pub(crate) const ENTITY_STATES: TableDefinition<&[u8], ()> =
    TableDefinition::new("idem.entity.state");
/// (tenant, scope, value) bytes → holder.
pub(crate) const UNIQUE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.unique");

/// The index key of `entity` in state `state`.
fn state_key(kind: &str, state: &str, entity: &[u8]) -> Vec<u8> {
    let mut out = state_prefix(kind, Some(state));
    out.extend_from_slice(entity);
    out
}

/// The index prefix of a kind, and of a state of it.
fn state_prefix(kind: &str, state: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + kind.len() + state.map_or(0, str::len));
    for part in std::iter::once(kind).chain(state) {
        // Kinds and state names are at most 255 bytes (checked by their rules).
        out.push(u8::try_from(part.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(part.as_bytes());
    }
    out
}

fn decode_entity(key: &[u8], bytes: &[u8]) -> Result<Entity, Error> {
    Entity::decode(bytes).map_err(|source| Error::Decode {
        what: format!("entity {}", crate::file::schema::describe_key(key)),
        source,
    })
}

/// Decides and applies the move of `id` to `to` in `txn`.
pub(crate) fn transition_in(
    txn: &WriteTransaction,
    machine: &Machine,
    id: &EntityId,
    to: &str,
    expected_version: Option<u64>,
    now: Timestamp,
) -> Result<EntityDecision, Error> {
    let key = id.to_key_bytes();
    let mut entities: Table<&[u8], &[u8]> = txn.open_table(ENTITIES)?;
    let current = match entities.get(key.as_slice())? {
        Some(bytes) => Some(decode_entity(&key, bytes.value())?),
        None => None,
    };
    let decision = machine::transition(machine, current.as_ref(), to, expected_version, now);
    if let EntityDecision::Applied { entity } = &decision {
        let mut states = txn.open_table(ENTITY_STATES)?;
        if let Some(old) = &current {
            states.remove(state_key(id.kind(), &old.state, &key).as_slice())?;
        }
        states.insert(state_key(id.kind(), &entity.state, &key).as_slice(), ())?;
        entities.insert(key.as_slice(), entity.encode().as_slice())?;
    }
    Ok(decision)
}

/// The entity under `id`, read in `txn`.
pub(crate) fn get(txn: &ReadTransaction, id: &EntityId) -> Result<Option<Entity>, Error> {
    let Some(entities) = open_read(txn, ENTITIES)? else {
        return Ok(None);
    };
    let key = id.to_key_bytes();
    match entities.get(key.as_slice())? {
        Some(bytes) => decode_entity(&key, bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// The entities of `kind` (in `state`, when given), in state then id order, at most
/// `limit`.
pub(crate) fn list(
    txn: &ReadTransaction,
    kind: &str,
    state: Option<&str>,
    limit: usize,
) -> Result<Vec<(EntityId, Entity)>, Error> {
    let (Some(states), Some(entities)) =
        (open_read(txn, ENTITY_STATES)?, open_read(txn, ENTITIES)?)
    else {
        return Ok(Vec::new());
    };
    let prefix = state_prefix(kind, state);
    let mut out = Vec::new();
    for entry in states.range(prefix.as_slice()..)? {
        if out.len() >= limit {
            break;
        }
        let (index_key, _) = entry?;
        let Some(rest) = index_key.value().strip_prefix(prefix.as_slice()) else {
            break;
        };
        // Without a state, the rest starts with the state behind its length byte.
        let key = match state {
            Some(_) => rest,
            None => rest
                .split_first()
                .and_then(|(&len, tail)| tail.get(usize::from(len)..))
                .ok_or_else(|| Error::Corrupt {
                    detail: "entity state index key is cut short".into(),
                })?,
        };
        let id = decode_entity_id(key)?;
        let Some(bytes) = entities.get(key)? else {
            return Err(Error::Corrupt {
                detail: format!("entity state index names {id}, which has no entity"),
            });
        };
        out.push((id, decode_entity(key, bytes.value())?));
    }
    Ok(out)
}

/// Claims `value` in `scope` for `by`, in `txn`.
pub(crate) fn claim_unique_in(
    txn: &WriteTransaction,
    tenant: &str,
    scope: &str,
    value: &str,
    by: &str,
) -> Result<Uniqueness, Error> {
    let key = unique_key(tenant, scope, value)?;
    check_holder(by)?;
    let mut unique = txn.open_table(UNIQUE)?;
    let holder = unique
        .get(key.as_slice())?
        .map(|v| String::from_utf8_lossy(v.value()).into_owned());
    match holder {
        Some(holder) if holder == by => Ok(Uniqueness::Claimed),
        Some(holder) => Ok(Uniqueness::Taken { by: holder }),
        None => {
            unique.insert(key.as_slice(), by.as_bytes())?;
            Ok(Uniqueness::Claimed)
        }
    }
}

/// Gives `value` back; true when it was claimed.
pub(crate) fn release_unique_in(
    txn: &WriteTransaction,
    tenant: &str,
    scope: &str,
    value: &str,
) -> Result<bool, Error> {
    let key = unique_key(tenant, scope, value)?;
    let mut unique = txn.open_table(UNIQUE)?;
    Ok(unique.remove(key.as_slice())?.is_some())
}

/// Who holds `value`, read in `txn`.
pub(crate) fn unique_holder(
    txn: &ReadTransaction,
    tenant: &str,
    scope: &str,
    value: &str,
) -> Result<Option<String>, Error> {
    let key = unique_key(tenant, scope, value)?;
    let Some(unique) = open_read(txn, UNIQUE)? else {
        return Ok(None);
    };
    Ok(unique
        .get(key.as_slice())?
        .map(|v| String::from_utf8_lossy(v.value()).into_owned()))
}

/// The numbers of entities and of claimed values in the file.
pub(crate) fn counts(txn: &ReadTransaction) -> Result<(u64, u64), Error> {
    let entities = match open_read(txn, ENTITIES)? {
        Some(table) => table.len()?,
        None => 0,
    };
    let unique = match open_read(txn, UNIQUE)? {
        Some(table) => table.len()?,
        None => 0,
    };
    Ok((entities, unique))
}

/// Calls `line` with every entity, then every claimed value, in key order.
pub(crate) fn for_each<E: From<Error>>(
    txn: &ReadTransaction,
    mut line: impl FnMut(BusinessLine) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(entities) = open_read(txn, ENTITIES)? {
        for entry in entities.iter().map_err(Error::from)? {
            let (key, bytes) = entry.map_err(Error::from)?;
            let id = decode_entity_id(key.value())?;
            let entity = decode_entity(key.value(), bytes.value())?;
            line(BusinessLine::Entity(EntityView::new(&id, &entity)))?;
        }
    }
    if let Some(unique) = open_read(txn, UNIQUE)? {
        for entry in unique.iter().map_err(Error::from)? {
            let (key, holder) = entry.map_err(Error::from)?;
            let id = crate::file::schema::decode_id(key.value())?;
            line(BusinessLine::Unique(UniqueView::new(
                id.tenant(),
                id.operation(),
                id.key(),
                &String::from_utf8_lossy(holder.value()),
            )))?;
        }
    }
    Ok(())
}

/// Writes an imported line: `Ok(Err(message))` when the line breaks a rule or the store
/// already holds something different under its key (the same is accepted as is).
pub(crate) fn import(
    txn: &WriteTransaction,
    line: &BusinessLine,
) -> Result<Result<(), String>, Error> {
    match line {
        BusinessLine::Entity(view) => {
            let (id, entity) = match view.to_entity() {
                Ok(found) => found,
                Err(message) => return Ok(Err(format!("entity: {message}"))),
            };
            let key = id.to_key_bytes();
            let mut entities: Table<&[u8], &[u8]> = txn.open_table(ENTITIES)?;
            let existing = match entities.get(key.as_slice())? {
                Some(bytes) => Some(decode_entity(&key, bytes.value())?),
                None => None,
            };
            match existing {
                Some(existing) if existing == entity => Ok(Ok(())),
                Some(_) => Ok(Err(format!(
                    "entity {id}: the store already holds a different entity under this id"
                ))),
                None => {
                    entities.insert(key.as_slice(), entity.encode().as_slice())?;
                    txn.open_table(ENTITY_STATES)?
                        .insert(state_key(id.kind(), &entity.state, &key).as_slice(), ())?;
                    Ok(Ok(()))
                }
            }
        }
        BusinessLine::Unique(view) => {
            let key = match view.to_claim() {
                Ok((tenant, scope, value, _)) => unique_key(tenant, scope, value)?,
                Err(e) => return Ok(Err(format!("unique: {e}"))),
            };
            let mut unique = txn.open_table(UNIQUE)?;
            let holder = unique
                .get(key.as_slice())?
                .map(|v| v.value() == view.holder.as_bytes());
            match holder {
                Some(true) => Ok(Ok(())),
                Some(false) => Ok(Err(format!(
                    "unique {}/{}/{}: the store already holds it for another holder",
                    view.tenant, view.scope, view.value
                ))),
                None => {
                    unique.insert(key.as_slice(), view.holder.as_bytes())?;
                    Ok(Ok(()))
                }
            }
        }
    }
}

/// Checks the business tables: every entity decodes and has exactly its state index
/// entry, every claimed value has a valid key and holder. Calls `problem` for each
/// inconsistency.
pub(crate) fn check(txn: &ReadTransaction, problem: &mut dyn FnMut(String)) -> Result<(), Error> {
    if let Some(entities) = open_read(txn, ENTITIES)? {
        let states = open_read(txn, ENTITY_STATES)?;
        let mut total = 0u64;
        for entry in entities.iter()? {
            let (key, bytes) = entry?;
            total += 1;
            let name = crate::file::schema::describe_key(key.value());
            let found = decode_entity_id(key.value())
                .and_then(|id| Ok((id, decode_entity(key.value(), bytes.value())?)));
            let (id, entity) = match found {
                Ok(found) => found,
                Err(e) => {
                    problem(e.to_string());
                    continue;
                }
            };
            let indexed = match &states {
                Some(states) => states
                    .get(state_key(id.kind(), &entity.state, key.value()).as_slice())?
                    .is_some(),
                None => false,
            };
            if !indexed {
                problem(format!(
                    "entity {name}: missing from the entity state index ({})",
                    entity.state
                ));
            }
        }
        let indexed = match &states {
            Some(states) => states.len()?,
            None => 0,
        };
        // Every entity has its entry (checked above); equal lengths then mean that no
        // entry lacks an entity.
        if indexed != total {
            problem(format!(
                "entity state index holds {indexed} entries for {total} entities"
            ));
        }
    }
    if let Some(unique) = open_read(txn, UNIQUE)? {
        for entry in unique.iter()? {
            let (key, holder) = entry?;
            if let Err(e) = crate::file::schema::decode_id(key.value()) {
                problem(format!("claimed value: {e}"));
            }
            if holder.value().is_empty() || std::str::from_utf8(holder.value()).is_err() {
                problem(format!(
                    "claimed value {}: its holder is not 1 to 255 bytes of UTF-8",
                    crate::file::schema::describe_key(key.value())
                ));
            }
        }
    }
    Ok(())
}

fn decode_entity_id(key: &[u8]) -> Result<EntityId, Error> {
    RecordId::from_key_bytes(key)
        .map(EntityId)
        .map_err(|source| Error::Decode {
            what: "entity id".into(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableHandle;

    /// Golden bytes: the table names and index keys are part of the file format.
    #[test]
    fn names_and_index_keys_are_frozen() {
        assert_eq!(
            [ENTITIES.name(), ENTITY_STATES.name(), UNIQUE.name()],
            ["idem.entities", "idem.entity.state", "idem.unique"]
        );
        let id = EntityId::new("shop", "payment", "p-1").unwrap();
        assert_eq!(
            state_key("payment", "paid", &id.to_key_bytes()),
            b"\x07payment\x04paid\x04shop\x07paymentp-1"
        );
    }

    #[test]
    fn bad_names_say_which_part() {
        let err = EntityId::new("shop", "", "p-1").unwrap_err();
        assert_eq!(err.to_string(), "kind: empty, needs 1 to 255 bytes");
        let err = unique_key("shop", "receipt", "nr\u{1}").unwrap_err();
        assert!(err.to_string().starts_with("value: "), "{err}");
    }
}
