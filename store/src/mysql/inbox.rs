//! The consumer inbox on MariaDB: each message of an at-least-once queue handled once by
//! a fleet of consumers. `(consumer, topic, message_id)` maps onto a record id, and the
//! handler runs in [`MySqlStore::execute`]'s transaction: its writes and the message's
//! record commit together; a redelivery, to any consumer of the fleet, is a duplicate; a
//! handler that fails (or a consumer that dies mid-handling) leaves no record, so the
//! redelivery runs it.

use std::future::Future;
use std::pin::Pin;

use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
use mysql_async::Transaction;

use super::MySqlStore;
use crate::error::{Error, ExecuteError};
use crate::seam::report::Handled;

/// The handler of a message: its writes in the transaction it is given, and the outcome
/// to keep for duplicates with a value.
pub type Handler<'t, T, E> = Pin<Box<dyn Future<Output = Result<(Outcome, T), E>> + Send + 't>>;

/// The inbox of one consumer on MariaDB; from [`MySqlStore::inbox`].
#[derive(Debug, Clone)]
pub struct MySqlInbox {
    store: MySqlStore,
    consumer: String,
}

impl MySqlStore {
    /// The inbox of `consumer` (the tenant of its records): every replica of the
    /// consumer shares it.
    ///
    /// # Errors
    ///
    /// [`Error::Id`] when `consumer` breaks the tenant's rule.
    pub fn inbox(&self, consumer: &str) -> Result<MySqlInbox, Error> {
        RecordId::new(consumer, "-", "-")?;
        Ok(MySqlInbox {
            store: self.clone(),
            consumer: consumer.to_owned(),
        })
    }
}

impl MySqlInbox {
    /// The consumer this inbox belongs to.
    #[must_use]
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// A delivery of `message_id` on `topic`, whose content has `fingerprint`: runs
    /// `handler` in a transaction with the message's record unless the message was
    /// handled before. The handler must not call out over the network: it holds a row
    /// lock.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Work`] with the handler's error: everything it wrote was rolled
    /// back and no record kept, so a redelivery runs it again; do not acknowledge.
    /// [`ExecuteError::Store`] for a topic or message id that breaks the id rules, or the
    /// database's.
    pub async fn handle<T, E, F>(
        &self,
        topic: &str,
        message_id: &str,
        fingerprint: Fingerprint,
        handler: F,
    ) -> Result<Handled<T>, ExecuteError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c>) -> Handler<'t, T, E> + Send,
    {
        let id = RecordId::new(&self.consumer, topic, message_id).map_err(Error::from)?;
        let executed = self
            .store
            .execute(&id, fingerprint, move |txn| {
                let handled = handler(txn);
                Box::pin(async move {
                    handled
                        .await
                        .map(|(outcome, value)| (Verdict::Succeeded, outcome, value))
                })
            })
            .await?;
        Ok(Handled::of(executed))
    }
}
