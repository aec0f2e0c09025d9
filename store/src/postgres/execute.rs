//! Atomic execute on PostgreSQL (seed 000's pattern): the claim, the caller's business
//! writes and the settled record in one transaction, or nothing. A duplicate that meets
//! the key held by another execute's open transaction waits at most the lock timeout,
//! then is answered in progress.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use idem_core::protocol::{self, Decision};
use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, Timestamp, Verdict, Write};
use tokio_postgres::Transaction;
use tokio_postgres::error::SqlState;

use super::PgStore;
use super::error::database;
use super::pool::Connection;
use super::row::{record_at, signed, time_at};
use super::statements::Statements;
use super::two_phase::expect_written;
use crate::error::{Error, ExecuteError};
use crate::seam::report::Executed;

/// How many times an execute starts over when the record changed between its read and
/// its write (before the work ran: the work runs at most once).
const EXECUTE_ATTEMPTS: u32 = 16;

/// The work of an execute: the caller's writes in the transaction it is given, and the
/// verdict, outcome and value they produced.
pub type Work<'t, T, E> =
    Pin<Box<dyn Future<Output = Result<(Verdict, Outcome, T), E>> + Send + 't>>;

tokio::task_local! {
    /// The connection an execute's work runs on, with its prepared statements.
    static IN_EXECUTE: OnConnection;
}

/// A connection, by the address of its client (only compared: the client cannot move
/// while a transaction borrows it), and its statements.
struct OnConnection {
    client: usize,
    statements: Arc<Statements>,
}

fn address(client: &tokio_postgres::Client) -> usize {
    std::ptr::from_ref(client) as usize
}

/// The statements prepared on the connection of `txn`, when `txn` is the transaction
/// an execute gave its work: the engine's own calls inside the work run them prepared
/// there (a transaction on any other connection gets `None`, and its statements are
/// sent typed).
pub(super) fn prepared_for(txn: &Transaction<'_>) -> Option<Arc<Statements>> {
    IN_EXECUTE
        .try_with(|on| (on.client == address(txn.client())).then(|| Arc::clone(&on.statements)))
        .ok()
        .flatten()
}

/// What one try of an execute came to.
enum Tried<T, E> {
    Done(Result<Executed<T>, ExecuteError<E>>),
    /// The record changed under the try before the work ran: start over.
    Again,
}

impl PgStore {
    /// Claims `id`, runs `work` in the same transaction, and settles the record with
    /// its outcome: the claim, the work's writes and the settled record commit together,
    /// or nothing does (a failed work rolls everything back and the key stays
    /// claimable). No Pending record is ever visible on this path.
    ///
    /// A key that is settled, in progress, in conflict, unknown or forgotten is answered
    /// without running the work ([`Executed::NotRun`]). A key held by another execute
    /// whose transaction is still open is answered [`Decision::InProgress`] after the
    /// lock timeout ([`super::PgStoreBuilder::lock_timeout`]), with generation 0 (its
    /// claim is not committed, so it has none yet) and a `lease_until` one lease from
    /// now. The work must not call out over the network: it holds a row lock.
    ///
    /// ```no_run
    /// # async fn credit(store: idem_store::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_store::{Fingerprint, Outcome, RecordId, Verdict};
    /// let id = RecordId::new("shop", "credit", "sale-1")?;
    /// let done = store
    ///     .execute(&id, Fingerprint::of_bytes(b"alice+5"), |txn| {
    ///         Box::pin(async move {
    ///             let row = txn
    ///                 .query_one(
    ///                     "UPDATE balance SET amount = amount + 5 WHERE account = 'alice' RETURNING amount",
    ///                     &[],
    ///                 )
    ///                 .await?;
    ///             let amount: i64 = row.get(0);
    ///             Ok::<_, idem_store::postgres::tokio_postgres::Error>((
    ///                 Verdict::Succeeded,
    ///                 Outcome::new(200, format!("balance {amount}")),
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
        F: for<'t> FnOnce(&'t Transaction<'t>) -> Work<'t, T, E> + Send,
    {
        let mut work = Some(work);
        for _ in 0..EXECUTE_ATTEMPTS {
            let mut connection = self.connection("execute").await?;
            match self
                .execute_once(&mut connection, id, fingerprint, &mut work)
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
        connection: &mut Connection,
        id: &RecordId,
        fingerprint: Fingerprint,
        work: &mut Option<F>,
    ) -> Tried<T, E>
    where
        T: Send,
        E: Send,
        F: for<'t> FnOnce(&'t Transaction<'t>) -> Work<'t, T, E> + Send,
    {
        let config = &self.inner.config;
        let db = |e| ExecuteError::Store(database("execute")(e));
        let Connection { client, statements } = connection;
        let txn = match client.transaction().await {
            Ok(txn) => txn,
            Err(e) => return Tried::Done(Err(db(e))),
        };
        let lock_ms = self.inner.lock_timeout.as_millis().max(1);
        let [t, o, k] = [id.tenant(), id.operation(), id.key()];
        let lease = match signed("lease_ms", config.lease_ms) {
            Ok(lease) => lease,
            Err(e) => return Tried::Done(Err(e.into())),
        };
        let fp = fingerprint.0.as_slice();
        // The lock timeout and the claim go out together, in one round trip: polled in
        // this order (`biased`), the connection sends them in this order.
        let timeout = format!("SET LOCAL lock_timeout = {lock_ms}");
        // No claimant: the claim commits with its outcome or not at all, never lost alone.
        let claimant: Option<i64> = None;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&t, &o, &k, &fp, &lease, &claimant];
        let (timeout, claimed) = tokio::join!(
            biased;
            txn.batch_execute(&timeout),
            txn.query(&statements.claim, &params)
        );
        if let Err(e) = timeout {
            return Tried::Done(Err(db(e)));
        }
        let rows = match claimed {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                drop(txn);
                return Tried::Done(self.held_by_an_open_execute(client).await);
            }
            Err(e) => return Tried::Done(Err(db(e))),
        };
        let decoded = (|| -> Result<Option<(bool, Timestamp, Record)>, Error> {
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            Ok(Some((
                row.try_get(0).map_err(database("execute"))?,
                time_at(row, 1, id)?,
                record_at(row, 2, id)?,
            )))
        })();
        let (now, pending) = match decoded {
            Ok(Some((true, now, claimed))) => {
                let decided = protocol::begin(None, fingerprint, claimed.generation, now, config);
                if let Err(e) = expect_written(&decided.write, &claimed) {
                    return Tried::Done(Err(e.into()));
                }
                (now, claimed)
            }
            Ok(Some((false, now, seen))) => {
                match self
                    .decide_existing(&txn, statements, id, fingerprint, now, &seen)
                    .await
                {
                    Ok(Existing::Answer(decision)) => {
                        // A write the core made (an expired lease turned Unknown) commits;
                        // nothing else was written.
                        return Tried::Done(match txn.commit().await {
                            Ok(()) => Ok(Executed::NotRun(decision)),
                            Err(e) => Err(db(e)),
                        });
                    }
                    Ok(Existing::Claimed(pending)) => (now, pending),
                    Ok(Existing::Changed) => return Tried::Again,
                    // Its write waited past the lock timeout on a row another
                    // transaction holds: in progress, as a claim would be.
                    Err(Error::Database { source, .. })
                        if source.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) =>
                    {
                        drop(txn);
                        return Tried::Done(self.held_by_an_open_execute(client).await);
                    }
                    Err(e) => return Tried::Done(Err(e.into())),
                }
            }
            // Committed after this statement's snapshot, or deleted: start over.
            Ok(None) => return Tried::Again,
            Err(e) => return Tried::Done(Err(e.into())),
        };
        let generation = pending.generation;
        let Some(work) = work.take() else {
            // Reached only once: every earlier try returned before the work.
            return Tried::Done(Err(ExecuteError::Store(Error::Contended { attempts: 1 })));
        };
        // The lock timeout was for the claim; the work's own writes wait as the
        // session's other statements do. The reset goes out before the work's first
        // statement, in the same flight.
        let on = OnConnection {
            client: address(txn.client()),
            statements: Arc::clone(statements),
        };
        let (reset, worked) = tokio::join!(
            biased;
            txn.batch_execute("SET LOCAL lock_timeout TO DEFAULT"),
            IN_EXECUTE.scope(on, work(&txn))
        );
        if let Err(e) = reset {
            return Tried::Done(Err(db(e)));
        }
        let (verdict, outcome, value) = match worked {
            Ok(done) => done,
            // Dropping the transaction rolls back the claim and the work's writes.
            Err(e) => return Tried::Done(Err(ExecuteError::Work(e))),
        };
        let settled =
            match protocol::complete(Some(&pending), generation, verdict, outcome, now, config) {
                Ok(settled) => settled,
                Err(refusal) => return Tried::Done(Err(Error::Refused(refusal).into())),
            };
        match self
            .replace(&txn, statements, "execute", id, &pending, &settled, None)
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => {
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
                if !super::error::ambiguous(&e) {
                    return Tried::Done(Err(e.into()));
                }
                // The connection broke during the commit: the record tells.
                match self.get_settled(id, generation).await {
                    Ok(Some(record)) if record == settled => {
                        Tried::Done(Ok(Executed::Ran { value, record }))
                    }
                    _ => Tried::Done(Err(e.into())),
                }
            }
        }
    }

    /// The core's answer for a key whose record exists, inside the execute's
    /// transaction: a claim it makes is written there (so it commits with the work).
    async fn decide_existing(
        &self,
        txn: &Transaction<'_>,
        statements: &super::statements::Statements,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        seen: &Record,
    ) -> Result<Existing, Error> {
        let config = &self.inner.config;
        let stand_in = Generation(if seen.generation.0 == u64::MAX {
            0
        } else {
            u64::MAX
        });
        let decided = protocol::begin(Some(seen), fingerprint, stand_in, now, config);
        let put = match decided.write {
            Write::Nothing => return Ok(Existing::Answer(decided.decision)),
            Write::Put(put) => put,
            // idem-core's begin only puts or writes nothing.
            Write::Delete => unreachable!("protocol::begin never deletes"),
        };
        let Some(generation) = self
            .replace(txn, statements, "execute", id, seen, &put, None)
            .await?
        else {
            return Ok(Existing::Changed);
        };
        if generation == seen.generation {
            return Ok(Existing::Answer(decided.decision));
        }
        match protocol::begin(Some(seen), fingerprint, generation, now, config).write {
            Write::Put(pending) => Ok(Existing::Claimed(pending)),
            other => Err(Error::Corrupt {
                detail: format!("{id}: a claim decided as {other:?}"),
            }),
        }
    }

    /// The answer for a key whose claim is in another execute's open transaction.
    async fn held_by_an_open_execute<T, E>(
        &self,
        client: &tokio_postgres::Client,
    ) -> Result<Executed<T>, ExecuteError<E>> {
        let row = client
            .query_one("SELECT idem_now()", &[])
            .await
            .map_err(database("execute"))?;
        let now: i64 = row.try_get(0).map_err(database("execute"))?;
        let now = Timestamp(u64::try_from(now).unwrap_or(0));
        Ok(Executed::NotRun(Decision::InProgress {
            generation: Generation(0),
            lease_until: now.plus_millis(self.inner.config.lease_ms),
        }))
    }

    /// The record of `id` if it is settled by `generation`.
    async fn get_settled(
        &self,
        id: &RecordId,
        generation: Generation,
    ) -> Result<Option<Record>, Error> {
        let record = crate::Receiver::get(self, id).await?;
        Ok(record.filter(|r| r.generation == generation))
    }
}

/// What an execute makes of a key whose record exists.
enum Existing {
    /// Answered without the work (written, if the core wrote).
    Answer(Decision),
    /// Claimed in the transaction: run the work.
    Claimed(Record),
    /// The record changed since it was read.
    Changed,
}
