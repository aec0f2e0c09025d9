//! The statements of the engine, prepared once per connection. Each protocol step is
//! one autocommit statement; the time every statement uses is the database's
//! (`idem_now()`), never below the record's last update, so that
//! a record's times never go backwards.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use super::row::columns;

/// The time a write of an existing row uses: the database's clock, or the row's last
/// update when the clock reads earlier (the clock floor, per record).
const ROW_TIME: &str = "GREATEST(idem_now(), updated_at)";

/// A fresh key's claim, or the record in the way: one statement for both, so that a
/// replay read from the database is one round trip. The INSERT returns a claimed row,
/// or the SELECT the row that is there. `idem_now()` is the statement's time (it is
/// `now()`, fixed for the statement). A row committed after this statement's snapshot
/// is seen by neither part: then no row. Parameters: tenant, operation, key,
/// fingerprint, lease (ms), claimant (the begin's mark, `seam::lost`; null for an
/// atomic execute, whose claim commits with its outcome or not at all).
fn claim_sql() -> String {
    let record = columns("");
    let r_record = columns("r.");
    format!(
        "WITH claimed AS ( \
           INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, created_at, updated_at, lease_until, claimant) \
           VALUES ($1, $2, $3, $4, nextval('idem_generation'), 0, idem_now(), idem_now(), idem_now() + $5, $6) \
           ON CONFLICT DO NOTHING \
           RETURNING {record}) \
         SELECT true, updated_at, {record} FROM claimed \
         UNION ALL \
         SELECT false, GREATEST(idem_now(), r.updated_at), {r_record} \
           FROM idem_records r \
          WHERE r.tenant = $1 AND r.operation = $2 AND r.key = $3 \
            AND NOT EXISTS (SELECT 1 FROM claimed)"
    )
}

/// A fenced update (heartbeat, complete, mark unknown, resolve). Parameters: tenant,
/// operation, key, generation (any when null), the state required, then the state,
/// verdict, lease_until, completed_at and expires_at (offsets from the row's time),
/// outcome code and body written.
fn update_sql() -> String {
    format!(
        "UPDATE idem_records SET state = $6, verdict = $7, updated_at = {ROW_TIME}, \
           lease_until = {ROW_TIME} + $8, completed_at = {ROW_TIME} + $9, \
           expires_at = {ROW_TIME} + $10, outcome_code = $11, outcome_body = $12 \
         WHERE tenant = $1 AND operation = $2 AND key = $3 \
           AND ($4::bigint IS NULL OR generation = $4) AND state = $5 \
         RETURNING fingerprint, generation, created_at, updated_at"
    )
}

/// The SQL of a fresh key's two statements, the claim and the fenced update that
/// completes it, as the engine prepares them: for benchmarks that send the same
/// statements without idem's code.
#[doc(hidden)]
pub fn fresh_key_statements() -> [String; 2] {
    [claim_sql(), update_sql()]
}

/// The order of ids on every engine: the order of their key bytes, as the file keeps them
/// (`RecordId::to_key_bytes`: a tenant's length byte, the tenant, an operation's length
/// byte, the operation, the key). The columns are `COLLATE "C"`, compared byte by byte.
pub(super) const KEY_ORDER: &str =
    "octet_length(tenant), tenant, octet_length(operation), operation, key";

/// Every statement of one connection.
pub(super) struct Statements {
    /// A fresh key's claim, or the record in the way: `(claimed, time, record…)`.
    pub(super) claim: Statement,
    /// One record with the time a write of it would use: `(time, record…)`.
    pub(super) read: Statement,
    /// One record: `(record…)`.
    pub(super) get: Statement,
    /// The write a begin decided, conditioned on the record it read: `(generation)`.
    /// A new generation carries the claimant given; otherwise the row keeps its own.
    pub(super) replace: Statement,
    /// A fenced update (heartbeat, complete, mark unknown, resolve), its times offsets
    /// from the row's time: what it kept and when, `(fingerprint, generation,
    /// created_at, updated_at)`; the rest is what it was given.
    pub(super) update: Statement,
    /// A fenced delete (release, resolve as not executed): `(generation)`.
    pub(super) delete: Statement,
    /// The record a claimant's claim wrote: `(record…)`.
    pub(super) claimed_by: Statement,
    /// A lost claim given back, conditioned on its claimant, generation and state:
    /// `(generation)`.
    pub(super) delete_claimed: Statement,
    /// Records by filter, in key order: `(tenant, operation, key, record…)`.
    pub(super) list: Statement,
    /// An entity and the time a move of it uses: `(time, state, version, updated_at)`.
    pub(super) entity_read: Statement,
    /// A move on the version a replica last saw: `(updated_at)`.
    pub(super) entity_move: Statement,
    /// A new entity: its first move.
    pub(super) entity_insert: Statement,
    /// A move on the version read.
    pub(super) entity_update: Statement,
}

/// The SQL of the entity statements, with the types of their parameters: prepared on a
/// connection, or sent typed inside a caller's transaction.
pub(super) const ENTITY_READ: (&str, &[Type]) = (
    "SELECT GREATEST(idem_now(), e.updated_at), e.state, e.version, e.updated_at \
       FROM (SELECT 1) one LEFT JOIN idem_entities e \
         ON e.tenant = $1 AND e.kind = $2 AND e.id = $3",
    &[Type::TEXT, Type::TEXT, Type::TEXT],
);
pub(super) const ENTITY_MOVE: (&str, &[Type]) = (
    "UPDATE idem_entities SET state = $4, version = $5, \
            updated_at = GREATEST(idem_now(), updated_at) \
      WHERE tenant = $1 AND kind = $2 AND id = $3 AND version = $6 AND state = $7 \
      RETURNING updated_at",
    &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
    ],
);
pub(super) const ENTITY_INSERT: (&str, &[Type]) = (
    "INSERT INTO idem_entities (tenant, kind, id, state, version, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
    ],
);
pub(super) const ENTITY_UPDATE: (&str, &[Type]) = (
    "UPDATE idem_entities SET state = $4, version = $5, updated_at = $6 \
      WHERE tenant = $1 AND kind = $2 AND id = $3 AND version = $7",
    &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT8,
    ],
);

impl Statements {
    /// Prepares every statement on `client`.
    pub(super) async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
        let text = Type::TEXT;
        let pk = [text.clone(), text.clone(), text.clone()];
        let with = |more: &[Type]| -> Vec<Type> { pk.iter().chain(more).cloned().collect() };
        let record = columns("");
        let claim = claim_sql();
        let claim = client
            .prepare_typed(&claim, &with(&[Type::BYTEA, Type::INT8, Type::INT8]))
            .await?;
        let read = format!(
            "SELECT {ROW_TIME}, {record} FROM idem_records \
              WHERE tenant = $1 AND operation = $2 AND key = $3"
        );
        let read = client.prepare_typed(&read, &pk).await?;
        let get = format!(
            "SELECT {record} FROM idem_records WHERE tenant = $1 AND operation = $2 AND key = $3"
        );
        let get = client.prepare_typed(&get, &pk).await?;
        let replace = "UPDATE idem_records SET \
               generation = CASE WHEN $4 THEN nextval('idem_generation') ELSE generation END, \
               fingerprint = $10, state = $11, verdict = $12, created_at = $13, updated_at = $14, \
               lease_until = $15, completed_at = $16, expires_at = $17, \
               outcome_code = $18, outcome_body = $19, \
               claimant = CASE WHEN $4 THEN $20 ELSE claimant END \
             WHERE tenant = $1 AND operation = $2 AND key = $3 \
               AND generation = $5 AND state = $6 AND updated_at = $7 \
               AND lease_until IS NOT DISTINCT FROM $8 AND expires_at IS NOT DISTINCT FROM $9 \
             RETURNING generation";
        let i8 = Type::INT8;
        let i2 = Type::INT2;
        let replace = client
            .prepare_typed(
                replace,
                &with(&[
                    Type::BOOL,
                    i8.clone(),
                    i2.clone(),
                    i8.clone(),
                    i8.clone(),
                    i8.clone(),
                    Type::BYTEA,
                    i2.clone(),
                    i2.clone(),
                    i8.clone(),
                    i8.clone(),
                    i8.clone(),
                    i8.clone(),
                    i8.clone(),
                    Type::INT4,
                    Type::BYTEA,
                    i8.clone(),
                ]),
            )
            .await?;
        let update = update_sql();
        let update = client
            .prepare_typed(
                &update,
                &with(&[
                    i8.clone(),
                    i2.clone(),
                    i2.clone(),
                    i2.clone(),
                    i8.clone(),
                    i8.clone(),
                    i8.clone(),
                    Type::INT4,
                    Type::BYTEA,
                ]),
            )
            .await?;
        let delete = "DELETE FROM idem_records \
             WHERE tenant = $1 AND operation = $2 AND key = $3 \
               AND ($4::bigint IS NULL OR generation = $4) AND state = $5 \
             RETURNING generation";
        let delete = client
            .prepare_typed(delete, &with(&[i8.clone(), i2.clone()]))
            .await?;
        let claimed_by = format!(
            "SELECT {record} FROM idem_records \
              WHERE tenant = $1 AND operation = $2 AND key = $3 AND claimant = $4"
        );
        let claimed_by = client
            .prepare_typed(&claimed_by, &with(std::slice::from_ref(&i8)))
            .await?;
        let delete_claimed = "DELETE FROM idem_records \
             WHERE tenant = $1 AND operation = $2 AND key = $3 \
               AND claimant = $4 AND generation = $5 AND state = $6 \
             RETURNING generation";
        let delete_claimed = client
            .prepare_typed(delete_claimed, &with(&[i8.clone(), i8.clone(), i2.clone()]))
            .await?;
        let list = format!(
            "SELECT tenant, operation, key, {record} FROM idem_records \
              WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR operation = $2) \
                AND ($3::smallint IS NULL OR state = $3) AND ($4::smallint IS NULL OR verdict = $4) \
              ORDER BY CASE WHEN $3::smallint IS NULL THEN NULL ELSE coalesce(expires_at, created_at) END, \
                {KEY_ORDER} LIMIT $5"
        );
        let list = client
            .prepare_typed(&list, &[text.clone(), text, i2.clone(), i2, i8])
            .await?;
        let entity =
            |(sql, types): (&'static str, &'static [Type])| client.prepare_typed(sql, types);
        let entity_read = entity(ENTITY_READ).await?;
        let entity_move = entity(ENTITY_MOVE).await?;
        let entity_insert = entity(ENTITY_INSERT).await?;
        let entity_update = entity(ENTITY_UPDATE).await?;
        Ok(Statements {
            claim,
            read,
            get,
            replace,
            update,
            delete,
            claimed_by,
            delete_claimed,
            list,
            entity_read,
            entity_move,
            entity_insert,
            entity_update,
        })
    }
}
