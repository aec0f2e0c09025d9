//! A plain write transaction for the application's own tables, in the store's
//! transaction discipline: after this process's other writers and within the lock
//! timeout, committed durably as the store's own commits are, or rolled back whole.

use redb::WriteTransaction;

use crate::error::{Error, WriteError};
use crate::file::store::Store;

impl Store {
    /// Runs `work` in one write transaction on the store file and commits what it wrote,
    /// for the application's own tables: a sale beside its intent, the seed an outbox's
    /// jitter needs, a counter. When `work` fails, everything it wrote is rolled back
    /// and its error returned. The transaction is this process's only one while it runs
    /// (other writers wait, up to the lock timeout), and its commit is as durable as the
    /// store's own. Do not open idem's tables (their names start with `idem_`); a key's
    /// protocol goes through [`Store::execute`], whose work gets the same transaction.
    ///
    /// ```
    /// use idem_store::Store;
    /// use idem_store::redb::TableDefinition;
    ///
    /// const SEED: TableDefinition<&str, u64> = TableDefinition::new("shop_seed");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("till.redb"))?;
    /// store.write(|txn| -> Result<(), idem_store::redb::Error> {
    ///     txn.open_table(SEED)?.insert("outbox", 42)?;
    ///     Ok(())
    /// })?;
    /// let seed = store.read(|txn| -> Result<Option<u64>, idem_store::redb::Error> {
    ///     Ok(txn.open_table(SEED)?.get("outbox")?.map(|v| v.value()))
    /// })??;
    /// assert_eq!(seed, Some(42));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`WriteError::Work`] with `work`'s error, nothing committed;
    /// [`WriteError::Store`] when the store failed (read-only, busy past the lock
    /// timeout, a failed commit, which the store reopens itself after).
    pub fn write<T, E>(
        &self,
        work: impl FnOnce(&WriteTransaction) -> Result<T, E>,
    ) -> Result<T, WriteError<E>> {
        let writer = &self.shared.writer;
        writer.ensure_usable("write")?;
        // Inside an execute's work, on its thread: the transaction is that one's.
        if writer.writing_here() {
            return Err(WriteError::Store(Error::Reentrant));
        }
        writer.transact("write", |txn, _tables| match work(txn) {
            Ok(answer) => Ok((answer, true)),
            Err(e) => Err(WriteError::Work(e)),
        })
    }
}
