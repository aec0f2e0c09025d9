//! The redb database under a [`Store`](crate::Store): writable, or read-only.
//!
//! Every read of the store goes through [`Handle::begin_read`], whichever way the file
//! was opened, so reads have one implementation, and through [`guard_read`], which
//! reports a file damaged outside redb as corrupt. Writes need [`Handle::writable`],
//! which a read-only handle does not give.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use redb::{
    Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, StorageError, TransactionError,
};

use crate::error::Error;

/// The redb database a store works on.
pub(crate) enum Handle {
    /// Opened for writing: the default.
    Writable(Database),
    /// Opened with [`crate::StoreBuilder::read_only`]: it reads the latest commit of
    /// every process and changes no byte of the file.
    ReadOnly(ReadOnlyDatabase),
    /// Closed after a failure, while the store reopens itself: every read and write
    /// is refused as redb refuses them after an I/O error.
    Closed,
}

impl Handle {
    /// A read transaction on the latest commit, of this or any other process.
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        match self {
            Handle::Writable(db) => db.begin_read(),
            Handle::ReadOnly(db) => db.begin_read(),
            Handle::Closed => Err(TransactionError::Storage(StorageError::PreviousIo)),
        }
    }

    /// The database to write, or `None` when it was opened read-only.
    pub(crate) fn writable(&self) -> Option<&Database> {
        match self {
            Handle::Writable(db) => Some(db),
            Handle::ReadOnly(_) | Handle::Closed => None,
        }
    }

    /// [`Handle::writable`], for redb's calls that need the database to themselves.
    pub(crate) fn writable_mut(&mut self) -> Option<&mut Database> {
        match self {
            Handle::Writable(db) => Some(db),
            Handle::ReadOnly(_) | Handle::Closed => None,
        }
    }
}

/// Runs a read of the file, turning a panic of redb's into [`Error::Corrupt`].
///
/// redb may panic on pages damaged outside it (documented for plain opens). A writable
/// store verifies the file when it opens ([`crate::StoreBuilder::verify_on_open`]); a
/// read-only one cannot, so its reads may be the first to meet the damage. The caller's
/// own code inside the read (a visitor, a writer) runs through [`Caller::call`], and its
/// panic is resumed as its own, never taken for damage.
pub(crate) fn guard_read<T, E: From<Error>>(
    read: impl FnOnce(&mut Caller) -> Result<T, E>,
) -> Result<T, E> {
    let mut caller = Caller(None);
    let result = catch_unwind(AssertUnwindSafe(|| read(&mut caller)));
    if let Some(panic) = caller.0 {
        resume_unwind(panic);
    }
    result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        Err(Error::Corrupt {
            detail: format!("redb could not read the file's structure ({what})"),
        }
        .into())
    })
}

/// The caller's code inside a [`guard_read`]: a panic in it is kept, to be resumed.
pub(crate) struct Caller(Option<Box<dyn Any + Send>>);

impl Caller {
    /// Runs the caller's `code`; `None` when it panicked (the read should stop: the panic
    /// is resumed when the guarded read returns).
    pub(crate) fn call<R>(&mut self, code: impl FnOnce() -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(code)) {
            Ok(done) => Some(done),
            Err(panic) => {
                self.0 = Some(panic);
                None
            }
        }
    }
}
