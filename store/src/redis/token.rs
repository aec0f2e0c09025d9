//! One-time tokens on Redis (docs/design.md §9): issued idempotently per intent id,
//! consumed as a begin that answers NotIssued or TokenExpired first, swept when their
//! ttl passed. idem-core decides ([`idem_core::token::issue`], [`idem_core::token::admit`])
//! on what the engine read with the server's clock; `idem_issue` writes a new token's
//! entry and moves its intent's entry to it only where the intent's entry is still what
//! was read (compare-and-set). A token's use is an ordinary record under
//! `(tenant, operation, token)`, so two consumers can never both claim it: the record's
//! key admits one.

use idem_core::protocol::Decision;
use idem_core::token::{self, Earlier, Issue};
use idem_core::{Fingerprint, IssuedToken, RecordId, Timestamp, Token};

use super::RedisStore;
use super::keys::{record_id_of, record_key};
use super::two_phase::failed;
use crate::error::Error;
use crate::seam::receiver::Receiver;
use crate::seam::report::{Consumed, SweepReport};
use crate::seam::token::{Tokens, token_of};

/// How many times an issue reads and tries to write before it gives up: each loss means
/// another issue for the same intent wrote first.
const ISSUE_ATTEMPTS: u32 = 16;

/// Every issued token's id, scored by the time it expires.
pub(super) const TOKENS: &str = "{idem}:tokens";

/// The key of the entry of the issued token `id` (`(tenant, operation, token)`).
pub(super) fn token_key(id: &RecordId) -> Vec<u8> {
    [b"{idem}:t:".as_slice(), &id.to_key_bytes()].concat()
}

/// The key of the entry of the intent `intent_id` under `(tenant, operation)`: the token
/// issued for it last.
pub(super) fn intent_key(tenant: &str, operation: &str, intent_id: &str) -> Result<Vec<u8>, Error> {
    let id = RecordId::new(tenant, operation, intent_id)?;
    Ok([b"{idem}:ti:".as_slice(), &id.to_key_bytes()].concat())
}

/// The entry in `bytes` (empty: none), of `id`.
pub(super) fn entry_of(bytes: &[u8], id: &RecordId) -> Result<Option<IssuedToken>, Error> {
    if bytes.is_empty() {
        return Ok(None);
    }
    IssuedToken::decode(bytes)
        .map(Some)
        .map_err(|source| Error::Decode {
            what: format!("the token entry of {id}"),
            source,
        })
}

/// Values read together with the server's clock.
struct Seen {
    values: Vec<Vec<u8>>,
    now: Timestamp,
}

impl RedisStore {
    /// The values of `keys` (empty for absent ones) and the server's clock, read
    /// together.
    async fn read_many(&self, operation: &'static str, keys: &[Vec<u8>]) -> Result<Seen, Error> {
        let mut conn = self.conn();
        let mut call = redis::cmd("FCALL");
        call.arg("idem_read_many").arg(keys.len());
        for key in keys {
            call.arg(key);
        }
        let (values, now): (Vec<Vec<u8>>, u64) = call
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        Ok(Seen {
            values,
            now: Timestamp(now),
        })
    }

    /// Writes the new token `id`'s `entry` and, for an intent, its entry (`intent`: its
    /// key and the token text read there, empty for none). `Ok(None)` when the intent's
    /// entry changed since it was read; [`Error::TokenTaken`] when the token is there.
    pub(super) async fn write_issue(
        &self,
        id: &RecordId,
        entry: &IssuedToken,
        intent: Option<(&[u8], &[u8])>,
    ) -> Result<Option<()>, Error> {
        let (intent_key, seen) = intent.unwrap_or((&[], &[]));
        let mut conn = self.conn();
        let written: i64 = redis::cmd("FCALL")
            .arg("idem_issue")
            .arg(1)
            .arg(token_key(id))
            .arg(entry.encode())
            .arg(entry.expires_at.0)
            .arg(id.to_key_bytes())
            .arg(intent_key)
            .arg(seen)
            .arg(
                Token::parse(id.key())
                    .map(|t| t.encode())
                    .map_err(Error::from)?,
            )
            .query_async(&mut conn)
            .await
            .map_err(failed("issue_token"))?;
        match written {
            1 => Ok(Some(())),
            -1 => Err(Error::TokenTaken),
            _ => Ok(None),
        }
    }

    /// The core's admission of the token in `id`'s key, on its entry and the record of
    /// its use read together with the server's clock.
    async fn admit(&self, id: &RecordId) -> Result<Result<(), token::TokenRefusal>, Error> {
        token_of(id)?;
        let seen = self
            .read_many("consume", &[token_key(id), record_key(id)])
            .await?;
        let entry = entry_of(&seen.values[0], id)?;
        let record = super::keys::decode(&seen.values[1], id)?;
        Ok(token::admit(
            entry.as_ref(),
            record.as_ref(),
            seen.now,
            &self.inner.config,
        ))
    }
}

impl Tokens for RedisStore {
    /// Issues on the server's clock; `now` is not used.
    async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        _now: Timestamp,
    ) -> Result<Issue, Error> {
        let config = &self.inner.config;
        token::check_ttl(ttl_ms, config)?;
        let intent = match intent_id {
            Some(intent_id) => {
                token::check_intent_id(intent_id)?;
                Some(intent_key(tenant, operation, intent_id)?)
            }
            None => {
                RecordId::new(tenant, operation, "-")?;
                None
            }
        };
        for _ in 0..ISSUE_ATTEMPTS {
            // The intent's entry, the earlier token's entry and its use.
            let (earlier, seen_intent, now) = match &intent {
                None => (None, Vec::new(), self.clock("issue_token").await?),
                Some(key) => {
                    let seen = self
                        .read_many("issue_token", std::slice::from_ref(key))
                        .await?;
                    let text = seen.values.into_iter().next().unwrap_or_default();
                    if text.is_empty() {
                        (None, text, seen.now)
                    } else {
                        let token = Token::decode(&text).map_err(|source| Error::Decode {
                            what: "an intent's token".into(),
                            source,
                        })?;
                        (Some(token), text, seen.now)
                    }
                }
            };
            let earlier_state = match &earlier {
                Some(token) => {
                    let id = RecordId::new(tenant, operation, token.as_str())?;
                    let seen = self
                        .read_many("issue_token", &[token_key(&id), record_key(&id)])
                        .await?;
                    Some((entry_of(&seen.values[0], &id)?, !seen.values[1].is_empty()))
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
                return Ok(issued);
            };
            let id = RecordId::new(tenant, operation, token.as_str())?;
            let intent = intent.as_deref().map(|key| (key, seen_intent.as_slice()));
            if self.write_issue(&id, entry, intent).await?.is_some() {
                return Ok(issued);
            }
            // Another issue for the intent wrote first: decide again.
        }
        Err(Error::Contended {
            attempts: ISSUE_ATTEMPTS,
        })
    }

    /// Admits the token in `id`'s key on the server's clock, then begins on it; `now` is
    /// not used.
    async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        _now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        if let Err(refusal) = self.admit(id).await? {
            return Ok(Consumed::Refused(refusal));
        }
        Ok(Consumed::Admitted(
            self.begin(id, fingerprint, Timestamp(0)).await?,
        ))
    }

    async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        token_of(id)?;
        let mut conn = self.conn();
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(token_key(id))
            .query_async(&mut conn)
            .await
            .map_err(failed("get_token"))?;
        entry_of(&bytes.unwrap_or_default(), id)
    }

    /// Deletes the issued tokens whose ttl passed on the server's clock, soonest first,
    /// at most `limit`; `now` is not used. A used token's record stays (it is swept with
    /// the records); the intent's entry that names a deleted token goes with it.
    async fn sweep_tokens(&self, _now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        let now = self.clock("sweep_tokens").await?;
        let mut conn = self.conn();
        let mut members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(TOKENS)
            .arg("-inf")
            .arg(now.0)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.saturating_add(1).min(i64::MAX as usize))
            .query_async(&mut conn)
            .await
            .map_err(failed("sweep_tokens"))?;
        let mut report = SweepReport {
            remaining_expired: members.len() > limit,
            ..SweepReport::default()
        };
        members.truncate(limit);
        for member in members {
            let id = record_id_of(&member, "a token's id")?;
            let entry = self.get_token(&id).await?;
            let intent = match entry.as_ref().and_then(|e| e.intent_id.as_deref()) {
                Some(intent_id) => intent_key(id.tenant(), id.operation(), intent_id)?,
                None => Vec::new(),
            };
            let token = Token::parse(id.key())?;
            let dropped: i64 = redis::cmd("FCALL")
                .arg("idem_drop_token")
                .arg(1)
                .arg(token_key(&id))
                .arg(&member)
                .arg(intent)
                .arg(token.encode())
                .query_async(&mut conn)
                .await
                .map_err(failed("sweep_tokens"))?;
            report.removed += u64::try_from(dropped).unwrap_or(0);
        }
        Ok(report)
    }
}
