//! The sender's outbox: intents kept in the same file.

use idem_core::{LedgerConfig, LedgerConfigError};

use crate::protocol::outbox::Outbox;

use crate::api::store::Store;

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
