//! The reads and the maintenance on MariaDB: list, stats, sweep (bounded batches under
//! `FOR UPDATE SKIP LOCKED`, so any replica may sweep), reconcile. idem-core decides
//! what sweep does to each record and how a check settles it.
//!
//! A scan compares with the database's clock read first (`idem_now()` once, as a
//! parameter), so that the server can use the index on the time it compares.

use idem_core::protocol::{self, Resolution, Swept};
use idem_core::{Config, Generation, Record, RecordId, Refusal, State, Timestamp};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, TxOpts, Value};

use super::MySqlStore;
use super::error::{contended, database};
use super::row::{COLUMNS, PENDING, SETTLED, TOMBSTONE, UNKNOWN, get, id_at, record_at};
use super::statements::{KEY_ORDER, clock};
use super::two_phase::{read, write_over};
use crate::error::{Error, MaintainError};
use crate::seam::filter::ListFilter;
use crate::seam::reconcile::Reconciling;
use crate::seam::report::{IntentCounts, Stats, SweepReport};

/// Records one sweep transaction handles at most: short transactions, so that claims
/// and other sweepers never wait long on the rows it locks.
const SWEEP_BATCH: usize = 500;
/// How many times a sweep's batch runs again after a deadlock or a lock wait that ran
/// out (the server rolled it back).
const SWEEP_TRIES: usize = 8;

/// The `state` and `verdict` columns of a state.
fn state_columns(state: State) -> (i16, Option<i16>) {
    match state {
        State::Pending => (PENDING, None),
        State::Succeeded => (SETTLED, Some(0)),
        State::Failed => (SETTLED, Some(1)),
        State::Unknown => (UNKNOWN, None),
        State::Forgotten => (TOMBSTONE, None),
    }
}

fn limit_of(limit: Option<usize>) -> i64 {
    limit.map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX))
}

fn number(row: &Row, index: usize) -> Result<u64, Error> {
    let value: Option<i64> = get(row, index, "a count")?;
    Ok(value.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

impl MySqlStore {
    pub(super) async fn list_records(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(RecordId, Record)>, Error> {
        filter.validate()?;
        let (state, verdict) = match filter.state.map(state_columns) {
            Some((state, verdict)) => (Some(state), verdict),
            None => (None, None),
        };
        let mut conn = self.conn("list").await?;
        let sql = format!(
            "SELECT tenant, operation, idem_key, {COLUMNS} FROM idem_records \
              WHERE (? IS NULL OR tenant = ?) AND (? IS NULL OR operation = ?) \
                AND (? IS NULL OR state = ?) AND (? IS NULL OR verdict = ?) \
              ORDER BY CASE WHEN ? IS NULL THEN NULL ELSE COALESCE(expires_at, created_at) END, \
                {KEY_ORDER} LIMIT ?"
        );
        let tenant = Value::from(filter.tenant.as_deref());
        let operation = Value::from(filter.operation.as_deref());
        let (state, verdict) = (Value::from(state), Value::from(verdict));
        let rows: Vec<Row> = conn
            .exec(
                sql,
                vec![
                    tenant.clone(),
                    tenant,
                    operation.clone(),
                    operation,
                    state.clone(),
                    state.clone(),
                    verdict.clone(),
                    verdict,
                    state,
                    Value::from(limit_of(filter.limit)),
                ],
            )
            .await
            .map_err(database("list"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 0)?;
                Ok((id.clone(), record_at(row, 3, &id)?))
            })
            .collect()
    }

    /// The number of Unknown records, read on the index of open records.
    pub(super) async fn unknown_now(&self) -> Result<u64, MaintainError> {
        let mut conn = self.conn("stats").await?;
        let count: Option<i64> = conn
            .query_first(format!(
                "SELECT COUNT(*) FROM idem_records WHERE state = {UNKNOWN}"
            ))
            .await
            .map_err(database("stats"))?;
        Ok(count.map_or(0, |c| u64::try_from(c).unwrap_or(0)))
    }

    pub(super) async fn stats_now(&self) -> Result<Stats, MaintainError> {
        let mut conn = self.conn("stats").await?;
        let now = clock(&mut conn, "stats").await?;
        let now = Value::from(i64::try_from(now.0).unwrap_or(i64::MAX));
        // Counting reads the whole table: on a large one it may take longer than a
        // protocol statement is allowed to, though not forever.
        let row: Option<Row> = conn
            .exec_first(
                "SET STATEMENT max_statement_time = 300 FOR \
                 SELECT CAST(COALESCE(SUM(state = 0), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(state = 1 AND verdict = 0), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(state = 1 AND verdict = 1), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(state = 2), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(state = 3), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(state = 0 AND lease_until <= ?), 0) AS SIGNED), \
                        CAST(COALESCE(SUM(expires_at <= ?), 0) AS SIGNED), \
                        ? - MIN(CASE WHEN state = 0 THEN created_at END), \
                        ? - MIN(CASE WHEN state = 2 THEN updated_at END), \
                        GREATEST(COALESCE(MAX(updated_at), 0), \
                                 COALESCE((SELECT value FROM idem_meta WHERE name = 'clock_floor'), 0)), \
                        (SELECT CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
                          WHERE table_schema = DATABASE() AND table_name = 'idem_records'), \
                        (SELECT CAST(next_not_cached_value - 1 AS SIGNED) FROM idem_generation) \
                   FROM idem_records",
                vec![now.clone(), now.clone(), now.clone(), now],
            )
            .await
            .map_err(database("stats"))?;
        let row = row.ok_or_else(|| Error::Corrupt {
            detail: "the counts of idem_records returned no row".into(),
        })?;
        let age = |i: usize| -> Result<Option<u64>, Error> {
            let value: Option<i64> = get(&row, i, "stats")?;
            Ok(value.map(|v| u64::try_from(v).unwrap_or(0)))
        };
        Ok(Stats {
            pending: number(&row, 0)?,
            succeeded: number(&row, 1)?,
            failed: number(&row, 2)?,
            unknown: number(&row, 3)?,
            forgotten: number(&row, 4)?,
            pending_lease_expired: number(&row, 5)?,
            expired: number(&row, 6)?,
            oldest_pending_age_ms: age(7)?,
            oldest_unknown_age_ms: age(8)?,
            clock_floor: Timestamp(number(&row, 9)?),
            file_bytes: number(&row, 10)?,
            generation: Generation(number(&row, 11)?),
            intents: IntentCounts::default(),
        })
    }

    pub(super) async fn sweep_now(
        &self,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        let mut report = SweepReport::default();
        let mut left = limit;
        let mut conn = self.conn("sweep").await?;
        let select = format!(
            "SELECT tenant, operation, idem_key, revision, {COLUMNS} FROM idem_records \
              WHERE expires_at <= ? ORDER BY expires_at LIMIT ?"
        );
        let config = &self.inner.config;
        if dry_run {
            let now = clock(&mut conn, "sweep").await?;
            let rows: Vec<Row> = conn
                .exec(
                    &select,
                    vec![
                        Value::from(i64::try_from(now.0).unwrap_or(i64::MAX)),
                        Value::from(limit_of(Some(limit.saturating_add(1)))),
                    ],
                )
                .await
                .map_err(database("sweep"))?;
            report.remaining_expired = rows.len() > limit;
            for row in rows.iter().take(limit) {
                let id = id_at(row, 0)?;
                match protocol::sweep(&record_at(row, 4, &id)?, now, config) {
                    Swept::Tombstone(_) => report.tombstoned += 1,
                    Swept::Delete => report.removed += 1,
                    Swept::Keep => {}
                }
            }
            return Ok(report);
        }
        let locking = format!("{select} FOR UPDATE SKIP LOCKED");
        while left > 0 {
            let batch = left.min(SWEEP_BATCH);
            // A deadlock with a claimer rolls the batch back: it is swept again, a
            // bounded number of times.
            let mut tries = 0;
            let (tombstoned, removed, rows) = loop {
                tries += 1;
                match self.sweep_batch(&mut conn, &locking, batch).await {
                    Err(Error::MySql { source, .. })
                        if contended(&source) && tries < SWEEP_TRIES => {}
                    done => break done?,
                }
            };
            report.tombstoned += tombstoned;
            report.removed += removed;
            left -= batch;
            if rows < batch {
                return Ok(report);
            }
        }
        let now = clock(&mut conn, "sweep").await?;
        let more: Option<i64> = conn
            .exec_first(
                "SELECT EXISTS (SELECT 1 FROM idem_records WHERE expires_at <= ?)",
                vec![Value::from(i64::try_from(now.0).unwrap_or(i64::MAX))],
            )
            .await
            .map_err(database("sweep"))?;
        report.remaining_expired = more == Some(1);
        Ok(report)
    }
}

impl MySqlStore {
    /// One batch of a sweep in its own transaction: up to `batch` expired rows, locked
    /// (skipping those another transaction holds), tombstoned or removed; what it did and
    /// how many rows it read. A failure rolls it all back.
    async fn sweep_batch(
        &self,
        conn: &mut mysql_async::Conn,
        locking: &str,
        batch: usize,
    ) -> Result<(u64, u64, usize), Error> {
        let config = &self.inner.config;
        let mut txn = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(database("sweep"))?;
        let now = clock(&mut txn, "sweep").await?;
        let rows: Vec<Row> = txn
            .exec(
                locking,
                vec![
                    Value::from(i64::try_from(now.0).unwrap_or(i64::MAX)),
                    Value::from(limit_of(Some(batch))),
                ],
            )
            .await
            .map_err(database("sweep"))?;
        let (mut tombstoned, mut removed) = (0, 0);
        for row in &rows {
            let id = id_at(row, 0)?;
            let revision: i64 = get(row, 3, "idem_records")?;
            let record = record_at(row, 4, &id)?;
            let target = match protocol::sweep(&record, now, config) {
                Swept::Tombstone(tombstone) => Some(tombstone),
                Swept::Delete => None,
                Swept::Keep => continue,
            };
            // The row is locked by this transaction: its revision is the one read.
            if write_over(&mut txn, "sweep", &id, revision, target.as_ref(), None).await? {
                match target {
                    Some(_) => tombstoned += 1,
                    None => removed += 1,
                }
            }
        }
        txn.commit().await.map_err(database("sweep"))?;
        Ok((tombstoned, removed, rows.len()))
    }
}

impl Reconciling for MySqlStore {
    fn settings(&self) -> &Config {
        &self.inner.config
    }

    async fn unknown_records(&self, limit: usize) -> Result<Vec<(RecordId, Record)>, Error> {
        let mut conn = self.conn("reconcile").await?;
        let rows: Vec<Row> = conn
            .exec(
                format!(
                    "SELECT tenant, operation, idem_key, {COLUMNS} FROM idem_records \
                      WHERE state = {UNKNOWN} ORDER BY created_at, {KEY_ORDER} LIMIT ?"
                ),
                vec![Value::from(limit_of(Some(limit)))],
            )
            .await
            .map_err(database("reconcile"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 0)?;
                Ok((id.clone(), record_at(row, 3, &id)?))
            })
            .collect()
    }

    async fn settle_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        resolution: Resolution,
        _now: Timestamp,
    ) -> Result<bool, Error> {
        match self
            .resolve_fenced("reconcile", id, Some(generation), resolution)
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::Refused(
                Refusal::NotFound | Refusal::Stale { .. } | Refusal::WrongState { .. },
            )) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn silent_claims(
        &self,
        _now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(RecordId, Record, Timestamp)>, Error> {
        let mut conn = self.conn("recover_abandoned").await?;
        let now = clock(&mut conn, "recover_abandoned").await?;
        let rows: Vec<Row> = conn
            .exec(
                format!(
                    "SELECT tenant, operation, idem_key, {COLUMNS} FROM idem_records \
                      WHERE state = {PENDING} AND lease_until <= ? ORDER BY lease_until LIMIT ?"
                ),
                vec![
                    Value::from(i64::try_from(now.0).unwrap_or(i64::MAX)),
                    Value::from(limit_of(Some(limit))),
                ],
            )
            .await
            .map_err(database("recover_abandoned"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 0)?;
                let record = record_at(row, 3, &id)?;
                Ok((id, record, now))
            })
            .collect()
    }

    async fn abandon_claim(
        &self,
        id: &RecordId,
        record: &Record,
        at: Timestamp,
    ) -> Result<bool, Error> {
        let mut conn = self.conn("recover_abandoned").await?;
        // Only the claim that was found silent, as it was: a heartbeat or a settle that
        // came in between wins.
        let Some(seen) = read(&mut conn, "recover_abandoned", id).await? else {
            return Ok(false);
        };
        if seen.record != *record {
            return Ok(false);
        }
        let unknown = protocol::mark_unknown(Some(record), record.generation, at.max(seen.now))?;
        write_over(
            &mut conn,
            "recover_abandoned",
            id,
            seen.revision,
            Some(&unknown),
            None,
        )
        .await
    }
}
