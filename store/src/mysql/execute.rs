//! Atomic execute on MariaDB: the claim, the caller's business writes and the settled
//! record in one transaction, or nothing. A duplicate that meets the key held by another
//! execute's open transaction waits at most the lock timeout
//! (`innodb_lock_wait_timeout`), then is answered in progress.

use std::future::Future;
use std::pin::Pin;

use idem_core::protocol::{self, Decision, Write};
use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, Status, Timestamp, Verdict};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Transaction, TxOpts, Value};

use super::MySqlStore;
use super::error::{DUPLICATE_KEY, LOCK_WAIT_TIMEOUT, ambiguous, code, contended, database};
use super::row::{get, key_values, signed, time_at};
use super::statements::CLAIM;
use super::two_phase::{expect_written, next_generation, read, write_over};
use crate::error::{Error, ExecuteError};
use crate::seam::report::Executed;

/// How many times an execute starts over when the record changed between its read and
/// its write, or a deadlock rolled it back (before the work ran: the work runs at most
/// once).
const EXECUTE_ATTEMPTS: u32 = 16;

/// The work of an execute: the caller's writes in the transaction it is given, and the
/// verdict, outcome and value they produced.
pub type Work<'t, T, E> =
    Pin<Box<dyn Future<Output = Result<(Verdict, Outcome, T), E>> + Send + 't>>;

/// What one try of an execute came to.
enum Tried<T, E> {
    Done(Result<Executed<T>, ExecuteError<E>>),
    /// The record changed under the try, or a deadlock rolled it back, before the work
    /// ran: start over.
    Again,
}

/// A claim this transaction holds: the record and the revision its row has now.
struct Held {
    now: Timestamp,
    revision: i64,
    pending: Record,
}

/// What the claim's step found.
enum Claim {
    Held(Held),
    /// Answered without the work (a write the core made is in the transaction).
    Answer(Decision),
    /// Another execute's open transaction holds the key.
    Locked,
    Again,
}

impl MySqlStore {
    /// Claims `id`, runs `work` in the same transaction, and settles the record with
    /// its outcome: the claim, the work's writes and the settled record commit together,
    /// or nothing does (a failed work rolls everything back and the key stays
    /// claimable). No Pending record is ever visible on this path.
    ///
    /// A key that is settled, in progress, in conflict, unknown or forgotten is answered
    /// without running the work ([`Executed::NotRun`]). A key held by another execute
    /// whose transaction is still open is answered [`Decision::InProgress`] after the
    /// lock timeout ([`super::MySqlStoreBuilder::lock_timeout`]), with generation 0 (its
    /// claim is not committed, so it has none yet) and a `lease_until` one lease from
    /// now. The work's own statements wait at most the lock timeout too. The work must
    /// not call out over the network: it holds a row lock.
    ///
    /// ```no_run
    /// # async fn credit(store: idem_store::mysql::MySqlStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_store::mysql::mysql_async::prelude::Queryable;
    /// use idem_store::{Fingerprint, Outcome, RecordId, Verdict};
    /// let id = RecordId::new("shop", "credit", "sale-1")?;
    /// let done = store
    ///     .execute(&id, Fingerprint::of_bytes(b"alice+5"), |txn| {
    ///         Box::pin(async move {
    ///             txn.query_drop("UPDATE balance SET amount = amount + 5 WHERE account = 'alice'")
    ///                 .await?;
    ///             let amount: Option<i64> = txn
    ///                 .query_first("SELECT amount FROM balance WHERE account = 'alice'")
    ///                 .await?;
    ///             Ok::<_, idem_store::mysql::mysql_async::Error>((
    ///                 Verdict::Succeeded,
    ///                 Outcome::new(200, format!("balance {amount:?}")),
    ///                 amount,
    ///             ))
    ///         })
    ///     })
    ///     .await?;
    /// println!("{:?}", done.outcome());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] when the work failed (nothing committed);
    /// [`ExecuteError::Store`] when the database failed, the outcome is over the limit,
    /// or the record kept changing.
    pub async fn execute<T, E, F>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        work: F,
    ) -> Result<Executed<T>, ExecuteError<E>>
    where
        T: Send,
        E: Send,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> Work<'t, T, E> + Send,
    {
        let mut work = Some(work);
        for _ in 0..EXECUTE_ATTEMPTS {
            let mut conn = self.conn("execute").await?;
            match self
                .execute_once(&mut conn, id, fingerprint, &mut work)
                .await
            {
                Tried::Done(done) => return done,
                Tried::Again => continue,
            }
        }
        Err(ExecuteError::Store(Error::Contended {
            attempts: EXECUTE_ATTEMPTS,
        }))
    }

    async fn execute_once<T, E, F>(
        &self,
        conn: &mut Conn,
        id: &RecordId,
        fingerprint: Fingerprint,
        work: &mut Option<F>,
    ) -> Tried<T, E>
    where
        T: Send,
        E: Send,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> Work<'t, T, E> + Send,
    {
        let config = &self.inner.config;
        let db = |e| ExecuteError::Store(database("execute")(e));
        let mut txn = match conn.start_transaction(TxOpts::default()).await {
            Ok(txn) => txn,
            Err(e) => return Tried::Done(Err(db(e))),
        };
        let held = match self.claim_in(&mut txn, id, fingerprint).await {
            Ok(Claim::Held(held)) => held,
            Ok(Claim::Answer(decision)) => {
                // A write the core made (an expired lease turned Unknown) commits;
                // nothing else was written.
                return Tried::Done(match txn.commit().await {
                    Ok(()) => Ok(Executed::NotRun(decision)),
                    Err(e) => Err(db(e)),
                });
            }
            Ok(Claim::Locked) => {
                drop(txn);
                return Tried::Done(
                    self.held_open(conn)
                        .await
                        .map(Executed::NotRun)
                        .map_err(ExecuteError::Store),
                );
            }
            Ok(Claim::Again) => return Tried::Again,
            Err(e) => return Tried::Done(Err(e.into())),
        };
        let Some(work) = work.take() else {
            // Reached only once: every earlier try returned before the work.
            return Tried::Done(Err(ExecuteError::Store(Error::Contended { attempts: 1 })));
        };
        let (verdict, outcome, value) = match work(&mut txn).await {
            Ok(done) => done,
            // Dropping the transaction rolls back the claim and the work's writes.
            Err(e) => return Tried::Done(Err(ExecuteError::Work(e))),
        };
        let generation = held.pending.generation;
        let settled = match protocol::complete(
            Some(&held.pending),
            generation,
            verdict,
            outcome,
            held.now,
            config,
        ) {
            Ok(settled) => settled,
            Err(refusal) => return Tried::Done(Err(Error::Refused(refusal).into())),
        };
        match write_over(&mut txn, "execute", id, held.revision, Some(&settled), None).await {
            Ok(true) => {}
            Ok(false) => {
                return Tried::Done(Err(Error::Corrupt {
                    detail: format!("{id}: the claim of this transaction changed under it"),
                }
                .into()));
            }
            Err(e) => return Tried::Done(Err(e.into())),
        }
        match txn.commit().await {
            Ok(()) => Tried::Done(Ok(Executed::Ran {
                value,
                record: settled,
            })),
            Err(e) => {
                let e = database("execute")(e);
                if !ambiguous(&e) {
                    return Tried::Done(Err(e.into()));
                }
                // The connection broke during the commit: the record tells.
                match crate::Receiver::get(self, id).await {
                    Ok(Some(record)) if record == settled => {
                        Tried::Done(Ok(Executed::Ran { value, record }))
                    }
                    _ => Tried::Done(Err(e.into())),
                }
            }
        }
    }

    /// The claim's step inside the execute's transaction: a fresh key's claim, or the
    /// core's answer on the record there (a claim it makes is written in the
    /// transaction, so it commits with the work).
    async fn claim_in(
        &self,
        txn: &mut Transaction<'_>,
        id: &RecordId,
        fingerprint: Fingerprint,
    ) -> Result<Claim, Error> {
        let config = &self.inner.config;
        let lease = signed("lease_ms", config.lease_ms)?;
        let mut params = key_values(id).to_vec();
        params.push(Value::from(fingerprint.0.to_vec()));
        params.push(Value::from(lease));
        // No claimant: the claim commits with its outcome or not at all, never lost alone.
        params.push(Value::NULL);
        let claimed: Result<Option<Row>, _> = txn.exec_first(CLAIM, params).await;
        let seen = match claimed {
            Ok(Some(row)) => {
                let generation: i64 = get(&row, 0, "a claim")?;
                let generation = Generation(u64::try_from(generation).unwrap_or(0));
                let now = time_at(&row, 1)?;
                let pending = Record {
                    fingerprint,
                    generation,
                    created_at: now,
                    updated_at: now,
                    status: Status::Pending {
                        lease_until: time_at(&row, 2)?,
                    },
                };
                let decided = protocol::begin(None, fingerprint, generation, now, config);
                expect_written(&decided.write, &pending)?;
                return Ok(Claim::Held(Held {
                    now,
                    revision: 0,
                    pending,
                }));
            }
            Ok(None) => {
                return Err(Error::Corrupt {
                    detail: format!("the claim of {id} returned no row"),
                });
            }
            Err(e) if code(&e) == Some(DUPLICATE_KEY) => match read(txn, "execute", id).await? {
                Some(seen) => seen,
                None => return Ok(Claim::Again),
            },
            // Another execute's open transaction holds the key.
            Err(e) if code(&e) == Some(LOCK_WAIT_TIMEOUT) => return Ok(Claim::Locked),
            Err(e) if contended(&e) => return Ok(Claim::Again),
            Err(e) => return Err(database("execute")(e)),
        };
        let stand_in = Generation(if seen.record.generation.0 == u64::MAX {
            0
        } else {
            u64::MAX
        });
        let decided = protocol::begin(Some(&seen.record), fingerprint, stand_in, seen.now, config);
        let (decision, put) = match decided.write {
            Write::Nothing => return Ok(Claim::Answer(decided.decision)),
            Write::Put(put) if put.generation != seen.record.generation => {
                let generation = next_generation(txn, "execute").await?;
                let again = protocol::begin(
                    Some(&seen.record),
                    fingerprint,
                    generation,
                    seen.now,
                    config,
                );
                match again.write {
                    Write::Put(put) => (again.decision, put),
                    other => {
                        return Err(Error::Corrupt {
                            detail: format!("{id}: a claim decided as {other:?}"),
                        });
                    }
                }
            }
            Write::Put(put) => (decided.decision, put),
            // idem-core's begin only puts or writes nothing.
            Write::Delete => {
                return Err(Error::Corrupt {
                    detail: format!("{id}: a begin decided a delete"),
                });
            }
        };
        match write_over(txn, "execute", id, seen.revision, Some(&put), None).await {
            Ok(true) => {}
            Ok(false) => return Ok(Claim::Again),
            Err(Error::MySql { source, .. }) if code(&source) == Some(LOCK_WAIT_TIMEOUT) => {
                return Ok(Claim::Locked);
            }
            Err(Error::MySql { source, .. }) if contended(&source) => return Ok(Claim::Again),
            Err(e) => return Err(e),
        }
        Ok(match decision {
            Decision::Claimed { .. } => Claim::Held(Held {
                now: seen.now,
                revision: seen.revision + 1,
                pending: put,
            }),
            other => Claim::Answer(other),
        })
    }
}
