//! The protocol's steps as statements: a begin's claim and its write conditioned on the
//! revision read, the fenced writes of the other inputs, the read-back after a lost
//! connection. idem-core decides each; the statements carry its writes.

use std::time::Duration;

use idem_core::protocol::{self, Decision, Resolution, Write};
use idem_core::{Fingerprint, Generation, Record, RecordId, Refusal, Terms, Timestamp};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};

use super::MySqlStore;
use super::error::{
    LOCK_WAIT_TIMEOUT, ambiguous, code, contended, database, out_of_reach, read_only,
};
use super::row::{Columns, get, key_values, record_at, signed, time_at};
use super::statements::{BEGIN, DELETE, NEXT_GENERATION, READ, REPLACE, exec_count};
use crate::error::Error;
use crate::seam::lost::Claimant;

/// How many times a begin reads and tries to write before it gives up
/// ([`Error::Contended`]). A begin loses only to a write that changed the record
/// between its read and its write, or to a deadlock or a lock wait that ran out.
pub(super) const BEGIN_ATTEMPTS: u32 = 16;

/// How long a fenced input waits for the database to answer again after its connection
/// broke (a restart), before it gives up with the error.
const RECONNECT_WINDOW: Duration = Duration::from_secs(15);

/// How many times a fenced input reads and writes again after the row changed under it,
/// a deadlock, or a connection lost mid-statement that left it unapplied.
const FENCED_ATTEMPTS: u32 = 8;

/// A row as read, with the time a write of it uses and its revision.
pub(super) struct Seen {
    /// The database's clock, never below the row's last update.
    pub(super) now: Timestamp,
    /// The row's revision: a write over this read is conditioned on it.
    pub(super) revision: i64,
    /// The record.
    pub(super) record: Record,
}

/// The record of `id` with the time a write of it would use and its revision.
pub(super) async fn read<Q: Queryable>(
    q: &mut Q,
    operation: &'static str,
    id: &RecordId,
) -> Result<Option<Seen>, Error> {
    let row: Option<Row> = q
        .exec_first(READ, key_values(id).to_vec())
        .await
        .map_err(database(operation))?;
    row.map(|row| {
        Ok(Seen {
            now: time_at(&row, 0)?,
            revision: get(&row, 1, "idem_records")?,
            record: record_at(&row, 2, id)?,
        })
    })
    .transpose()
}

/// Writes `target` (or deletes the row, for `None`) over the revision `revision` of
/// `id`'s row: true when it did, false when the row changed since it was read. A target
/// of a new generation carries `claimant`'s mark (none: null); one of the same
/// generation keeps the row's.
pub(super) async fn write_over<Q: Queryable>(
    q: &mut Q,
    operation: &'static str,
    id: &RecordId,
    revision: i64,
    target: Option<&Record>,
    claimant: Option<Claimant>,
) -> Result<bool, Error> {
    let mut params = Vec::with_capacity(17);
    let sql = match target {
        Some(record) => {
            let columns = Columns::of(record)?;
            params.push(Value::from(columns.generation));
            params.push(Value::from(claimant.map(|c| c.0)));
            params.extend(columns.values());
            REPLACE
        }
        None => DELETE,
    };
    params.extend(key_values(id));
    params.push(Value::from(revision));
    let changed = exec_count(q, sql, params)
        .await
        .map_err(database(operation))?;
    Ok(changed == 1)
}

/// The sequence's next generation.
pub(super) async fn next_generation<Q: Queryable>(
    q: &mut Q,
    operation: &'static str,
) -> Result<Generation, Error> {
    let value: Option<i64> = q
        .query_first(NEXT_GENERATION)
        .await
        .map_err(database(operation))?;
    value
        .and_then(|v| u64::try_from(v).ok())
        .map(Generation)
        .ok_or_else(|| Error::Corrupt {
            detail: format!("idem_generation gave {value:?}"),
        })
}

/// True when `e` is the database's refusal of a statement that ran into another
/// transaction (a deadlock, a lock wait that ran out): it wrote nothing.
fn lost_to_a_lock(e: &Error) -> bool {
    matches!(e, Error::MySql { source, .. } if contended(source))
}

impl MySqlStore {
    pub(super) async fn conn(&self, operation: &'static str) -> Result<Conn, Error> {
        self.inner
            .hosts
            .get_conn()
            .await
            .map_err(database(operation))
    }

    /// One try of a begin, its claim marked by `claimant`: a claim, or the core's answer
    /// on the record in the way; `None` when the record changed under it and the begin
    /// starts over.
    pub(super) async fn begin_once(
        &self,
        conn: &mut Conn,
        id: &RecordId,
        fingerprint: Fingerprint,
        claimant: Claimant,
        terms: Terms,
    ) -> Result<Option<Decision>, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let lease = signed("lease_ms", config.lease_ms)?;
        let mut params = key_values(id).to_vec();
        params.push(Value::from(fingerprint.0.to_vec()));
        params.push(Value::from(lease));
        params.push(Value::from(claimant.0));
        // The whole answer read, not its first row only, so that an error the server
        // sends after the row (a commit that failed) is not missed.
        let answered: Result<Option<Row>, _> = conn
            .exec::<Row, _, _>(BEGIN, params)
            .await
            .map(|rows| rows.into_iter().next());
        let seen = match answered {
            Ok(Some(row)) => {
                let seen = Seen {
                    now: time_at(&row, 1)?,
                    revision: get(&row, 2, "idem_records")?,
                    record: record_at(&row, 3, id)?,
                };
                let mark: Option<i64> = get(&row, 0, "idem_records")?;
                if mark != Some(claimant.0) {
                    // The record in the way.
                    seen
                } else {
                    // This begin's claim.
                    let record = seen.record;
                    self.inner.cache.observe(record.created_at);
                    let decided = protocol::begin(
                        None,
                        fingerprint,
                        record.generation,
                        record.created_at,
                        config,
                    );
                    expect_written(&decided.write, &record)?;
                    self.inner.held.keep(id, &record);
                    return Ok(Some(decided.decision));
                }
            }
            Ok(None) => {
                return Err(Error::Corrupt {
                    detail: format!("the begin of {id} returned no row"),
                });
            }
            // Another transaction holds the key past the lock timeout: an execute's open
            // claim (or an import).
            Err(e) if code(&e) == Some(LOCK_WAIT_TIMEOUT) => {
                return self.held_open(conn).await.map(Some);
            }
            Err(e) if contended(&e) => return Ok(None),
            Err(e) => return Err(database("begin")(e)),
        };
        // The core decides with a stand-in for the next generation; the sequence gives
        // the real one when the write needs it.
        let stand_in = Generation(if seen.record.generation.0 == u64::MAX {
            0
        } else {
            u64::MAX
        });
        let decided = protocol::begin(Some(&seen.record), fingerprint, stand_in, seen.now, config);
        self.inner.cache.observe(seen.now);
        let (decision, target) = match decided.write {
            Write::Nothing => {
                if let Decision::Replay { .. } = decided.decision {
                    self.inner.cache.keep(id, &seen.record);
                }
                return Ok(Some(decided.decision));
            }
            Write::Put(put) if put.generation != seen.record.generation => {
                let generation = next_generation(conn, "begin").await?;
                let again = protocol::begin(
                    Some(&seen.record),
                    fingerprint,
                    generation,
                    seen.now,
                    config,
                );
                match again.write {
                    Write::Put(put) => (again.decision, Some(put)),
                    other => {
                        return Err(Error::Corrupt {
                            detail: format!(
                                "idem-core decided {other:?} on a second look at the same record"
                            ),
                        });
                    }
                }
            }
            Write::Put(put) => (decided.decision, Some(put)),
            Write::Delete => (decided.decision, None),
        };
        let written = write_over(
            conn,
            "begin",
            id,
            seen.revision,
            target.as_ref(),
            Some(claimant),
        );
        match written.await {
            Ok(true) => {
                if let (Decision::Claimed { .. }, Some(claim)) = (&decision, &target) {
                    self.inner.held.keep(id, claim);
                }
                Ok(Some(decision))
            }
            // The record changed since it was read: start over.
            Ok(false) => Ok(None),
            Err(Error::MySql { source, .. }) if code(&source) == Some(LOCK_WAIT_TIMEOUT) => {
                self.held_open(conn).await.map(Some)
            }
            Err(e) if lost_to_a_lock(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The answer for a key another transaction holds open past the lock timeout (an
    /// execute's claim, not committed yet): in progress, with generation 0 (the claim
    /// has none yet) and a `lease_until` one lease from now.
    pub(super) async fn held_open(&self, conn: &mut Conn) -> Result<Decision, Error> {
        let now = super::statements::clock(conn, "begin").await?;
        Ok(Decision::InProgress {
            generation: Generation(0),
            lease_until: now.plus_millis(self.inner.config.lease_ms),
        })
    }

    /// Runs a fenced input: reads the record, lets `decide` (the core) give the record to
    /// write (`None`: delete it) or its refusal, and writes it over the revision read. A
    /// write that lost to another starts over; after a connection lost mid-statement the
    /// record is read back before the answer.
    pub(super) async fn fenced(
        &self,
        operation: &'static str,
        id: &RecordId,
        decide: impl Fn(Option<&Record>, Timestamp) -> Result<Option<Record>, Refusal>,
    ) -> Result<Option<Record>, Error> {
        for _ in 0..FENCED_ATTEMPTS {
            // Read once the database answers (it may be restarting), then write on a
            // connection of the pool.
            let seen = self.read_back(operation, id).await?;
            if let Some(seen) = &seen {
                self.inner.cache.observe(seen.now);
            }
            let mut conn = self.conn(operation).await?;
            let now = seen.as_ref().map_or(Timestamp(0), |s| s.now);
            let target = decide(seen.as_ref().map(|s| &s.record), now)?;
            let Some(seen) = seen else {
                return Err(Error::Refused(Refusal::NotFound));
            };
            let written = write_over(
                &mut conn,
                operation,
                id,
                seen.revision,
                target.as_ref(),
                None,
            );
            match written.await {
                Ok(true) => return Ok(target),
                Ok(false) => {}
                Err(e) if lost_to_a_lock(&e) => {}
                // A demoted primary: start over on the host that takes writes now.
                Err(e) if read_only(&e) => self.inner.hosts.failed(),
                Err(e) if ambiguous(&e) => {
                    drop(conn);
                    self.inner.hosts.failed();
                    // The connection broke, maybe after the statement was applied: read
                    // back once the database answers again.
                    match self.read_back(operation, id).await {
                        Ok(Some(after))
                            if after.revision == seen.revision + 1
                                && Some(&after.record) == target.as_ref() =>
                        {
                            return Ok(target);
                        }
                        Ok(None) if target.is_none() => return Ok(None),
                        Ok(_) => {}
                        Err(_) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended {
            attempts: FENCED_ATTEMPTS,
        })
    }

    /// The record of `id`, read once the database answers: at once, or after a connection
    /// lost mid-statement, during a restart. Waits with a growing pause, at most
    /// [`RECONNECT_WINDOW`]; then the last error.
    pub(super) async fn read_back(
        &self,
        operation: &'static str,
        id: &RecordId,
    ) -> Result<Option<Seen>, Error> {
        let deadline = tokio::time::Instant::now() + RECONNECT_WINDOW;
        let mut pause = Duration::from_millis(25);
        loop {
            let read = match self.conn(operation).await {
                Ok(mut conn) => read(&mut conn, operation, id).await,
                Err(e) => Err(e),
            };
            match read {
                Err(e)
                    if (ambiguous(&e) || out_of_reach(&e))
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    self.inner.hosts.failed();
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// Resolves the Unknown record of `id` (of `generation`, when given).
    pub(super) async fn resolve_fenced(
        &self,
        operation: &'static str,
        id: &RecordId,
        generation: Option<Generation>,
        resolution: Resolution,
    ) -> Result<Option<Record>, Error> {
        let config = self.inner.config.clone();
        self.fenced(operation, id, |current, now| {
            if let (Some(g), Some(record)) = (generation, current)
                && record.generation != g
            {
                return Err(Refusal::Stale {
                    given: g,
                    current: record.generation,
                    state: record.state(),
                });
            }
            protocol::resolve(current, resolution.clone(), now, &config)
        })
        .await
    }
}

/// Checks that the database wrote the record the core decided: a statement that wrote
/// something else is a defect of the engine, reported rather than answered.
pub(super) fn expect_written(write: &Write, written: &Record) -> Result<(), Error> {
    match write {
        Write::Put(record) if record == written => Ok(()),
        other => Err(Error::Corrupt {
            detail: format!("the database wrote {written:?} where idem-core decided {other:?}"),
        }),
    }
}
