//! The fenced inputs of a pending claim in one statement each: a heartbeat, a complete
//! or a mark unknown as one `UPDATE`, a release as one `DELETE`, fenced by generation
//! and state. The core decides on a stand-in (`seam::template`) before the statement;
//! when the fence does not hold, the caller takes the two-statement path
//! (`MySqlStore::fenced`), which reads the record and gives the core's answer on it.

use idem_core::{Generation, Record, RecordId, Status, Timestamp};
use mysql_async::Value;

use super::MySqlStore;
use super::error::{ambiguous, contended, database, read_only};
use super::row::{Columns, PENDING, key_values, signed};
use super::statements::{DELETE_FENCED, UPDATE_FENCED, exec_answer};
use crate::error::Error;
use crate::seam::template::shifted;

impl MySqlStore {
    /// Writes `template` (a status the core decided at time 0) over the pending record
    /// of `generation` of `id`, in one statement, when this replica holds that claim:
    /// the record written. `None` when it does not hold it, or the row is not that
    /// pending record any more.
    pub(super) async fn update_pending(
        &self,
        operation: &'static str,
        id: &RecordId,
        generation: Generation,
        template: &Status,
    ) -> Result<Option<Record>, Error> {
        let Some((fingerprint, created_at)) = self.inner.held.of(id, generation) else {
            return Ok(None);
        };
        let offsets = Columns::of(&Record {
            fingerprint,
            generation,
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
            status: template.clone(),
        })?;
        let mut params: Vec<Value> = vec![
            offsets.state.into(),
            offsets.verdict.into(),
            offsets.lease_until.into(),
            offsets.completed_at.into(),
            offsets.expires_at.into(),
            offsets.outcome_code.into(),
            offsets.outcome_body.into(),
        ];
        params.extend(key_values(id));
        params.push(signed("generation", generation.0)?.into());
        params.push(PENDING.into());
        // A database that does not answer now (a restart, a failover): the two-statement
        // path waits for it.
        let Ok(mut conn) = self.conn(operation).await else {
            return Ok(None);
        };
        let answered = exec_answer(&mut conn, UPDATE_FENCED, params)
            .await
            .map_err(database(operation));
        drop(conn);
        let written_at = match answered {
            Ok((1, Some(at))) => Timestamp(at),
            Ok((0, _)) => return Ok(None),
            Ok(other) => {
                return Err(Error::Corrupt {
                    detail: format!(
                        "{operation} of {id}: the fenced update answered (rows, time) {other:?}"
                    ),
                });
            }
            // A demoted primary: the two-statement path runs on the one that takes
            // writes now.
            Err(e) if read_only(&e) => {
                self.inner.hosts.failed();
                return Ok(None);
            }
            // A deadlock or a lock wait (on Galera, a failed certification): it wrote
            // nothing, and the two-statement path starts over.
            Err(Error::MySql { source, .. }) if contended(&source) => return Ok(None),
            Err(e) if ambiguous(&e) => {
                self.inner.hosts.failed();
                // The statement may have landed: the record tells.
                return match self.read_back(operation, id).await {
                    Ok(Some(seen))
                        if seen.record.generation == generation
                            && seen.record.status == shifted(template, seen.record.updated_at) =>
                    {
                        Ok(Some(seen.record))
                    }
                    Ok(_) => Ok(None),
                    Err(_) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        Ok(Some(Record {
            fingerprint,
            generation,
            created_at,
            updated_at: written_at,
            status: shifted(template, written_at),
        }))
    }

    /// Deletes the pending record of `generation` of `id` in one statement: true when it
    /// did, false when the row is not that pending record.
    pub(super) async fn delete_pending(
        &self,
        operation: &'static str,
        id: &RecordId,
        generation: Generation,
    ) -> Result<bool, Error> {
        let mut params: Vec<Value> = key_values(id).to_vec();
        params.push(signed("generation", generation.0)?.into());
        params.push(PENDING.into());
        let Ok(mut conn) = self.conn(operation).await else {
            return Ok(false);
        };
        let answered = exec_answer(&mut conn, DELETE_FENCED, params)
            .await
            .map_err(database(operation));
        drop(conn);
        match answered {
            Ok((deleted, _)) => Ok(deleted == 1),
            Err(e) if read_only(&e) => {
                self.inner.hosts.failed();
                Ok(false)
            }
            Err(Error::MySql { source, .. }) if contended(&source) => Ok(false),
            Err(e) if ambiguous(&e) => {
                self.inner.hosts.failed();
                match self.read_back(operation, id).await {
                    // Gone: the delete landed.
                    Ok(None) => Ok(true),
                    // There: the two-statement path gives the answer.
                    Ok(Some(_)) => Ok(false),
                    Err(_) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}
