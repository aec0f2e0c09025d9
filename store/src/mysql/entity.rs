//! The layers after the key on MariaDB (docs/design.md §8): entities moved by a state
//! machine with a version check, and business values claimed once. idem-core decides
//! each move ([`idem_core::machine::transition`]); the engine writes it as one
//! conditional statement on the version it read (`UPDATE … WHERE version = ?`, or a
//! plain `INSERT` for an entity that did not exist, whose duplicate key means another
//! writer was first), and reads again when another writer was first. Sweep never
//! touches these tables.

use idem_core::Timestamp;
use idem_core::machine::{self, Entity, EntityDecision, Machine};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Transaction, Value};

use super::MySqlStore;
use super::error::{DUPLICATE_KEY, code, database};
use super::row::{get, signed};
use super::statements::exec_count;
use crate::error::Error;
use crate::seam::entity::Entities;
use crate::seam::entity::{EntityId, Uniqueness, check_holder, check_unique};

/// How many times a move reads and tries to write before it gives up
/// ([`Error::Contended`]): each loss means another writer moved the entity first.
const MOVE_ATTEMPTS: u32 = 16;

fn id_values(id: &EntityId) -> Vec<Value> {
    vec![
        Value::from(id.tenant()),
        Value::from(id.kind()),
        Value::from(id.id()),
    ]
}

impl MySqlStore {
    /// Moves the entity `id` to `to` if `machine` allows it (and, with
    /// `expected_version`, only from that version). The time is the database's.
    ///
    /// # Errors
    ///
    /// The database's, or [`Error::Contended`] when other writers kept moving the entity.
    pub async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
    ) -> Result<EntityDecision, Error> {
        let mut conn = self.conn("transition").await?;
        transition_on(&mut conn, machine, id, to, expected_version).await
    }

    /// [`MySqlStore::transition`] inside `txn`, the transaction an execute hands its
    /// work ([`MySqlStore::execute`]) or one of the caller's own: the key's record, the
    /// business write and the move commit together, or none does.
    ///
    /// # Errors
    ///
    /// As [`MySqlStore::transition`].
    pub async fn transition_in(
        &self,
        txn: &mut Transaction<'_>,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
    ) -> Result<EntityDecision, Error> {
        transition_on(txn, machine, id, to, expected_version).await
    }

    /// The entity `id` as `txn` sees it: with a REPEATABLE READ transaction, read a
    /// business row and the entity's version from one snapshot, then move it with that
    /// version as `expected_version`.
    ///
    /// # Errors
    ///
    /// The database's.
    pub async fn entity_in(
        &self,
        txn: &mut Transaction<'_>,
        id: &EntityId,
    ) -> Result<Option<Entity>, Error> {
        entity_on(txn, id).await
    }

    /// Claims the business value `value` in `scope` for `by` inside `txn`, as
    /// [`MySqlStore::claim_unique`] does on its own.
    ///
    /// # Errors
    ///
    /// As [`MySqlStore::claim_unique`].
    pub async fn claim_unique_in(
        &self,
        txn: &mut Transaction<'_>,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        check_unique(tenant, scope, value)?;
        check_holder(by)?;
        claim_on(txn, tenant, scope, value, by).await
    }

    /// The entity `id`, if it ever moved.
    ///
    /// # Errors
    ///
    /// The database's.
    pub async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        let mut conn = self.conn("get_entity").await?;
        entity_on(&mut conn, id).await
    }

    /// The entities of `kind` (in `state`, when given), by state, then by tenant and id,
    /// each in the order of its key bytes as on a file (a shorter name first), at most
    /// `limit`.
    ///
    /// # Errors
    ///
    /// The database's.
    pub async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        let mut conn = self.conn("list_entities").await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<Row> = conn
            .exec(
                "SELECT tenant, kind, id, state, version, updated_at FROM idem_entities \
                  WHERE kind = ? AND (? IS NULL OR state = ?) \
                  ORDER BY LENGTH(state), state, LENGTH(tenant), tenant, id \
                  LIMIT ?",
                vec![
                    Value::from(kind),
                    Value::from(state),
                    Value::from(state),
                    Value::from(limit),
                ],
            )
            .await
            .map_err(database("list_entities"))?;
        rows.iter().map(entity_row).collect()
    }

    /// Claims the business value `value` (a receipt number, an order number) in `scope`
    /// for `by`. Claiming again for the same holder is harmless; another holder is
    /// [`Uniqueness::Taken`]. Sweep never releases it.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a name that breaks its rule; the database's.
    pub async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        check_unique(tenant, scope, value)?;
        check_holder(by)?;
        let mut conn = self.conn("claim_unique").await?;
        claim_on(&mut conn, tenant, scope, value, by).await
    }

    /// Gives `value` in `scope` back; true when it was claimed.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a name that breaks its rule; the database's.
    pub async fn release_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<bool, Error> {
        check_unique(tenant, scope, value)?;
        let mut conn = self.conn("release_unique").await?;
        let deleted = exec_count(
            &mut conn,
            "DELETE FROM idem_unique WHERE tenant = ? AND scope = ? AND value = ?",
            vec![Value::from(tenant), Value::from(scope), Value::from(value)],
        )
        .await
        .map_err(database("release_unique"))?;
        Ok(deleted > 0)
    }

    /// Who holds `value` in `scope`, if anyone.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a name that breaks its rule; the database's.
    pub async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        check_unique(tenant, scope, value)?;
        let mut conn = self.conn("unique_holder").await?;
        holder_on(&mut conn, tenant, scope, value).await
    }
}

/// The move of `id` to `to`, decided by the core on what `q` reads, written on the
/// version read.
async fn transition_on<Q: Queryable>(
    q: &mut Q,
    machine: &Machine,
    id: &EntityId,
    to: &str,
    expected_version: Option<u64>,
) -> Result<EntityDecision, Error> {
    for _ in 0..MOVE_ATTEMPTS {
        // The time a move uses: the database's clock, never before the entity's last
        // move.
        let row: Option<Row> = q
            .exec_first(
                "SELECT GREATEST(idem_now(), COALESCE(e.updated_at, 0)), e.state, e.version, e.updated_at \
                   FROM (SELECT 1) one LEFT JOIN idem_entities e \
                     ON e.tenant = ? AND e.kind = ? AND e.id = ?",
                id_values(id),
            )
            .await
            .map_err(database("transition"))?;
        let row = row.ok_or_else(|| Error::Corrupt {
            detail: "the read of an entity returned no row".into(),
        })?;
        let now: i64 = get(&row, 0, "idem_entities")?;
        let now = Timestamp(u64::try_from(now).unwrap_or(0));
        let current = match get::<Option<String>>(&row, 1, "idem_entities")? {
            Some(_) => Some(entity_at(&row, 1, id)?),
            None => None,
        };
        let decision = machine::transition(machine, current.as_ref(), to, expected_version, now);
        let EntityDecision::Applied { entity } = &decision else {
            return Ok(decision);
        };
        let version = signed("version", entity.version)?;
        let updated_at = signed("updated_at", entity.updated_at.0)?;
        let values = [
            Value::from(entity.state.as_str()),
            Value::from(version),
            Value::from(updated_at),
        ];
        let written = match &current {
            None => {
                let mut params = id_values(id);
                params.extend(values);
                match exec_count(
                    q,
                    "INSERT INTO idem_entities (tenant, kind, id, state, version, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?)",
                    params,
                )
                .await
                {
                    Ok(n) => n,
                    // Another writer made it first: decide again.
                    Err(e) if code(&e) == Some(DUPLICATE_KEY) => 0,
                    Err(e) => return Err(database("transition")(e)),
                }
            }
            Some(seen) => {
                let mut params = values.to_vec();
                params.extend(id_values(id));
                params.push(Value::from(signed("version", seen.version)?));
                // The version always changes: one affected row is a win, whatever
                // CLIENT_FOUND_ROWS says.
                exec_count(
                    q,
                    "UPDATE idem_entities SET state = ?, version = ?, updated_at = ? \
                      WHERE tenant = ? AND kind = ? AND id = ? AND version = ?",
                    params,
                )
                .await
                .map_err(database("transition"))?
            }
        };
        if written == 1 {
            return Ok(decision);
        }
        // Another writer moved the entity since it was read: decide again.
    }
    Err(Error::Contended {
        attempts: MOVE_ATTEMPTS,
    })
}

pub(super) async fn entity_on<Q: Queryable>(
    q: &mut Q,
    id: &EntityId,
) -> Result<Option<Entity>, Error> {
    let row: Option<Row> = q
        .exec_first(
            "SELECT state, version, updated_at FROM idem_entities \
              WHERE tenant = ? AND kind = ? AND id = ?",
            id_values(id),
        )
        .await
        .map_err(database("get_entity"))?;
    row.map(|row| entity_at(&row, 0, id)).transpose()
}

/// The entity of a whole `idem_entities` row: tenant, kind, id, state, version,
/// updated_at.
pub(super) fn entity_row(row: &Row) -> Result<(EntityId, Entity), Error> {
    let part = |i| get::<String>(row, i, "idem_entities");
    let id = EntityId::new(&part(0)?, &part(1)?, &part(2)?).map_err(|e| Error::Corrupt {
        detail: format!("idem_entities: {e}"),
    })?;
    let entity = entity_at(row, 3, &id)?;
    Ok((id, entity))
}

/// The entity in `row`'s columns from `first` on: state, version, updated_at.
fn entity_at(row: &Row, first: usize, id: &EntityId) -> Result<Entity, Error> {
    let table = format!("idem_entities row {id}");
    let corrupt = |detail: String| Error::Corrupt {
        detail: format!("{table}: {detail}"),
    };
    let state: String = get(row, first, &table)?;
    let version: i64 = get(row, first + 1, &table)?;
    let updated_at: i64 = get(row, first + 2, &table)?;
    Ok(Entity {
        state,
        version: u64::try_from(version).map_err(|_| corrupt(format!("version {version}")))?,
        updated_at: Timestamp(
            u64::try_from(updated_at).map_err(|_| corrupt(format!("updated_at {updated_at}")))?,
        ),
    })
}

async fn claim_on<Q: Queryable>(
    q: &mut Q,
    tenant: &str,
    scope: &str,
    value: &str,
    by: &str,
) -> Result<Uniqueness, Error> {
    for _ in 0..MOVE_ATTEMPTS {
        let inserted = exec_count(
            q,
            "INSERT INTO idem_unique (tenant, scope, value, holder) VALUES (?, ?, ?, ?)",
            vec![
                Value::from(tenant),
                Value::from(scope),
                Value::from(value),
                Value::from(by),
            ],
        )
        .await;
        match inserted {
            Ok(_) => return Ok(Uniqueness::Claimed),
            Err(e) if code(&e) == Some(DUPLICATE_KEY) => {}
            Err(e) => return Err(database("claim_unique")(e)),
        }
        match holder_on(q, tenant, scope, value).await? {
            Some(holder) if holder == by => return Ok(Uniqueness::Claimed),
            Some(holder) => return Ok(Uniqueness::Taken { by: holder }),
            // Released meanwhile: claim again.
            None => {}
        }
    }
    Err(Error::Contended {
        attempts: MOVE_ATTEMPTS,
    })
}

pub(super) async fn holder_on<Q: Queryable>(
    q: &mut Q,
    tenant: &str,
    scope: &str,
    value: &str,
) -> Result<Option<String>, Error> {
    q.exec_first(
        "SELECT holder FROM idem_unique WHERE tenant = ? AND scope = ? AND value = ?",
        vec![Value::from(tenant), Value::from(scope), Value::from(value)],
    )
    .await
    .map_err(database("unique_holder"))
}

impl Entities for MySqlStore {
    async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        _now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        MySqlStore::transition(self, machine, id, to, expected_version).await
    }

    async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        MySqlStore::get_entity(self, id).await
    }

    async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        MySqlStore::list_entities(self, kind, state, limit).await
    }

    async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        MySqlStore::claim_unique(self, tenant, scope, value, by).await
    }

    async fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        MySqlStore::release_unique(self, tenant, scope, value).await
    }

    async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        MySqlStore::unique_holder(self, tenant, scope, value).await
    }
}
