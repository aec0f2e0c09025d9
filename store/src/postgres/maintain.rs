//! The reads and the maintenance on PostgreSQL: list, stats, sweep (bounded batches
//! under `FOR UPDATE SKIP LOCKED`, so any replica may sweep), reconcile. idem-core
//! decides what sweep does to each record and how a check settles it.

use idem_core::protocol::{self, Resolution, Swept};
use idem_core::{Config, Generation, Record, RecordId, Refusal, State, Timestamp};

use super::PgStore;
use super::error::database;
use super::row::{Columns, PENDING, SETTLED, TOMBSTONE, UNKNOWN, columns, id_at, record_at};
use super::statements::KEY_ORDER;
use crate::error::{Error, MaintainError};
use crate::seam::filter::ListFilter;
use crate::seam::reconcile::{self, Reconciling};
use crate::seam::report::{Abandoned, IntentCounts, Stats, SweepReport};

/// Records one sweep transaction handles at most: short transactions, so that claims
/// and other sweepers never wait long on the rows it locks.
const SWEEP_BATCH: usize = 500;

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

fn limit_of(limit: Option<usize>) -> Option<i64> {
    limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

impl PgStore {
    pub(super) async fn list_records(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(RecordId, Record)>, Error> {
        filter.validate()?;
        let (state, verdict) = match filter.state.map(state_columns) {
            Some((state, verdict)) => (Some(state), verdict),
            None => (None, None),
        };
        let connection = self.connection("list").await?;
        let rows = connection
            .client
            .query(
                &connection.statements.list,
                &[
                    &filter.tenant,
                    &filter.operation,
                    &state,
                    &verdict,
                    &limit_of(filter.limit),
                ],
            )
            .await
            .map_err(database("list"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 0)?;
                let record = record_at(row, 3, &id)?;
                Ok((id, record))
            })
            .collect()
    }

    /// The number of Unknown records, read on the index of open records.
    pub(super) async fn unknown_now(&self) -> Result<u64, MaintainError> {
        let connection = self.connection("stats").await?;
        let row = connection
            .client
            .query_one(
                &format!("SELECT count(*) FROM idem_records WHERE state = {UNKNOWN}"),
                &[],
            )
            .await
            .map_err(database("stats"))?;
        let count: i64 = row.try_get(0).map_err(database("stats"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    pub(super) async fn stats_now(&self) -> Result<Stats, MaintainError> {
        let mut connection = self.connection("stats").await?;
        // Counting reads the whole table: on a large one it may take longer than a
        // protocol statement is allowed to, though not forever.
        let txn = connection
            .client
            .build_transaction()
            .read_only(true)
            .start()
            .await
            .map_err(database("stats"))?;
        txn.batch_execute("SET LOCAL statement_timeout = '5min'")
            .await
            .map_err(database("stats"))?;
        let row = txn
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 0), \
                        count(*) FILTER (WHERE state = 1 AND verdict = 0), \
                        count(*) FILTER (WHERE state = 1 AND verdict = 1), \
                        count(*) FILTER (WHERE state = 2), \
                        count(*) FILTER (WHERE state = 3), \
                        count(*) FILTER (WHERE state = 0 AND lease_until <= idem_now()), \
                        count(*) FILTER (WHERE expires_at <= idem_now()), \
                        idem_now() - min(created_at) FILTER (WHERE state = 0), \
                        idem_now() - min(updated_at) FILTER (WHERE state = 2), \
                        GREATEST(max(updated_at), \
                                 (SELECT value FROM idem_meta WHERE name = 'clock_floor'), 0), \
                        pg_total_relation_size('idem_records'), \
                        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM idem_generation) \
                   FROM idem_records",
                &[],
            )
            .await
            .map_err(database("stats"))?;
        txn.commit().await.map_err(database("stats"))?;
        let number = |i: usize| -> Result<u64, Error> {
            let value: i64 = row.try_get(i).map_err(database("stats"))?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        let age = |i: usize| -> Result<Option<u64>, Error> {
            let value: Option<i64> = row.try_get(i).map_err(database("stats"))?;
            Ok(value.map(|v| u64::try_from(v).unwrap_or(0)))
        };
        Ok(Stats {
            pending: number(0)?,
            succeeded: number(1)?,
            failed: number(2)?,
            unknown: number(3)?,
            forgotten: number(4)?,
            pending_lease_expired: number(5)?,
            expired: number(6)?,
            oldest_pending_age_ms: age(7)?,
            oldest_unknown_age_ms: age(8)?,
            clock_floor: Timestamp(number(9)?),
            file_bytes: number(10)?,
            generation: Generation(number(11)?),
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
        let mut connection = self.connection("sweep").await?;
        let select = format!(
            "SELECT idem_now(), tenant, operation, key, {} FROM idem_records \
              WHERE expires_at <= idem_now() ORDER BY expires_at LIMIT $1",
            columns("")
        );
        if dry_run {
            let rows = connection
                .client
                .query(&select, &[&limit_of(Some(limit.saturating_add(1)))])
                .await
                .map_err(database("sweep"))?;
            report.remaining_expired = rows.len() > limit;
            for row in rows.iter().take(limit) {
                let id = id_at(row, 1)?;
                let now = super::row::time_at(row, 0, &id)?;
                match protocol::sweep(&record_at(row, 4, &id)?, now, &self.inner.config) {
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
            let txn = connection
                .client
                .transaction()
                .await
                .map_err(database("sweep"))?;
            let rows = txn
                .query(&locking, &[&limit_of(Some(batch))])
                .await
                .map_err(database("sweep"))?;
            let mut tombstones = SweepRows::default();
            let mut deletes = SweepRows::default();
            for row in &rows {
                let id = id_at(row, 1)?;
                let now = super::row::time_at(row, 0, &id)?;
                match protocol::sweep(&record_at(row, 4, &id)?, now, &self.inner.config) {
                    Swept::Tombstone(tombstone) => tombstones.push(&id, Some(&tombstone))?,
                    Swept::Delete => deletes.push(&id, None)?,
                    Swept::Keep => {}
                }
            }
            if !tombstones.is_empty() {
                txn.execute(
                    "UPDATE idem_records r SET state = u.state, verdict = u.verdict, \
                        updated_at = u.updated_at, completed_at = u.completed_at, \
                        expires_at = u.expires_at, lease_until = NULL, \
                        outcome_code = NULL, outcome_body = NULL \
                       FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], \
                                   $5::smallint[], $6::bigint[], $7::bigint[], $8::bigint[]) \
                            AS u(tenant, operation, key, state, verdict, updated_at, completed_at, expires_at) \
                      WHERE r.tenant = u.tenant AND r.operation = u.operation AND r.key = u.key",
                    &[
                        &tombstones.tenants,
                        &tombstones.operations,
                        &tombstones.keys,
                        &tombstones.states,
                        &tombstones.verdicts,
                        &tombstones.updated_at,
                        &tombstones.completed_at,
                        &tombstones.expires_at,
                    ],
                )
                .await
                .map_err(database("sweep"))?;
            }
            if !deletes.is_empty() {
                txn.execute(
                    "DELETE FROM idem_records r \
                      USING unnest($1::text[], $2::text[], $3::text[]) AS u(tenant, operation, key) \
                      WHERE r.tenant = u.tenant AND r.operation = u.operation AND r.key = u.key",
                    &[&deletes.tenants, &deletes.operations, &deletes.keys],
                )
                .await
                .map_err(database("sweep"))?;
            }
            txn.commit().await.map_err(database("sweep"))?;
            report.tombstoned += tombstones.len() as u64;
            report.removed += deletes.len() as u64;
            left -= batch;
            if rows.len() < batch {
                return Ok(report);
            }
        }
        report.remaining_expired = connection
            .client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM idem_records WHERE expires_at <= idem_now())",
                &[],
            )
            .await
            .and_then(|row| row.try_get(0))
            .map_err(database("sweep"))?;
        Ok(report)
    }

    /// Claims whose lease ran out on the database's clock: under
    /// [`idem_core::LeaseExpiry::Unknown`] each turns Unknown (as a begin would turn it),
    /// written only over the version read, so a heartbeat that came in between wins;
    /// under [`idem_core::LeaseExpiry::Takeover`] they are listed and left for the next
    /// begin. At most `limit` claims are looked at, the longest silent first.
    ///
    /// # Errors
    ///
    /// A failure of the database; claims turned Unknown before it stay so.
    pub async fn recover_abandoned(&self, limit: usize) -> Result<Abandoned, Error> {
        reconcile::recover_abandoned(self, Timestamp(0), limit).await
    }
}

impl Reconciling for PgStore {
    fn settings(&self) -> &Config {
        &self.inner.config
    }

    async fn unknown_records(&self, limit: usize) -> Result<Vec<(RecordId, Record)>, Error> {
        let connection = self.connection("reconcile").await?;
        let rows = connection
            .client
            .query(
                &format!(
                    "SELECT tenant, operation, key, {} FROM idem_records WHERE state = 2 \
                      ORDER BY created_at, {KEY_ORDER} LIMIT $1",
                    columns("")
                ),
                &[&limit_of(Some(limit))],
            )
            .await
            .map_err(database("reconcile"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 0)?;
                let record = record_at(row, 3, &id)?;
                Ok((id, record))
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
        let connection = self.connection("recover_abandoned").await?;
        let rows = connection
            .client
            .query(
                &format!(
                    "SELECT idem_now(), tenant, operation, key, {} FROM idem_records \
                      WHERE state = 0 AND lease_until <= idem_now() \
                      ORDER BY lease_until LIMIT $1",
                    columns("")
                ),
                &[&limit_of(Some(limit))],
            )
            .await
            .map_err(database("recover_abandoned"))?;
        rows.iter()
            .map(|row| {
                let id = id_at(row, 1)?;
                let now = super::row::time_at(row, 0, &id)?;
                let record = record_at(row, 4, &id)?;
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
        let unknown = protocol::mark_unknown(Some(record), record.generation, at)?;
        let connection = self.connection("recover_abandoned").await?;
        Ok(self
            .replace(
                &connection.client,
                &connection.statements,
                "recover_abandoned",
                id,
                record,
                &unknown,
                None,
            )
            .await?
            .is_some())
    }
}

/// The rows of one sweep batch, as the arrays its statement takes.
#[derive(Default)]
struct SweepRows {
    tenants: Vec<String>,
    operations: Vec<String>,
    keys: Vec<String>,
    states: Vec<i16>,
    verdicts: Vec<Option<i16>>,
    updated_at: Vec<i64>,
    completed_at: Vec<Option<i64>>,
    expires_at: Vec<Option<i64>>,
}

impl SweepRows {
    fn push(&mut self, id: &RecordId, record: Option<&Record>) -> Result<(), Error> {
        self.tenants.push(id.tenant().to_owned());
        self.operations.push(id.operation().to_owned());
        self.keys.push(id.key().to_owned());
        if let Some(record) = record {
            let c = Columns::of(record)?;
            self.states.push(c.state);
            self.verdicts.push(c.verdict);
            self.updated_at.push(c.updated_at);
            self.completed_at.push(c.completed_at);
            self.expires_at.push(c.expires_at);
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
