//! One-time tokens on PostgreSQL (docs/design.md §9): issued idempotently per intent id,
//! consumed as a begin that answers NotIssued or TokenExpired first, swept when their
//! ttl passed. idem-core decides ([`idem_core::token::issue`], [`idem_core::token::admit`]);
//! a token's use is an ordinary record under `(tenant, operation, token)`, so two
//! consumers can never both claim it: the record's key admits one.

use idem_core::protocol::Decision;
use idem_core::token::{self, Earlier, Issue};
use idem_core::{Fingerprint, IssuedToken, RecordId, Timestamp, Token};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row, Transaction};

use super::PgStore;
use super::error::database;
use super::execute::Work;
use super::row::{columns, record_at, signed};
use crate::error::{Error, ExecuteError};
use crate::seam::receiver::Receiver;
use crate::seam::report::{Consumed, Executed, SweepReport};
use crate::seam::token::Tokens;
use crate::seam::token::token_of;

/// Tokens one sweep transaction deletes at most.
const SWEEP_BATCH: i64 = 500;

/// How many times an issue tries to make or lock its intent's entry while sweeps delete
/// it in between.
const ENTRY_ATTEMPTS: u32 = 16;

impl PgStore {
    /// Issues a one-time token for `(tenant, operation)`, valid for `ttl_ms` from the
    /// database's time, made of `random` (128 bits from a secure source). With an
    /// `intent_id`, issuing is idempotent across the fleet: while the token issued for
    /// that intent is unused and unexpired, this answers it again ([`Issue::Existing`])
    /// and writes nothing; concurrent issues for one intent answer one token.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] for a ttl of 0 or above the retention or a bad intent id;
    /// [`Error::Id`] for a bad tenant or operation; [`Error::TokenTaken`] when `random`
    /// repeats an issued token; the database's. Nothing is written on any error.
    pub async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
    ) -> Result<Issue, Error> {
        let config = &self.inner.config;
        token::check_ttl(ttl_ms, config)?;
        match intent_id {
            Some(intent_id) => {
                token::check_intent_id(intent_id)?;
                RecordId::new(tenant, operation, intent_id)?;
            }
            None => {
                RecordId::new(tenant, operation, "-")?;
            }
        }
        let mut connection = self.connection("issue_token").await?;
        let txn = connection
            .client
            .transaction()
            .await
            .map_err(database("issue_token"))?;
        let now = db_now(&txn, "issue_token").await?;
        let fresh = Token::from_random(random);
        let earlier = match intent_id {
            None => None,
            Some(intent_id) => {
                // The intent's entry names its token; made here if there is none (a
                // concurrent issue for the same intent waits for this transaction),
                // locked otherwise, so one issue at a time decides for an intent. An
                // entry a sweep deleted between the two statements is made again.
                'entry: {
                    for _ in 0..ENTRY_ATTEMPTS {
                        let claimed = txn
                            .execute(
                                "INSERT INTO idem_token_intents (tenant, operation, intent_id, token) \
                                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                                &[&tenant, &operation, &intent_id, &fresh.as_str()],
                            )
                            .await
                            .map_err(database("issue_token"))?;
                        if claimed == 1 {
                            break 'entry None;
                        }
                        let row = txn
                            .query_opt(
                                "SELECT token FROM idem_token_intents \
                                  WHERE tenant = $1 AND operation = $2 AND intent_id = $3 FOR UPDATE",
                                &[&tenant, &operation, &intent_id],
                            )
                            .await
                            .map_err(database("issue_token"))?;
                        if let Some(row) = row {
                            let text: String = row.try_get(0).map_err(database("issue_token"))?;
                            break 'entry Some(Token::parse(&text).map_err(|e| {
                                Error::Corrupt {
                                    detail: format!("idem_token_intents names {text:?}: {e}"),
                                }
                            })?);
                        }
                    }
                    return Err(Error::Contended {
                        attempts: ENTRY_ATTEMPTS,
                    });
                }
            }
        };
        let earlier_state = match &earlier {
            Some(earlier) => {
                let id = RecordId::new(tenant, operation, earlier.as_str())?;
                let entry = entry_on(&txn, &id).await?;
                let used = txn
                    .query_opt(
                        "SELECT 1 FROM idem_records WHERE tenant = $1 AND operation = $2 AND key = $3",
                        &[&tenant, &operation, &earlier.as_str()],
                    )
                    .await
                    .map_err(database("issue_token"))?
                    .is_some();
                Some((entry, used))
            }
            None => None,
        };
        let earlier_view = match (&earlier, &earlier_state) {
            (Some(token), Some((entry, used))) => Some(Earlier {
                token,
                entry: entry.as_ref(),
                used: *used,
            }),
            _ => None,
        };
        let issued = token::issue(earlier_view, ttl_ms, intent_id, random, now, config)?;
        let Issue::New { token, entry } = &issued else {
            // The earlier token, unused and unexpired: nothing to write.
            txn.rollback().await.map_err(database("issue_token"))?;
            return Ok(issued);
        };
        let inserted = txn
            .execute(
                "INSERT INTO idem_tokens (tenant, operation, token, issued_at, expires_at, intent_id) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &tenant,
                    &operation,
                    &token.as_str(),
                    &signed("issued_at", entry.issued_at.0)?,
                    &signed("expires_at", entry.expires_at.0)?,
                    &entry.intent_id,
                ],
            )
            .await;
        match inserted {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                return Err(Error::TokenTaken);
            }
            Err(e) => return Err(database("issue_token")(e)),
        }
        if let (Some(intent_id), Some(_)) = (intent_id, &earlier) {
            txn.execute(
                "UPDATE idem_token_intents SET token = $4 \
                  WHERE tenant = $1 AND operation = $2 AND intent_id = $3",
                &[&tenant, &operation, &intent_id, &token.as_str()],
            )
            .await
            .map_err(database("issue_token"))?;
        }
        txn.commit().await.map_err(database("issue_token"))?;
        Ok(issued)
    }

    /// Consumes the token in `id`'s key (`(tenant, operation, token)`): the two-phase
    /// begin on it, once the core admitted the token. A token never issued under this
    /// tenant and operation is refused NotIssued, one whose ttl passed before its first
    /// use Expired; otherwise the protocol decides: the first consume claims, a retry
    /// with the same fingerprint replays, another fingerprint is a conflict.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; the database's.
    pub async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
    ) -> Result<Consumed<Decision>, Error> {
        if let Err(refusal) = self.admit(id).await? {
            return Ok(Consumed::Refused(refusal));
        }
        Ok(Consumed::Admitted(
            self.begin(id, fingerprint, Timestamp(0)).await?,
        ))
    }

    /// Atomic consume: admits the token in `id`'s key as [`PgStore::consume`] does, then
    /// runs `work` as [`PgStore::execute`] does: the use of the token, the work's writes
    /// and the settled record commit together, or nothing does. A `work` that fails
    /// leaves the token consumable.
    ///
    /// # Errors
    ///
    /// As [`PgStore::execute`], and [`Error::Token`] when the key is not a token's text.
    pub async fn consume_execute<T, E, F>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        work: F,
    ) -> Result<Consumed<Executed<T>>, ExecuteError<E>>
    where
        T: Send,
        E: Send,
        F: for<'t> FnOnce(&'t Transaction<'t>) -> Work<'t, T, E> + Send,
    {
        if let Err(refusal) = self.admit(id).await? {
            return Ok(Consumed::Refused(refusal));
        }
        Ok(Consumed::Admitted(
            self.execute(id, fingerprint, work).await?,
        ))
    }

    /// The issued token under `id`, if it is stored; its use, if any, is the record
    /// [`Receiver::get`] returns for the same id.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; the database's.
    pub async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        token_of(id)?;
        let connection = self.connection("get_token").await?;
        entry_on(&connection.client, id).await
    }

    /// Deletes the issued tokens whose ttl passed on the database's clock, oldest first,
    /// at most `limit`, in batches under `FOR UPDATE SKIP LOCKED`. A used token's record
    /// stays (it is swept with the records); the intent's entry that names a deleted
    /// token goes with it.
    ///
    /// # Errors
    ///
    /// The database's (batches deleted before stay deleted).
    pub async fn sweep_tokens(&self, limit: usize) -> Result<SweepReport, Error> {
        let mut report = SweepReport::default();
        let mut left = i64::try_from(limit).unwrap_or(i64::MAX);
        let connection = self.connection("sweep_tokens").await?;
        while left > 0 {
            let batch = left.min(SWEEP_BATCH);
            // Deleted in one statement with the intent entries that name them; a token
            // another sweeper holds is skipped.
            let row = connection
                .client
                .query_one(
                    "WITH expired AS ( \
                       SELECT tenant, operation, token FROM idem_tokens \
                        WHERE expires_at <= idem_now() ORDER BY expires_at LIMIT $1 \
                        FOR UPDATE SKIP LOCKED), \
                     gone AS ( \
                       DELETE FROM idem_tokens t USING expired e \
                        WHERE t.tenant = e.tenant AND t.operation = e.operation AND t.token = e.token \
                       RETURNING t.tenant, t.operation, t.token, t.intent_id), \
                     unnamed AS ( \
                       DELETE FROM idem_token_intents i USING gone g \
                        WHERE i.tenant = g.tenant AND i.operation = g.operation \
                          AND i.intent_id = g.intent_id AND i.token = g.token \
                       RETURNING 1) \
                     SELECT count(*) FROM gone",
                    &[&batch],
                )
                .await
                .map_err(database("sweep_tokens"))?;
            let deleted: i64 = row.try_get(0).map_err(database("sweep_tokens"))?;
            report.removed += u64::try_from(deleted).unwrap_or(0);
            left -= deleted;
            if deleted < batch {
                return Ok(report);
            }
        }
        report.remaining_expired = connection
            .client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM idem_tokens WHERE expires_at <= idem_now())",
                &[],
            )
            .await
            .and_then(|row| row.try_get(0))
            .map_err(database("sweep_tokens"))?;
        Ok(report)
    }

    /// The core's admission of the token in `id`'s key, on what the database holds: its
    /// entry and the record of its use, read together.
    async fn admit(&self, id: &RecordId) -> Result<Result<(), token::TokenRefusal>, Error> {
        token_of(id)?;
        let connection = self.connection("consume").await?;
        let row = connection
            .client
            .query_typed_one(
                &format!(
                    "SELECT idem_now(), t.issued_at, t.expires_at, t.intent_id, {} \
                       FROM (SELECT 1) one \
                       LEFT JOIN idem_tokens t \
                         ON t.tenant = $1 AND t.operation = $2 AND t.token = $3 \
                       LEFT JOIN idem_records r \
                         ON r.tenant = $1 AND r.operation = $2 AND r.key = $3",
                    columns("r.")
                ),
                &[
                    (&id.tenant(), Type::TEXT),
                    (&id.operation(), Type::TEXT),
                    (&id.key(), Type::TEXT),
                ],
            )
            .await
            .map_err(database("consume"))?;
        let now: i64 = row.try_get(0).map_err(database("consume"))?;
        let now = Timestamp(u64::try_from(now).unwrap_or(0));
        let issued: Option<i64> = row.try_get(1).map_err(database("consume"))?;
        let entry = issued.map(|_| entry_at(&row, 1)).transpose()?;
        let used: Option<Vec<u8>> = row.try_get(4).map_err(database("consume"))?;
        let record = used.map(|_| record_at(&row, 4, id)).transpose()?;
        Ok(token::admit(
            entry.as_ref(),
            record.as_ref(),
            now,
            &self.inner.config,
        ))
    }
}

async fn db_now(client: &impl GenericClient, operation: &'static str) -> Result<Timestamp, Error> {
    let row = client
        .query_one("SELECT idem_now()", &[])
        .await
        .map_err(database(operation))?;
    let now: i64 = row.try_get(0).map_err(database(operation))?;
    Ok(Timestamp(u64::try_from(now).unwrap_or(0)))
}

pub(super) async fn entry_on(
    client: &impl GenericClient,
    id: &RecordId,
) -> Result<Option<IssuedToken>, Error> {
    let row = client
        .query_typed_opt(
            "SELECT issued_at, expires_at, intent_id FROM idem_tokens \
              WHERE tenant = $1 AND operation = $2 AND token = $3",
            &[
                (&id.tenant(), Type::TEXT),
                (&id.operation(), Type::TEXT),
                (&id.key(), Type::TEXT),
            ],
        )
        .await
        .map_err(database("get_token"))?;
    row.map(|row| entry_at(&row, 0)).transpose()
}

pub(super) fn entry_at(row: &Row, first: usize) -> Result<IssuedToken, Error> {
    let time = |i: usize| -> Result<Timestamp, Error> {
        let value: i64 = row.try_get(first + i).map_err(database("get_token"))?;
        Ok(Timestamp(u64::try_from(value).unwrap_or(0)))
    };
    Ok(IssuedToken {
        issued_at: time(0)?,
        expires_at: time(1)?,
        intent_id: row.try_get(first + 2).map_err(database("get_token"))?,
    })
}

impl Tokens for PgStore {
    async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        _now: Timestamp,
    ) -> Result<Issue, Error> {
        PgStore::issue_token(self, tenant, operation, ttl_ms, intent_id, random).await
    }

    async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        _now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        PgStore::consume(self, id, fingerprint).await
    }

    async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        PgStore::get_token(self, id).await
    }

    async fn sweep_tokens(&self, _now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        PgStore::sweep_tokens(self, limit).await
    }
}
