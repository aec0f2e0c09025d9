//! The sender's outbox (docs/design.md §3): intents kept in the store's own
//! file, created in the same transaction as the business write, sent and retried with
//! their key until a definitive answer. [`crate::Store::outbox`] gives the [`Outbox`].

use idem_core::{LedgerConfig, LedgerConfigError};

use crate::file::outbox::Outbox;
use crate::file::store::Store;

impl Store {
    /// The outbox of this store's sender, with the settings its retries follow.
    ///
    /// # Errors
    ///
    /// [`LedgerConfigError`] for settings that cannot work.
    pub fn outbox(&self, config: LedgerConfig) -> Result<Outbox<'_>, LedgerConfigError> {
        Outbox::new(&self.shared.writer, config)
    }
}
