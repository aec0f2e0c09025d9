//! The statements of the engine, sent as prepared statements (the driver keeps them
//! per connection). Each protocol step is one autocommit statement; the time every
//! statement uses is the database's (`idem_now()`), never below the record's last
//! update, so that a record's times never go backwards.

use idem_core::Timestamp;
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};

use super::error::database;
use super::row::time_at;
use crate::error::Error;

/// A fresh key's claim: a plain `INSERT` (a duplicate key, error 1062, means a record is
/// there), returning what the database chose: the generation from the sequence and the
/// time. Parameters: tenant, operation, key, fingerprint, lease (ms), claimant (the
/// begin's mark, `seam::lost`; null for an atomic execute's claim).
pub(super) const CLAIM: &str = "INSERT INTO idem_records \
       (tenant, operation, idem_key, fingerprint, generation, revision, state, created_at, updated_at, lease_until, claimant) \
     VALUES (?, ?, ?, ?, NEXTVAL(idem_generation), 0, 0, idem_now(), idem_now(), idem_now() + ?, ?) \
     RETURNING generation, created_at, lease_until";

/// A begin's claim, or the record in the way, in one round trip: the claim of
/// [`CLAIM`], whose duplicate key changes nothing (`ON DUPLICATE KEY UPDATE` assigns a
/// column its own value) and returns the row in the way as it is, read under the lock
/// the insert took, so that it sees the winner. Which one came back is told by the
/// row's `claimant`: this begin's mark only on its own claim; never by the count of
/// affected rows, which the client's `CLIENT_FOUND_ROWS` flag changes. Returns
/// `(claimant, time, revision, record…)`. Parameters as [`CLAIM`]'s.
pub(super) const BEGIN: &str = "INSERT INTO idem_records \
       (tenant, operation, idem_key, fingerprint, generation, revision, state, created_at, updated_at, lease_until, claimant) \
     VALUES (?, ?, ?, ?, NEXTVAL(idem_generation), 0, 0, idem_now(), idem_now(), idem_now() + ?, ?) \
     ON DUPLICATE KEY UPDATE tenant = tenant \
     RETURNING claimant, GREATEST(idem_now(), updated_at), revision, \
       fingerprint, generation, state, verdict, created_at, updated_at, lease_until, \
       completed_at, expires_at, outcome_code, outcome_body";

/// One record with the time a write of it would use and its revision:
/// `(time, revision, record…)`. Parameters: tenant, operation, key.
pub(super) const READ: &str = "SELECT GREATEST(idem_now(), updated_at), revision, \
       fingerprint, generation, state, verdict, created_at, updated_at, lease_until, \
       completed_at, expires_at, outcome_code, outcome_body \
     FROM idem_records WHERE tenant = ? AND operation = ? AND idem_key = ?";

/// One record: `(record…)`. Parameters: tenant, operation, key.
pub(super) const GET: &str = "SELECT fingerprint, generation, state, verdict, created_at, \
       updated_at, lease_until, completed_at, expires_at, outcome_code, outcome_body \
     FROM idem_records WHERE tenant = ? AND operation = ? AND idem_key = ?";

/// The next generation of the sequence.
pub(super) const NEXT_GENERATION: &str = "SELECT NEXTVAL(idem_generation)";

/// The record the core decided, over the revision read: one affected row when the row
/// was still that revision (the revision always changes, so the count does not depend on
/// `CLIENT_FOUND_ROWS`). A new generation carries the claimant given; otherwise the row
/// keeps its own (the claimant's assignment comes first, so it compares the generation
/// read). Parameters: the record's generation, the claimant, the record's columns, then
/// tenant, operation, key, the revision read.
pub(super) const REPLACE: &str = "UPDATE idem_records SET claimant = IF(generation = ?, claimant, ?), \
       fingerprint = ?, generation = ?, \
       state = ?, verdict = ?, created_at = ?, updated_at = ?, lease_until = ?, \
       completed_at = ?, expires_at = ?, outcome_code = ?, outcome_body = ?, \
       revision = revision + 1 \
     WHERE tenant = ? AND operation = ? AND idem_key = ? AND revision = ?";

/// A pending record's heartbeat, complete or mark unknown in one statement, fenced by
/// generation and state: the status the core decided on a stand-in at time 0, its times
/// counted from the time of the write (`GREATEST(idem_now(), updated_at)`, set first, so
/// that the later assignments read it), which the statement hands back as
/// `LAST_INSERT_ID` in its answer (MariaDB's `UPDATE` returns no row). One affected row
/// is a win: the revision always changes. Parameters: state, verdict, then the offsets of
/// lease_until, completed_at and expires_at (null: null), outcome code and body, then
/// tenant, operation, key, generation, the state required.
pub(super) const UPDATE_FENCED: &str = "UPDATE idem_records SET \
       updated_at = LAST_INSERT_ID(GREATEST(idem_now(), updated_at)), \
       state = ?, verdict = ?, lease_until = updated_at + ?, completed_at = updated_at + ?, \
       expires_at = updated_at + ?, outcome_code = ?, outcome_body = ?, \
       revision = revision + 1 \
     WHERE tenant = ? AND operation = ? AND idem_key = ? AND generation = ? AND state = ?";

/// A pending record's release in one statement, fenced by generation and state.
/// Parameters: tenant, operation, key, generation, the state required.
pub(super) const DELETE_FENCED: &str = "DELETE FROM idem_records \
     WHERE tenant = ? AND operation = ? AND idem_key = ? AND generation = ? AND state = ?";

/// The delete the core decided, over the revision read. Parameters: tenant, operation,
/// key, the revision read.
pub(super) const DELETE: &str = "DELETE FROM idem_records \
     WHERE tenant = ? AND operation = ? AND idem_key = ? AND revision = ?";

/// The record a claimant's claim wrote: `(record…)`. Parameters: tenant, operation, key,
/// claimant.
pub(super) const CLAIMED_BY: &str = "SELECT fingerprint, generation, state, verdict, created_at, \
       updated_at, lease_until, completed_at, expires_at, outcome_code, outcome_body \
     FROM idem_records WHERE tenant = ? AND operation = ? AND idem_key = ? AND claimant = ?";

/// A lost claim given back, conditioned on its claimant, generation and state.
/// Parameters: tenant, operation, key, claimant, generation, state.
pub(super) const DELETE_CLAIMED: &str = "DELETE FROM idem_records \
     WHERE tenant = ? AND operation = ? AND idem_key = ? \
       AND claimant = ? AND generation = ? AND state = ?";

/// The database's clock, in ms.
pub(super) const CLOCK: &str = "SELECT idem_now()";

/// The order of ids on every engine: the order of their key bytes, as the file keeps them
/// (`RecordId::to_key_bytes`: a tenant's length byte, the tenant, an operation's length
/// byte, the operation, the key). The columns are `VARBINARY`, compared byte by byte.
pub(super) const KEY_ORDER: &str = "LENGTH(tenant), tenant, LENGTH(operation), operation, idem_key";

/// Runs `sql` with `params` and returns how many rows it changed.
pub(super) async fn exec_count<Q: Queryable>(
    q: &mut Q,
    sql: &str,
    params: Vec<Value>,
) -> Result<u64, mysql_async::Error> {
    exec_answer(q, sql, params)
        .await
        .map(|(changed, _)| changed)
}

/// Runs `sql` with `params` and returns how many rows it changed and the
/// `LAST_INSERT_ID` of its answer.
pub(super) async fn exec_answer<Q: Queryable>(
    q: &mut Q,
    sql: &str,
    params: Vec<Value>,
) -> Result<(u64, Option<u64>), mysql_async::Error> {
    let result = q.exec_iter(sql, params).await?;
    let answer = (result.affected_rows(), result.last_insert_id());
    result.drop_result().await?;
    Ok(answer)
}

/// The database's clock now.
pub(super) async fn clock<Q: Queryable>(
    q: &mut Q,
    operation: &'static str,
) -> Result<Timestamp, Error> {
    let row: Option<Row> = q.query_first(CLOCK).await.map_err(database(operation))?;
    let row = row.ok_or_else(|| Error::Corrupt {
        detail: "idem_now() returned no row".into(),
    })?;
    time_at(&row, 0)
}
