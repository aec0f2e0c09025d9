//! The consumer inbox of an at-least-once queue (docs/design.md §9):
//! [`crate::Store::inbox`] gives a consumer's [`Inbox`], whose [`Inbox::handle`] runs a
//! message's handler once, however often it is delivered.

pub(crate) mod steps;

use crate::error::Error;
use crate::file::inbox::steps::Inbox;
use crate::file::store::Store;

impl Store {
    /// The inbox of `consumer`: messages of an at-least-once queue handled once each,
    /// their records under `(consumer, topic, message_id)`. See [`Inbox::handle`].
    ///
    /// # Errors
    ///
    /// [`Error::Id`] for a consumer name that breaks the tenant rules.
    pub fn inbox<'s>(&'s self, consumer: &'s str) -> Result<Inbox<'s>, Error> {
        Inbox::new(
            &self.shared.writer,
            &self.shared.cache,
            &self.shared.config,
            consumer,
        )
    }
}
