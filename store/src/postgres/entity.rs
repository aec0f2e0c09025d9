//! The layers after the key on PostgreSQL (docs/design.md §8): entities moved by a state
//! machine with a version check, and business values claimed once. idem-core decides
//! each move ([`idem_core::machine::transition`]); the engine writes it as one
//! conditional statement on the version it read (`UPDATE … WHERE version = $seen`, or
//! an `INSERT … ON CONFLICT DO NOTHING` for an entity that did not exist), and reads
//! again when another writer was first. Sweep never touches these tables.

use idem_core::Timestamp;
use idem_core::machine::{self, Entity, EntityDecision, Machine};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement, Transaction};

use super::PgStore;
use super::error::database;
use super::row::signed;
use super::statements::{ENTITY_INSERT, ENTITY_MOVE, ENTITY_READ, ENTITY_UPDATE, Statements};
use crate::error::Error;
use crate::seam::cache::EntityCache;
use crate::seam::entity::Entities;
use crate::seam::entity::{EntityId, Uniqueness, check_holder, check_unique};

/// How many times a move reads and tries to write before it gives up
/// ([`Error::Contended`]): each loss means another writer moved the entity first.
const MOVE_ATTEMPTS: u32 = 16;

impl PgStore {
    /// Moves the entity `id` to `to` if `machine` allows it (and, with
    /// `expected_version`, only from that version), in a statement of its own. The time
    /// is the database's.
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
        let connection = self.connection("transition").await?;
        transition_on(
            &connection.client,
            Some(&connection.statements),
            &self.inner.entities,
            machine,
            id,
            to,
            expected_version,
        )
        .await
    }

    /// [`PgStore::transition`] inside `txn`, the transaction an execute hands its work
    /// ([`PgStore::execute`]): the key's record, the business write and the move commit
    /// together, or none does. Inside an execute's work the move runs the statements
    /// prepared on its connection; in a transaction of the caller's own, they are sent
    /// typed.
    ///
    /// # Errors
    ///
    /// As [`PgStore::transition`].
    pub async fn transition_in(
        &self,
        txn: &Transaction<'_>,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
    ) -> Result<EntityDecision, Error> {
        let prepared = super::execute::prepared_for(txn);
        transition_on(
            txn,
            prepared.as_deref(),
            &self.inner.entities,
            machine,
            id,
            to,
            expected_version,
        )
        .await
    }

    /// The entity `id`, if it ever moved.
    ///
    /// # Errors
    ///
    /// The database's.
    pub async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        let connection = self.connection("get_entity").await?;
        entity_on(&connection.client, id).await
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
        txn: &Transaction<'_>,
        id: &EntityId,
    ) -> Result<Option<Entity>, Error> {
        entity_on(txn, id).await
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
        let connection = self.connection("list_entities").await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = connection
            .client
            .query(
                "SELECT tenant, kind, id, state, version, updated_at FROM idem_entities \
                  WHERE kind = $1 AND ($2::text IS NULL OR state = $2) \
                  ORDER BY octet_length(state), state, octet_length(tenant), tenant, id \
                  LIMIT $3",
                &[&kind, &state, &limit],
            )
            .await
            .map_err(database("list_entities"))?;
        rows.iter().map(entity_row).collect()
    }

    /// Claims the business value `value` (a receipt number, an order number) in `scope`
    /// for `by` (the key or order that uses it), inside `txn`. Claiming again for the same
    /// holder is harmless; another holder is [`Uniqueness::Taken`]. Sweep never releases
    /// it.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a name that breaks its rule; the database's.
    pub async fn claim_unique_in(
        &self,
        txn: &Transaction<'_>,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        claim_on(txn, tenant, scope, value, by).await
    }

    /// [`PgStore::claim_unique_in`] in a statement of its own.
    ///
    /// # Errors
    ///
    /// As [`PgStore::claim_unique_in`].
    pub async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        let connection = self.connection("claim_unique").await?;
        claim_on(&connection.client, tenant, scope, value, by).await
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
        let connection = self.connection("release_unique").await?;
        let deleted = connection
            .client
            .execute(
                "DELETE FROM idem_unique WHERE tenant = $1 AND scope = $2 AND value = $3",
                &[&tenant, &scope, &value],
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
        let connection = self.connection("unique_holder").await?;
        holder_on(&connection.client, tenant, scope, value).await
    }
}

/// The move of `id` to `to`, decided by the core on what `client` reads, written on
/// the version read; first, in one statement, on the entity as this replica last saw it.
async fn transition_on(
    client: &impl GenericClient,
    prepared: Option<&Statements>,
    cache: &EntityCache,
    machine: &Machine,
    id: &EntityId,
    to: &str,
    expected_version: Option<u64>,
) -> Result<EntityDecision, Error> {
    let key = [id.tenant(), id.kind(), id.id()];
    if let Some(seen) = cache.get(id) {
        // Only an applied move is tried: it is written if the row is still `seen`, at
        // the database's time.
        let decided =
            machine::transition(machine, Some(&seen), to, expected_version, seen.updated_at);
        if let EntityDecision::Applied { entity } = &decided {
            let (version, was) = (
                signed("version", entity.version)?,
                signed("version", seen.version)?,
            );
            let row = query_opt(
                client,
                prepared.map(|st| &st.entity_move),
                ENTITY_MOVE,
                &[
                    &key[0],
                    &key[1],
                    &key[2],
                    &entity.state,
                    &version,
                    &was,
                    &seen.state,
                ],
            )
            .await
            .map_err(database("transition"))?;
            if let Some(row) = row {
                let at: i64 = row.try_get(0).map_err(database("transition"))?;
                let entity = Entity {
                    updated_at: Timestamp(u64::try_from(at).unwrap_or(0)),
                    ..entity.clone()
                };
                cache.keep(id, &entity);
                return Ok(EntityDecision::Applied { entity });
            }
        }
        cache.forget(id);
    }
    for _ in 0..MOVE_ATTEMPTS {
        // The time a move uses: the database's clock, never before the entity's last
        // move.
        let row = query_opt(
            client,
            prepared.map(|st| &st.entity_read),
            ENTITY_READ,
            &[&key[0], &key[1], &key[2]],
        )
        .await
        .map_err(database("transition"))?
        .ok_or_else(|| Error::Corrupt {
            detail: "the read of an entity returned no row".into(),
        })?;
        let now: i64 = row.try_get(0).map_err(database("transition"))?;
        let now = Timestamp(u64::try_from(now).unwrap_or(0));
        let current = match row
            .try_get::<_, Option<String>>(1)
            .map_err(database("transition"))?
        {
            Some(_) => Some(entity_at(&row, 1, id)?),
            None => None,
        };
        let decision = machine::transition(machine, current.as_ref(), to, expected_version, now);
        let EntityDecision::Applied { entity } = &decision else {
            if let Some(current) = &current {
                cache.keep(id, current);
            }
            return Ok(decision);
        };
        let version = signed("version", entity.version)?;
        let updated_at = signed("updated_at", entity.updated_at.0)?;
        let written = match &current {
            None => {
                execute(
                    client,
                    prepared.map(|st| &st.entity_insert),
                    ENTITY_INSERT,
                    &[
                        &key[0],
                        &key[1],
                        &key[2],
                        &entity.state,
                        &version,
                        &updated_at,
                    ],
                )
                .await
            }
            Some(seen) => {
                let seen = signed("version", seen.version)?;
                execute(
                    client,
                    prepared.map(|st| &st.entity_update),
                    ENTITY_UPDATE,
                    &[
                        &key[0],
                        &key[1],
                        &key[2],
                        &entity.state,
                        &version,
                        &updated_at,
                        &seen,
                    ],
                )
                .await
            }
        };
        if written.map_err(database("transition"))? == 1 {
            cache.keep(id, entity);
            return Ok(decision);
        }
        // Another writer moved the entity since it was read: decide again.
    }
    Err(Error::Contended {
        attempts: MOVE_ATTEMPTS,
    })
}

pub(super) async fn entity_on(
    client: &impl GenericClient,
    id: &EntityId,
) -> Result<Option<Entity>, Error> {
    let row = client
        .query_typed_opt(
            "SELECT state, version, updated_at FROM idem_entities \
              WHERE tenant = $1 AND kind = $2 AND id = $3",
            &[
                (&id.tenant(), Type::TEXT),
                (&id.kind(), Type::TEXT),
                (&id.id(), Type::TEXT),
            ],
        )
        .await
        .map_err(database("get_entity"))?;
    row.map(|row| entity_at(&row, 0, id)).transpose()
}

/// Runs `statement`: the one prepared on this connection, or `sql` sent typed (inside a
/// caller's transaction, whose connection's statements are not at hand).
async fn query_opt(
    client: &impl GenericClient,
    statement: Option<&Statement>,
    (sql, types): (&str, &[Type]),
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, tokio_postgres::Error> {
    match statement {
        Some(statement) => client.query_opt(statement, params).await,
        None => client.query_typed_opt(sql, &typed(params, types)).await,
    }
}

/// As [`query_opt`], for a statement that returns no rows: the rows it changed.
async fn execute(
    client: &impl GenericClient,
    statement: Option<&Statement>,
    (sql, types): (&str, &[Type]),
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    match statement {
        Some(statement) => client.execute(statement, params).await,
        None => client.execute_typed(sql, &typed(params, types)).await,
    }
}

fn typed<'a>(
    params: &[&'a (dyn ToSql + Sync)],
    types: &[Type],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params.iter().copied().zip(types.iter().cloned()).collect()
}

/// The entity of a whole `idem_entities` row: tenant, kind, id, state, version,
/// updated_at.
pub(super) fn entity_row(row: &Row) -> Result<(EntityId, Entity), Error> {
    let part = |i| {
        row.try_get::<_, String>(i).map_err(|e| Error::Corrupt {
            detail: format!("idem_entities: column {i}: {e}"),
        })
    };
    let id = EntityId::new(&part(0)?, &part(1)?, &part(2)?).map_err(|e| Error::Corrupt {
        detail: format!("idem_entities: {e}"),
    })?;
    let entity = entity_at(row, 3, &id)?;
    Ok((id, entity))
}

/// The entity in `row`'s columns from `first` on: state, version, updated_at.
fn entity_at(row: &Row, first: usize, id: &EntityId) -> Result<Entity, Error> {
    let corrupt = |detail: String| Error::Corrupt {
        detail: format!("idem_entities row {id}: {detail}"),
    };
    let state: String = row.try_get(first).map_err(|e| corrupt(e.to_string()))?;
    let version: i64 = row.try_get(first + 1).map_err(|e| corrupt(e.to_string()))?;
    let updated_at: i64 = row.try_get(first + 2).map_err(|e| corrupt(e.to_string()))?;
    Ok(Entity {
        state,
        version: u64::try_from(version).map_err(|_| corrupt(format!("version {version}")))?,
        updated_at: Timestamp(
            u64::try_from(updated_at).map_err(|_| corrupt(format!("updated_at {updated_at}")))?,
        ),
    })
}

async fn claim_on(
    client: &impl GenericClient,
    tenant: &str,
    scope: &str,
    value: &str,
    by: &str,
) -> Result<Uniqueness, Error> {
    check_unique(tenant, scope, value)?;
    check_holder(by)?;
    for _ in 0..MOVE_ATTEMPTS {
        let inserted = client
            .execute_typed(
                "INSERT INTO idem_unique (tenant, scope, value, holder) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
                &[
                    (&tenant, Type::TEXT),
                    (&scope, Type::TEXT),
                    (&value, Type::TEXT),
                    (&by, Type::TEXT),
                ],
            )
            .await
            .map_err(database("claim_unique"))?;
        if inserted == 1 {
            return Ok(Uniqueness::Claimed);
        }
        match holder_on(client, tenant, scope, value).await? {
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

pub(super) async fn holder_on(
    client: &impl GenericClient,
    tenant: &str,
    scope: &str,
    value: &str,
) -> Result<Option<String>, Error> {
    let row = client
        .query_typed_opt(
            "SELECT holder FROM idem_unique WHERE tenant = $1 AND scope = $2 AND value = $3",
            &[
                (&tenant, Type::TEXT),
                (&scope, Type::TEXT),
                (&value, Type::TEXT),
            ],
        )
        .await
        .map_err(database("unique_holder"))?;
    row.map(|row| row.try_get(0).map_err(database("unique_holder")))
        .transpose()
}

impl Entities for PgStore {
    async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        _now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        PgStore::transition(self, machine, id, to, expected_version).await
    }

    async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        PgStore::get_entity(self, id).await
    }

    async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        PgStore::list_entities(self, kind, state, limit).await
    }

    async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        PgStore::claim_unique(self, tenant, scope, value, by).await
    }

    async fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        PgStore::release_unique(self, tenant, scope, value).await
    }

    async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        PgStore::unique_holder(self, tenant, scope, value).await
    }
}
