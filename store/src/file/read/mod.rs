//! Reading records: one by id, the file in one read transaction, and every record that matches a filter.

pub(crate) mod steps;

use std::ops::ControlFlow;

use idem_core::{Record, RecordId};
use redb::ReadTransaction;

use crate::error::Error;
use crate::file::store::Store;
use crate::seam::filter::ListFilter;

impl Store {
    /// The record under `id`, if any. A settled record the replay cache holds is
    /// answered from memory, without a redb transaction (the source of `read.rs` says
    /// why that is the file's answer); any other from a read snapshot.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn get(&self, id: &RecordId) -> Result<Option<Record>, Error> {
        steps::get(&self.shared.writer, &self.shared.cache, id)
    }

    /// Reads the file in one read transaction, for the application's own tables (a
    /// balance, an outbox). Reads never wait for writers.
    ///
    /// # Errors
    ///
    /// Storage errors beginning the transaction; `read` reports its own in `R`.
    pub fn read<R>(&self, read: impl FnOnce(&ReadTransaction) -> R) -> Result<R, Error> {
        let db = self.shared.writer.read();
        let txn = db.begin_read()?;
        Ok(read(&txn))
    }

    /// Visits the records that match `filter`, from one consistent snapshot, streamed:
    /// records are decoded one at a time, never all held in memory.
    ///
    /// With a state, records come in the order of that state's index: Pending and
    /// Unknown records oldest `created_at` first, settled records and tombstones
    /// soonest `expires_at` first (a file of schema 1 or 2 read before its upgrade:
    /// oldest `created_at` first); without a state, in key order (grouped by tenant,
    /// then operation). `visit` returns [`ControlFlow::Break`] to
    /// stop early. Do not call [`Store::check`] from `visit`.
    ///
    /// # Errors
    ///
    /// [`Error::Id`] for a filter tenant or operation that breaks the id rules; storage
    /// or decode errors.
    pub fn list(
        &self,
        filter: &ListFilter,
        visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
    ) -> Result<(), Error> {
        steps::list(&self.shared.writer, filter, visit)
    }
}
