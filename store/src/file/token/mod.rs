//! One-time tokens (docs/design.md §9): the right to do something once,
//! handed out by the server. [`crate::Store::issue_token`] issues one (idempotently per
//! intent id), [`crate::Store::consume`] and [`crate::Store::consume_execute`] use it
//! once, [`crate::Store::sweep_tokens`] deletes expired ones.

pub(crate) mod steps;

use idem_core::protocol::Decision;
use idem_core::token::Issue;
use idem_core::{Fingerprint, IssuedToken, Outcome, RecordId, Timestamp, Verdict};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::file::execute::steps as execute;
use crate::file::maintain::steps as maintain;
use crate::file::store::Store;
use crate::seam::report::{Consumed, Executed, SweepReport};
use crate::seam::token::Tokens;
use crate::seam::token::token_of;

impl Store {
    /// Issues a one-time token for `(tenant, operation)`, valid for `ttl_ms` from `now`
    /// (never behind the clock floor), made of `random` (128 bits from a secure source).
    ///
    /// With an `intent_id`, issuing is idempotent: while the token issued for that
    /// intent is unused and unexpired, this answers it again ([`Issue::Existing`]) and
    /// writes nothing, so an issuer whose reply was lost asks again safely.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] for a ttl of 0 or above the store's retention (the record of a
    /// use must outlive the token) or a bad intent id; [`Error::Id`] for a bad tenant or
    /// operation; [`Error::TokenTaken`] when `random` repeats an issued token; storage
    /// errors. Nothing is written on any error.
    pub fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        self.shared.writer.ensure_writable("issue_token")?;
        steps::issue(
            &self.shared.writer,
            &self.shared.config,
            tenant,
            operation,
            ttl_ms,
            intent_id,
            random,
            now,
        )
    }

    /// Consumes the token in `id`'s key (`id` is `(tenant, operation, token)`): the
    /// two-phase [`Store::begin`] on it, after the token is admitted in the same
    /// transaction. A token never issued under this tenant and operation is refused
    /// with [`crate::token::TokenRefusal::NotIssued`], one whose ttl passed before its first use with
    /// [`crate::token::TokenRefusal::Expired`]; otherwise the protocol decides: the first consume
    /// claims, a retry with the same fingerprint is replayed (not "already used"),
    /// another fingerprint is a conflict. Settle a claim with [`Store::complete`],
    /// [`Store::release`] (the token is consumable again) or [`Store::mark_unknown`].
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; storage errors.
    pub fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        self.shared.writer.ensure_writable("consume")?;
        token_of(id)?;
        let id_key = id.to_key_bytes();
        // A record of a use admits the token whatever its entry says (idem-core's
        // `token::admit`): answers that write nothing come from the replay cache or a
        // read snapshot, as for begin, even while a batch runs.
        if let Some(decision) = self.answer_from_snapshot(&id_key, fingerprint, now)? {
            return Ok(Consumed::Admitted(decision));
        }
        let step = steps::consume(id_key, fingerprint);
        self.shared
            .committer
            .input(&self.shared.writer, &self.shared.config, id, now, step)
    }

    /// Atomic consume: admits the token in `id`'s key as [`Store::consume`] does, then
    /// runs `work` as [`Store::execute`] does, in one write transaction: the use of the
    /// token, the work's writes and the settled record commit together, or nothing
    /// does. A `work` that fails leaves the token consumable.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the work's error (rolled back);
    /// [`ExecuteError::Store`] with [`Error::Token`] when the key is not a token's text,
    /// or storage errors.
    pub fn consume_execute<T, E>(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
    ) -> Result<Consumed<Executed<T>>, ExecuteError<E>> {
        token_of(id)?;
        let executed = execute::alone(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            "consume_execute",
            &id.to_key_bytes(),
            fingerprint,
            now,
            |tables, id_key, current, now| {
                steps::admit(tables, id_key, current, now, &self.shared.config)
            },
            work,
        )?;
        Ok(match executed {
            Ok(executed) => Consumed::Admitted(executed),
            Err(refusal) => Consumed::Refused(refusal),
        })
    }

    /// The issued token under `id` (`(tenant, operation, token)`), if it is stored; its
    /// use, if any, is the record [`Store::get`] returns for the same id.
    ///
    /// # Errors
    ///
    /// [`Error::Token`] when the key is not a token's text; storage or decode errors.
    pub fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        token_of(id)?;
        steps::get(&self.shared.writer, id)
    }

    /// Deletes the issued tokens whose ttl passed at `now`, oldest first, at most
    /// `limit`, in write transactions of at most 256. The record of a
    /// used token is left to [`Store::sweep`]; a consume of a swept token is refused
    /// with [`crate::token::TokenRefusal::NotIssued`] once that record is gone too.
    ///
    /// # Errors
    ///
    /// Storage errors (batches committed before one stay committed), or
    /// [`Error::Corrupt`] when the token expiry index names a missing token.
    pub fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        self.shared.writer.ensure_writable("sweep_tokens")?;
        maintain::sweep_tokens(&self.shared.writer, now, limit)
    }
}

impl Tokens for Store {
    async fn issue_token(
        &self,
        tenant: &str,
        operation: &str,
        ttl_ms: u64,
        intent_id: Option<&str>,
        random: [u8; 16],
        now: Timestamp,
    ) -> Result<Issue, Error> {
        Store::issue_token(self, tenant, operation, ttl_ms, intent_id, random, now)
    }

    async fn consume(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Consumed<Decision>, Error> {
        Store::consume(self, id, fingerprint, now)
    }

    async fn get_token(&self, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
        Store::get_token(self, id)
    }

    async fn sweep_tokens(&self, now: Timestamp, limit: usize) -> Result<SweepReport, Error> {
        Store::sweep_tokens(self, now, limit)
    }
}
