//! Export and import of a store as JSON lines.

pub(crate) mod steps;

use std::io::{BufRead, Write};

use crate::error::{ImportError, MaintainError};
use crate::file::store::Store;
use crate::seam::report::Transferred;

impl Store {
    /// Writes every record and every intent of the outbox as JSON lines, after a header
    /// line with the generation counter and the counts, from one snapshot (see the
    /// format in the source of `transfer.rs`). Returns what it wrote.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; [`MaintainError::Export`] writing `out`.
    pub fn export(&self, out: impl Write) -> Result<Transferred, MaintainError> {
        steps::export(&self.shared.writer, out)
    }

    /// Reads what [`Store::export`] wrote, records and intents, in one transaction: every
    /// line is validated, and on the first bad one nothing is imported. A record or
    /// intent already in the store byte for byte is accepted as is; a different one under
    /// the same id or key is refused.
    /// Raises the generation counter to at least the header's and every record's
    /// generation. The header line is optional (JSON lines of records alone import too).
    /// Returns what it read.
    ///
    /// # Errors
    ///
    /// [`ImportError::Line`] naming the line and the field; storage errors.
    pub fn import(&self, input: impl BufRead) -> Result<Transferred, ImportError> {
        steps::import(&self.shared.writer, &self.shared.cache, input)
    }
}
