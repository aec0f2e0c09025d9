//! One-time tokens on MariaDB (docs/design.md §9): issued idempotently per intent id,
//! consumed as a begin that answers NotIssued or TokenExpired first, swept when their
//! ttl passed. idem-core decides ([`idem_core::token::issue`], [`idem_core::token::admit`]);
//! a token's use is an ordinary record under `(tenant, operation, token)`, so two
//! consumers can never both claim it: the record's key admits one.

use idem_core::protocol::Decision;
use idem_core::token::{self, Earlier, Issue};
use idem_core::{Fingerprint, IssuedToken, RecordId, Timestamp, Token};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Transaction, TxOpts, Value};

use super::MySqlStore;
use super::error::{DUPLICATE_KEY, code, contended, database};
use super::execute::Work;
use super::row::{columns_of, get, key_values, record_at, signed};
use super::statements::{clock, exec_count};
use crate::error::{Error, ExecuteError};
use crate::seam::receiver::Receiver;
use crate::seam::report::{Consumed, Executed, SweepReport};
use crate::seam::token::Tokens;
use crate::seam::token::token_of;

/// Tokens one sweep transaction deletes at most.
const SWEEP_BATCH: usize = 500;

/// How many times an issue runs again after a deadlock or a lock wait that ran out (many
/// issues for one intent at once), or a sweep that deleted its intent's entry between
/// two statements.
const ISSUE_ATTEMPTS: u32 = 16;

/// What one try of an issue ended in.
enum Tried {
    Issued(Issue),
    /// Another transaction was in the way (a deadlock, a lock wait, an entry swept
    /// meanwhile): nothing was written; try again.
    Again,
}

impl MySqlStore {
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
        let mut conn = self.conn("issue_token").await?;
        for _ in 0..ISSUE_ATTEMPTS {
            let txn = conn
                .start_transaction(TxOpts::default())
                .await
                .map_err(database("issue_token"))?;
            match self
                .issue_in(txn, tenant, operation, ttl_ms, intent_id, random)
                .await
            {
                Ok(Tried::Issued(issued)) => return Ok(issued),
                Ok(Tried::Again) => {}
                Err(Error::MySql { source, .. }) if contended(&source) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended {
            attempts: ISSUE_ATTEMPTS,
        })
    }

    /// One try of an issue in `txn`, which it commits or rolls back (dropped on an
    /// error, it rolls back).
    async fn issue_in(
        &self,
        mut txn: Transaction<'_>,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
    ) -> Result<Tried, Error> {
        let config = &self.inner.config;
        let now = clock(&mut txn, "issue_token").await?;
        let fresh = Token::from_random(random);
        let earlier = match intent_id {
            None => None,
            Some(intent_id) => {
                // The intent's entry names its token; made here if there is none (a
                // concurrent issue for the same intent waits for this transaction),
                // locked otherwise, so one issue at a time decides for an intent.
                let made = exec_count(
                    &mut txn,
                    "INSERT INTO idem_token_intents (tenant, operation, intent_id, token) \
                     VALUES (?, ?, ?, ?)",
                    vec![
                        Value::from(tenant),
                        Value::from(operation),
                        Value::from(intent_id),
                        Value::from(fresh.as_str()),
                    ],
                )
                .await;
                match made {
                    Ok(_) => None,
                    Err(e) if code(&e) == Some(DUPLICATE_KEY) => {
                        let text: Option<String> = txn
                            .exec_first(
                                "SELECT token FROM idem_token_intents \
                                  WHERE tenant = ? AND operation = ? AND intent_id = ? FOR UPDATE",
                                vec![
                                    Value::from(tenant),
                                    Value::from(operation),
                                    Value::from(intent_id),
                                ],
                            )
                            .await
                            .map_err(database("issue_token"))?;
                        // Swept between the two statements: try again.
                        let Some(text) = text else {
                            return Ok(Tried::Again);
                        };
                        Some(Token::parse(&text).map_err(|e| Error::Corrupt {
                            detail: format!("idem_token_intents names {text:?}: {e}"),
                        })?)
                    }
                    Err(e) => return Err(database("issue_token")(e)),
                }
            }
        };
        let earlier_state = match &earlier {
            Some(earlier) => {
                let id = RecordId::new(tenant, operation, earlier.as_str())?;
                let entry = entry_on(&mut txn, &id).await?;
                let used: Option<i64> = txn
                    .exec_first(
                        "SELECT 1 FROM idem_records WHERE tenant = ? AND operation = ? AND idem_key = ?",
                        key_values(&id).to_vec(),
                    )
                    .await
                    .map_err(database("issue_token"))?;
                Some((entry, used.is_some()))
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
            return Ok(Tried::Issued(issued));
        };
        let inserted = exec_count(
            &mut txn,
            "INSERT INTO idem_tokens (tenant, operation, token, issued_at, expires_at, intent_id) \
             VALUES (?, ?, ?, ?, ?, ?)",
            vec![
                Value::from(tenant),
                Value::from(operation),
                Value::from(token.as_str()),
                Value::from(signed("issued_at", entry.issued_at.0)?),
                Value::from(signed("expires_at", entry.expires_at.0)?),
                Value::from(entry.intent_id.as_deref()),
            ],
        )
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if code(&e) == Some(DUPLICATE_KEY) => return Err(Error::TokenTaken),
            Err(e) => return Err(database("issue_token")(e)),
        }
        if let (Some(intent_id), Some(_)) = (intent_id, &earlier) {
            exec_count(
                &mut txn,
                "UPDATE idem_token_intents SET token = ? \
                  WHERE tenant = ? AND operation = ? AND intent_id = ?",
                vec![
                    Value::from(token.as_str()),
                    Value::from(tenant),
                    Value::from(operation),
                    Value::from(intent_id),
                ],
            )
            .await
            .map_err(database("issue_token"))?;
        }
        txn.commit().await.map_err(database("issue_token"))?;
        Ok(Tried::Issued(issued))
    }

    /// Consumes the token in `id`'s key (`(tenant, operation, token)`): the two-phase
    /// begin on it, once the core admitted the token. A token never issued under this
    /// tenant and operation is refused NotIssued, one whose ttl passed before its first
    /// use Expired; otherwise the protocol decides.
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

    /// Atomic consume: admits the token in `id`'s key as [`MySqlStore::consume`] does,
    /// then runs `work` as [`MySqlStore::execute`] does: the use of the token, the work's
    /// writes and the settled record commit together, or nothing does. A `work` that
    /// fails leaves the token consumable.
    ///
    /// # Errors
    ///
    /// As [`MySqlStore::execute`], and [`Error::Token`] when the key is not a token's
    /// text.
    pub async fn consume_execute<T, E, F>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        work: F,
    ) -> Result<Consumed<Executed<T>>, ExecuteError<E>>
    where
        T: Send,
        E: Send,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> Work<'t, T, E> + Send,
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
        let mut conn = self.conn("get_token").await?;
        entry_on(&mut conn, id).await
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
        let mut left = limit;
        let mut conn = self.conn("sweep_tokens").await?;
        while left > 0 {
            let batch = left.min(SWEEP_BATCH);
            let mut txn = conn
                .start_transaction(TxOpts::default())
                .await
                .map_err(database("sweep_tokens"))?;
            let now = clock(&mut txn, "sweep_tokens").await?;
            let rows: Vec<(String, String, String, Option<String>)> = txn
                .exec(
                    "SELECT tenant, operation, token, intent_id FROM idem_tokens \
                      WHERE expires_at <= ? ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED",
                    vec![
                        Value::from(signed("now", now.0)?),
                        Value::from(i64::try_from(batch).unwrap_or(i64::MAX)),
                    ],
                )
                .await
                .map_err(database("sweep_tokens"))?;
            for (tenant, operation, token, intent_id) in &rows {
                let key = vec![
                    Value::from(tenant.as_str()),
                    Value::from(operation.as_str()),
                    Value::from(token.as_str()),
                ];
                exec_count(
                    &mut txn,
                    "DELETE FROM idem_tokens WHERE tenant = ? AND operation = ? AND token = ?",
                    key.clone(),
                )
                .await
                .map_err(database("sweep_tokens"))?;
                if let Some(intent_id) = intent_id {
                    exec_count(
                        &mut txn,
                        "DELETE FROM idem_token_intents \
                          WHERE tenant = ? AND operation = ? AND token = ? AND intent_id = ?",
                        {
                            let mut key = key;
                            key.push(Value::from(intent_id.as_str()));
                            key
                        },
                    )
                    .await
                    .map_err(database("sweep_tokens"))?;
                }
            }
            txn.commit().await.map_err(database("sweep_tokens"))?;
            report.removed += rows.len() as u64;
            left -= rows.len().min(left);
            if rows.len() < batch {
                return Ok(report);
            }
        }
        let now = clock(&mut conn, "sweep_tokens").await?;
        let more: Option<i64> = conn
            .exec_first(
                "SELECT EXISTS (SELECT 1 FROM idem_tokens WHERE expires_at <= ?)",
                vec![Value::from(signed("now", now.0)?)],
            )
            .await
            .map_err(database("sweep_tokens"))?;
        report.remaining_expired = more == Some(1);
        Ok(report)
    }

    /// The core's admission of the token in `id`'s key, on what the database holds: its
    /// entry and the record of its use, read together.
    async fn admit(&self, id: &RecordId) -> Result<Result<(), token::TokenRefusal>, Error> {
        token_of(id)?;
        let mut conn = self.conn("consume").await?;
        let [t, o, k] = key_values(id);
        let row: Option<Row> = conn
            .exec_first(
                format!(
                    "SELECT idem_now(), t.issued_at, t.expires_at, t.intent_id, {} \
                       FROM (SELECT 1) one \
                       LEFT JOIN idem_tokens t \
                         ON t.tenant = ? AND t.operation = ? AND t.token = ? \
                       LEFT JOIN idem_records r \
                         ON r.tenant = ? AND r.operation = ? AND r.idem_key = ?",
                    columns_of("r.")
                ),
                vec![t.clone(), o.clone(), k.clone(), t, o, k],
            )
            .await
            .map_err(database("consume"))?;
        let row = row.ok_or_else(|| Error::Corrupt {
            detail: "the read of a token returned no row".into(),
        })?;
        let now: i64 = get(&row, 0, "idem_tokens")?;
        let now = Timestamp(u64::try_from(now).unwrap_or(0));
        let issued: Option<i64> = get(&row, 1, "idem_tokens")?;
        let entry = issued.map(|_| entry_at(&row, 1)).transpose()?;
        let used: Option<Vec<u8>> = get(&row, 4, "idem_records")?;
        let record = used.map(|_| record_at(&row, 4, id)).transpose()?;
        Ok(token::admit(
            entry.as_ref(),
            record.as_ref(),
            now,
            &self.inner.config,
        ))
    }
}

pub(super) async fn entry_on<Q: Queryable>(
    q: &mut Q,
    id: &RecordId,
) -> Result<Option<IssuedToken>, Error> {
    let row: Option<Row> = q
        .exec_first(
            "SELECT issued_at, expires_at, intent_id FROM idem_tokens \
              WHERE tenant = ? AND operation = ? AND token = ?",
            key_values(id).to_vec(),
        )
        .await
        .map_err(database("get_token"))?;
    row.map(|row| entry_at(&row, 0)).transpose()
}

pub(super) fn entry_at(row: &Row, first: usize) -> Result<IssuedToken, Error> {
    let time = |i: usize| -> Result<Timestamp, Error> {
        let value: i64 = get(row, first + i, "idem_tokens")?;
        Ok(Timestamp(u64::try_from(value).unwrap_or(0)))
    };
    Ok(IssuedToken {
        issued_at: time(0)?,
        expires_at: time(1)?,
        intent_id: get(row, first + 2, "idem_tokens")?,
    })
}

impl Tokens for MySqlStore {
    async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        _now: Timestamp,
    ) -> Result<Issue, Error> {
        MySqlStore::issue_token(self, tenant, operation, ttl_ms, intent_id, random).await
    }

    async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        _now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        MySqlStore::consume(self, id, fingerprint).await
    }

    async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        MySqlStore::get_token(self, id).await
    }

    async fn sweep_tokens(&self, _now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        MySqlStore::sweep_tokens(self, limit).await
    }
}
