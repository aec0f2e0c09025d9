//! The consumer inbox: each message of an at-least-once queue handled once.
//!
//! A queue redelivers a message until the consumer acknowledges it, so a consumer that
//! crashed between handling and acknowledging sees it again. The inbox maps
//! `(consumer, topic, message_id)` onto a record id `(tenant, operation, key)` and runs
//! the handler with [`crate::Store::execute`]: the handler's writes and the record of the
//! message commit together. A redelivered message is answered [`Handled::Duplicate`]
//! without running the handler, and may be acknowledged again; a handler that fails
//! leaves no record, so the redelivery runs it.
//!
//! A message redelivered after the store's retention ([`idem_core::Config`]) is
//! handled again: the retention must outlast the queue's longest redelivery.

use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::file::cache::ReplayCache;
use crate::file::execute::steps as execute;
use crate::file::writer::Writer;
use crate::seam::report::Handled;

/// The inbox of one consumer. See [`crate::Store::inbox`].
#[derive(Clone, Copy)]
pub struct Inbox<'s> {
    writer: &'s Writer,
    cache: &'s ReplayCache,
    config: &'s Config,
    consumer: &'s str,
}

impl std::fmt::Debug for Inbox<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("consumer", &self.consumer)
            .field("writer", self.writer)
            .finish_non_exhaustive()
    }
}

impl<'s> Inbox<'s> {
    /// The inbox of `consumer` in the store of `writer`, `cache` and `config`.
    pub(crate) fn new(
        writer: &'s Writer,
        cache: &'s ReplayCache,
        config: &'s Config,
        consumer: &'s str,
    ) -> Result<Inbox<'s>, Error> {
        RecordId::new(consumer, "-", "-")?;
        Ok(Inbox {
            writer,
            cache,
            config,
            consumer,
        })
    }

    /// The consumer this inbox belongs to.
    #[must_use]
    pub fn consumer(&self) -> &str {
        self.consumer
    }

    /// A delivery of `message_id` on `topic`, whose content has `fingerprint`: runs
    /// `handler` in the store's write transaction unless the message was handled
    /// before. The handler writes its effects to its own tables in the transaction it
    /// gets and returns the outcome to keep and a value.
    ///
    /// The handler runs under the store's write lock: keep it short and do no network
    /// I/O in it (as for [`crate::Store::execute`]).
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the handler's error: everything it wrote was rolled
    /// back and no record was kept, so a redelivery runs it again; do not acknowledge.
    /// [`ExecuteError::Store`] with [`Error::Id`] for a topic or message id that breaks
    /// the id rules, or storage errors.
    pub fn handle<T, E>(
        &self,
        topic: &str,
        message_id: &str,
        fingerprint: Fingerprint,
        now: Timestamp,
        handler: impl FnOnce(&WriteTransaction) -> Result<(Outcome, T), E>,
    ) -> Result<Handled<T>, ExecuteError<E>> {
        let id = RecordId::new(self.consumer, topic, message_id).map_err(Error::from)?;
        let Ok(executed) = execute::alone(
            self.writer,
            self.cache,
            self.config,
            "execute",
            &id.to_key_bytes(),
            fingerprint,
            now,
            execute::admit_all,
            |txn| handler(txn).map(|(outcome, value)| (Verdict::Succeeded, outcome, value)),
        )?;
        Ok(Handled::of(executed))
    }
}
