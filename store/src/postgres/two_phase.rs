//! The protocol's steps as statements: a begin's claim and its write conditioned on the
//! version read, the fenced updates and deletes of the other inputs, the read-back after
//! a lost connection. idem-core decides each; the statements carry its writes.

use std::time::Duration;

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{
    Fingerprint, Generation, Record, RecordId, Refusal, State, Status, Terms, Timestamp,
};
use tokio_postgres::{GenericClient, Row};

use super::PgStore;
use super::error::{ambiguous, database};
use super::pool::Lent;
use super::row::{Columns, UNKNOWN, kept_at, record_at, signed, time_at};
use super::statements::Statements;
use crate::error::Error;
use crate::seam::lost::Claimant;
use crate::seam::template::{shifted, stand_in};

/// How many times a begin reads and tries to write before it gives up
/// ([`Error::Contended`]). A begin loses only to a write that changed the record
/// between its read and its write; each loss makes the record one a begin answers
/// without a write (in progress, unknown, claimed), so two or three are the most seen.
pub(super) const BEGIN_ATTEMPTS: u32 = 16;

/// How long a fenced input waits for the database to answer again after its connection
/// broke (a restart, a failover to a standby), before it gives up with the error.
const RECONNECT_WINDOW: Duration = Duration::from_secs(15);

/// How many times a fenced input runs again after the record changed under it into
/// one it still applies to, or after a connection lost mid-statement left it unapplied.
const FENCED_ATTEMPTS: u32 = 4;

/// What a fenced statement requires of the row: the generation (any, when `None`) and
/// the state.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fence {
    pub(super) generation: Option<Generation>,
    pub(super) state: i16,
}

pub(super) fn key_params(id: &RecordId) -> [&str; 3] {
    [id.tenant(), id.operation(), id.key()]
}

impl PgStore {
    pub(super) async fn connection(&self, operation: &'static str) -> Result<Lent<'_>, Error> {
        self.inner.pool.get().await.map_err(database(operation))
    }

    /// The record of `id` and the time a write of it would use.
    async fn read(
        &self,
        connection: &Lent<'_>,
        operation: &'static str,
        id: &RecordId,
    ) -> Result<Option<(Timestamp, Record)>, Error> {
        let [t, o, k] = key_params(id);
        let row = connection
            .client
            .query_opt(&connection.statements.read, &[&t, &o, &k])
            .await
            .map_err(database(operation))?;
        row.map(|row| Ok((time_at(&row, 0, id)?, record_at(&row, 1, id)?)))
            .transpose()
    }

    /// One try of a begin, its claim marked by `claimant`: the decision, or `None` when
    /// the record changed between its read and its write.
    pub(super) async fn begin_once(
        &self,
        connection: &Lent<'_>,
        id: &RecordId,
        fingerprint: Fingerprint,
        claimant: Claimant,
        terms: Terms,
    ) -> Result<Option<Decision>, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let [t, o, k] = key_params(id);
        let lease = signed("lease_ms", config.lease_ms)?;
        let fp = fingerprint.0.as_slice();
        let rows = connection
            .client
            .query(
                &connection.statements.claim,
                &[&t, &o, &k, &fp, &lease, &claimant.0],
            )
            .await
            .map_err(database("begin"))?;
        let (now, seen) = match rows.first() {
            Some(row) if claimed(row, id)? => {
                let record = record_at(row, 2, id)?;
                let now = time_at(row, 1, id)?;
                self.inner.cache.observe(now);
                let decided = protocol::begin(None, fingerprint, record.generation, now, config);
                expect_written(&decided.write, &record)?;
                return Ok(Some(decided.decision));
            }
            Some(row) => (time_at(row, 1, id)?, record_at(row, 2, id)?),
            // The key's record was committed after this statement's snapshot: read it.
            None => match self.read(connection, "begin", id).await? {
                Some(read) => read,
                // Deleted meanwhile: start over.
                None => return Ok(None),
            },
        };
        // The core decides with a stand-in for the next generation; the sequence gives
        // the real one when the write needs it.
        let stand_in = Generation(if seen.generation.0 == u64::MAX {
            0
        } else {
            u64::MAX
        });
        let decided = protocol::begin(Some(&seen), fingerprint, stand_in, now, config);
        self.inner.cache.observe(now);
        let put = match decided.write {
            idem_core::Write::Nothing => {
                if let Decision::Replay { .. } = decided.decision {
                    self.inner.cache.keep(id, &seen);
                }
                return Ok(Some(decided.decision));
            }
            idem_core::Write::Put(put) => put,
            // idem-core's begin only puts or writes nothing.
            idem_core::Write::Delete => unreachable!("protocol::begin never deletes"),
        };
        let Some(generation) = self
            .replace(
                &connection.client,
                &connection.statements,
                "begin",
                id,
                &seen,
                &put,
                Some(claimant),
            )
            .await?
        else {
            // The record changed since it was read: start over.
            return Ok(None);
        };
        if generation == seen.generation {
            return Ok(Some(decided.decision));
        }
        Ok(Some(
            protocol::begin(Some(&seen), fingerprint, generation, now, config).decision,
        ))
    }

    /// Writes `put` in place of `seen`, if the row is still the version `seen` was read
    /// from; a `put` with another generation than `seen`'s gets the sequence's next one,
    /// and `claimant` as its mark. The generation written, or `None` when the row
    /// changed meanwhile.
    #[allow(clippy::too_many_arguments)] // the statement's inputs, each named
    pub(super) async fn replace(
        &self,
        client: &impl GenericClient,
        statements: &Statements,
        operation: &'static str,
        id: &RecordId,
        seen: &Record,
        put: &Record,
        claimant: Option<Claimant>,
    ) -> Result<Option<Generation>, Error> {
        let [t, o, k] = key_params(id);
        let new_generation = put.generation != seen.generation;
        let was = Columns::of(seen)?;
        // The generation column is the sequence's next value or left as it is.
        let to = Columns::of(&Record {
            generation: seen.generation,
            ..put.clone()
        })?;
        let row = client
            .query_opt(
                &statements.replace,
                &[
                    &t,
                    &o,
                    &k,
                    &new_generation,
                    &was.generation,
                    &was.state,
                    &was.updated_at,
                    &was.lease_until,
                    &was.expires_at,
                    &to.fingerprint,
                    &to.state,
                    &to.verdict,
                    &to.created_at,
                    &to.updated_at,
                    &to.lease_until,
                    &to.completed_at,
                    &to.expires_at,
                    &to.outcome_code,
                    &to.outcome_body,
                    &claimant.map(|c| c.0),
                ],
            )
            .await
            .map_err(database(operation))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let generation: i64 = row.try_get(0).map_err(database(operation))?;
        u64::try_from(generation)
            .map(|g| Some(Generation(g)))
            .map_err(|_| Error::Corrupt {
                detail: format!("idem_generation gave {generation}"),
            })
    }

    /// Runs a fenced update: the core's record for this input, decided at time 0 by
    /// `template`, written at the row's time; `decide` gives the core's refusal when the
    /// fence does not hold.
    pub(super) async fn update(
        &self,
        operation: &'static str,
        id: &RecordId,
        fence: Fence,
        template: &Status,
        decide: impl Fn(Option<&Record>, Timestamp) -> Result<(), Refusal>,
    ) -> Result<Record, Error> {
        let offsets = Offsets::of(template)?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let applied = self
                .update_once(operation, id, fence, template, &offsets)
                .await;
            let connection = match applied {
                Ok(Some(record)) => return Ok(record),
                Err(e) if !ambiguous(&e) || attempts >= FENCED_ATTEMPTS => return Err(e),
                Err(e) => {
                    // The connection broke, maybe after the statement was sent: read
                    // back once the database answers again.
                    match self.read_back(operation, id).await {
                        Ok(Some((_, record)))
                            if fence.generation.is_none_or(|g| g == record.generation)
                                && record.status == shifted(template, record.updated_at) =>
                        {
                            return Ok(record);
                        }
                        Ok(Some((now, record))) if decide(Some(&record), now).is_ok() => continue,
                        _ => return Err(e),
                    }
                }
                Ok(None) => self.connection(operation).await?,
            };
            let current = self.read(&connection, operation, id).await?;
            let now = current.as_ref().map_or(Timestamp(0), |(now, _)| *now);
            decide(current.as_ref().map(|(_, r)| r), now)?;
            if attempts >= FENCED_ATTEMPTS {
                return Err(Error::Contended { attempts });
            }
        }
    }

    /// The record of `id`, read once the database answers again: after a connection
    /// lost mid-statement, during a restart or a failover. Waits with a growing pause, at
    /// most [`RECONNECT_WINDOW`]; then the last error.
    async fn read_back(
        &self,
        operation: &'static str,
        id: &RecordId,
    ) -> Result<Option<(Timestamp, Record)>, Error> {
        let deadline = tokio::time::Instant::now() + RECONNECT_WINDOW;
        let mut pause = Duration::from_millis(25);
        loop {
            let read = match self.connection(operation).await {
                Ok(connection) => self.read(&connection, operation, id).await,
                Err(e) => Err(e),
            };
            match read {
                Err(e) if ambiguous(&e) && tokio::time::Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// One try of a fenced update: the record written, or `None` when the fence did
    /// not hold. The statement returns only what it kept of the row and the time it
    /// wrote at; the rest of the record is `template` at that time, as the statement
    /// wrote it (the outcome is not sent back).
    async fn update_once(
        &self,
        operation: &'static str,
        id: &RecordId,
        fence: Fence,
        template: &Status,
        offsets: &Offsets,
    ) -> Result<Option<Record>, Error> {
        let connection = self.connection(operation).await?;
        let [t, o, k] = key_params(id);
        let generation = fence
            .generation
            .map(|g| signed("generation", g.0))
            .transpose()?;
        let row = connection
            .client
            .query_opt(
                &connection.statements.update,
                &[
                    &t,
                    &o,
                    &k,
                    &generation,
                    &fence.state,
                    &offsets.state,
                    &offsets.verdict,
                    &offsets.lease_until,
                    &offsets.completed_at,
                    &offsets.expires_at,
                    &offsets.outcome_code,
                    &offsets.outcome_body,
                ],
            )
            .await
            .map_err(database(operation))?;
        let Some(row) = row else { return Ok(None) };
        let (fingerprint, generation, created_at, updated_at) = kept_at(&row, id)?;
        Ok(Some(Record {
            fingerprint,
            generation,
            created_at,
            updated_at,
            status: shifted(template, updated_at),
        }))
    }

    /// Runs a fenced delete; `decide` gives the core's refusal when the fence does not
    /// hold.
    pub(super) async fn delete(
        &self,
        operation: &'static str,
        id: &RecordId,
        fence: Fence,
        decide: impl Fn(Option<&Record>) -> Result<(), Refusal>,
    ) -> Result<(), Error> {
        let [t, o, k] = key_params(id);
        let generation = fence
            .generation
            .map(|g| signed("generation", g.0))
            .transpose()?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let connection = self.connection(operation).await?;
            let deleted = connection
                .client
                .query_opt(
                    &connection.statements.delete,
                    &[&t, &o, &k, &generation, &fence.state],
                )
                .await
                .map_err(database(operation));
            drop(connection);
            let connection = match deleted {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => self.connection(operation).await?,
                Err(e) if !ambiguous(&e) || attempts >= FENCED_ATTEMPTS => return Err(e),
                Err(e) => match self.read_back(operation, id).await {
                    // Gone: the delete landed.
                    Ok(None) => return Ok(()),
                    Ok(Some((_, record))) if decide(Some(&record)).is_ok() => continue,
                    _ => return Err(e),
                },
            };
            let current = self.read(&connection, operation, id).await?;
            decide(current.as_ref().map(|(_, r)| r))?;
            if attempts >= FENCED_ATTEMPTS {
                return Err(Error::Contended { attempts });
            }
        }
    }
}

fn claimed(row: &Row, id: &RecordId) -> Result<bool, Error> {
    row.try_get(0).map_err(|e| Error::Corrupt {
        detail: format!("claim of {id}: {e}"),
    })
}

/// Checks that the database wrote the record the core decided: a statement that wrote
/// something else is a defect of the engine, reported rather than answered.
pub(super) fn expect_written(write: &idem_core::Write, written: &Record) -> Result<(), Error> {
    match write {
        idem_core::Write::Put(record) if record == written => Ok(()),
        other => Err(Error::Corrupt {
            detail: format!("the database wrote {written:?} where idem-core decided {other:?}"),
        }),
    }
}

/// A status decided at time 0, as the columns of the fenced update: its times are
/// offsets from the time of the write.
struct Offsets {
    state: i16,
    verdict: Option<i16>,
    lease_until: Option<i64>,
    completed_at: Option<i64>,
    expires_at: Option<i64>,
    outcome_code: Option<i32>,
    outcome_body: Option<Vec<u8>>,
}

impl Offsets {
    fn of(status: &Status) -> Result<Offsets, Error> {
        let columns = Columns::of(&Record {
            fingerprint: Fingerprint([0; 32]),
            generation: Generation(0),
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
            status: status.clone(),
        })?;
        Ok(Offsets {
            state: columns.state,
            verdict: columns.verdict,
            lease_until: columns.lease_until,
            completed_at: columns.completed_at,
            expires_at: columns.expires_at,
            outcome_code: columns.outcome_code,
            outcome_body: columns.outcome_body,
        })
    }
}

impl PgStore {
    /// Resolves the Unknown record of `id` (of `generation`, when given).
    pub(super) async fn resolve_fenced(
        &self,
        operation: &'static str,
        id: &RecordId,
        generation: Option<Generation>,
        resolution: Resolution,
    ) -> Result<Option<Record>, Error> {
        let config = self.inner.config.clone();
        let stand_in = stand_in(generation.unwrap_or(Generation(0)), State::Unknown);
        let fence = Fence {
            generation,
            state: UNKNOWN,
        };
        let fenced = |current: Option<&Record>| match (generation, current) {
            (Some(g), Some(record)) if record.generation != g => Err(Refusal::Stale {
                given: g,
                current: record.generation,
                state: record.state(),
            }),
            _ => Ok(()),
        };
        match protocol::resolve(Some(&stand_in), resolution.clone(), Timestamp(0), &config)? {
            Some(template) => self
                .update(operation, id, fence, &template.status, |current, now| {
                    fenced(current)?;
                    protocol::resolve(current, resolution.clone(), now, &config).map(drop)
                })
                .await
                .map(Some),
            None => self
                .delete(operation, id, fence, |current| {
                    fenced(current)?;
                    protocol::resolve(current, Resolution::NotExecuted, Timestamp(0), &config)
                        .map(drop)
                })
                .await
                .map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::{Outcome, Verdict};

    #[test]
    fn a_status_decided_at_zero_shifts_to_the_time_of_its_write() {
        let settled = Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(201, "ok"),
            completed_at: Timestamp(0),
            expires_at: Timestamp(86_400_000),
        };
        assert_eq!(
            shifted(&settled, Timestamp(1_000)),
            Status::Settled {
                verdict: Verdict::Succeeded,
                outcome: Outcome::new(201, "ok"),
                completed_at: Timestamp(1_000),
                expires_at: Timestamp(86_401_000),
            }
        );
        let offsets = Offsets::of(&settled).unwrap();
        assert_eq!(
            (
                offsets.state,
                offsets.completed_at,
                offsets.expires_at,
                offsets.lease_until
            ),
            (super::super::row::SETTLED, Some(0), Some(86_400_000), None)
        );
    }
}
