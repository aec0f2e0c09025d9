//! What can go wrong, by operation: [`OpenError`] when opening a file, [`Error`] for the
//! protocol and every other operation on an open store, [`ExecuteError`] for
//! [`crate::Store::execute`], [`ImportError`] for [`crate::Store::import`], and
//! [`MaintainError`] for stats, export and compaction.
//!
//! Each variant is one cause, and its message names it: the path, the field, the rule.
//! A message never repeats its cause: where a variant wraps another error, that error is
//! its [`source`](std::error::Error::source), and a reader that prints the whole chain
//! (as the `idem` CLI does) shows each part once.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use idem_core::{ConfigError, DecodeError, IdError, Refusal, TokenError};

/// Opening a store file failed; the file was left as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The path names a directory.
    #[error("{}: is a directory, expected a store file", path.display())]
    IsDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The file (or its file system) is read-only; the store needs to write to it. A
    /// read-only open ([`crate::StoreBuilder::read_only`]) reads such a file.
    #[error(
        "{}: the file is read-only, and a store writes to its file (check the permissions and the mount)",
        path.display()
    )]
    ReadOnly {
        /// The path given.
        path: PathBuf,
    },
    /// Another process kept the file locked for longer than the lock timeout.
    #[error(
        "{}: another process holds the file locked exclusively (a store opened in ExclusiveWriter mode keeps it while it runs); gave up after {} ms (lock timeout)",
        path.display(),
        waited.as_millis()
    )]
    Locked {
        /// The path given.
        path: PathBuf,
        /// How long the open waited.
        waited: Duration,
    },
    /// Another process has the file open with a redb version whose locking protocol
    /// differs from this build's.
    #[error(
        "{}: another process has the file open with an incompatible redb version (different locking protocol)",
        path.display()
    )]
    IncompatibleProcess {
        /// The path given.
        path: PathBuf,
    },
    /// A read-only open ([`crate::StoreBuilder::read_only`]) found no store to read: the
    /// file is missing or empty, or holds no idem tables yet. Only a writable open
    /// creates them.
    #[error(
        "{}: holds no idem store (the file is missing, empty or without idem's tables), and a read-only open creates none",
        path.display()
    )]
    NoStore {
        /// The path given.
        path: PathBuf,
    },
    /// A read-only open found that the last process that wrote the file did not close it
    /// (it crashed or was killed), and that none has it open now: the file must be
    /// recovered, which writes to it, so only a writable open can.
    #[error(
        "{}: the last process that wrote the file did not close it cleanly, and only a writable open recovers it",
        path.display()
    )]
    NeedsRecovery {
        /// The path given.
        path: PathBuf,
    },
    /// The file was written by a newer idem with a schema this build does not read.
    #[error(
        "{}: schema version {found} is newer than this build reads (at most {supported}); use a newer idem",
        path.display()
    )]
    NewerFormat {
        /// The path given.
        path: PathBuf,
        /// The schema version in the file.
        found: u64,
        /// The newest schema version this build reads.
        supported: u64,
    },
    /// The file is not a redb database, is damaged, or is a redb database whose idem
    /// tables are inconsistent.
    #[error("{}: corrupt store file: {detail}", path.display())]
    Corrupt {
        /// The path given.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The protocol settings cannot work.
    #[error("config")]
    Config(#[from] ConfigError),
    /// The builder's options contradict each other.
    #[error("options: {0}")]
    Options(&'static str),
    /// The operating system refused an operation on the file.
    #[error("{}", path.display())]
    Io {
        /// The path given.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// redb failed for another reason.
    #[error("{}: storage", path.display())]
    Storage {
        /// The path given.
        path: PathBuf,
        /// redb's error.
        source: redb::Error,
    },
}

/// An operation on an open store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tenant, operation or key breaks its rule.
    #[error(transparent)]
    Id(#[from] IdError),
    /// A name of an entity or a claimed value (tenant, kind, id, scope, value, holder)
    /// breaks its rule.
    #[error("{field}: {problem}")]
    Name {
        /// The part at fault.
        field: &'static str,
        /// What is wrong with it and the rule.
        problem: String,
    },
    /// A token, ttl or intent id breaks its rule; nothing was written.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A new token's random bits made a token already issued under this tenant and
    /// operation: the caller's source of randomness repeats. Nothing was written.
    #[error("token: the random bytes made a token already issued here; draw new random bytes")]
    TokenTaken,
    /// The protocol refused the input (stale generation, wrong state, not found, outcome
    /// too large); nothing was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The write lock stayed taken, by another process or another thread of this one,
    /// for longer than the lock timeout.
    #[error(
        "the store's write lock was held by another process or thread for {} ms, longer than the lock timeout; retry later",
        waited.as_millis()
    )]
    Busy {
        /// How long this call waited.
        waited: Duration,
    },
    /// A write was asked for from inside the work of [`crate::Store::execute`] or
    /// [`crate::Store::execute_grouped`], on the thread that holds the store's write
    /// transaction for that work: it could only wait for itself. Nothing was written
    /// by this call; write through the transaction the work is given (such as
    /// [`crate::Store::transition_in`]) instead.
    #[error(
        "a store write was called from inside the work of execute, which holds the write transaction; write through the transaction the work is given"
    )]
    Reentrant,
    /// While this store was open, a newer idem upgraded the file to a schema this build
    /// does not read; nothing was read or written. Open the file with a newer idem.
    #[error(
        "the file's schema is now {found}, newer than this build reads (at most {supported}): another process upgraded it; use a newer idem"
    )]
    NewerSchema {
        /// The schema the file has now.
        found: u64,
        /// The newest schema this build reads.
        supported: u64,
    },
    /// A commit failed. Its changes may or may not be durable; the store refuses further
    /// writes until it is reopened (redb's rule after a failed commit).
    #[error("commit failed, the outcome of this call is unknown; reopen the store")]
    CommitFailed(#[source] redb::CommitError),
    /// The store was opened read-only ([`crate::StoreBuilder::read_only`]) and the
    /// operation writes; nothing was written.
    #[error(
        "{operation}: refused, the store was opened read-only and {operation} writes to the file"
    )]
    ReadOnly {
        /// The refused operation: the method's name (`begin`, `sweep`, `check`, ...).
        operation: &'static str,
    },
    /// An earlier commit or I/O failed; the store reopens itself at its next call (a
    /// store opened read-only or on a backend that cannot be opened again: drop it and
    /// open it again).
    #[error("an earlier commit or I/O error failed this store; it reopens itself at its next call")]
    NeedsReopen,
    /// A claim was refused: the free space of the store file's filesystem (on Redis,
    /// the memory left under the server's `maxmemory`) is below the reserve kept for
    /// settling the claims already made. Nothing was written; a retry claims once there
    /// is room.
    #[error(
        "{dir}: {free} bytes free, below the reserve of {reserve} bytes kept for settling the claims already made; new claims are refused until there is room"
    )]
    NoRoom {
        /// The directory of the store file (on Redis, "the Redis server's maxmemory").
        dir: String,
        /// The bytes free there.
        free: u64,
        /// The reserve.
        reserve: u64,
    },
    /// The store failed a commit or an I/O call and its reopen failed too (the disk is
    /// still full, or gone): calls are refused until a reopen succeeds, tried again at
    /// later calls with a growing pause (at most a second).
    #[error("{cause}: this store failed and could not reopen yet; it tries again at a later call")]
    Reopening {
        /// Why the last reopen failed, with the file.
        cause: String,
    },
    /// Bytes in the file do not decode.
    #[error("{what} does not decode")]
    Decode {
        /// What was being decoded, with its key.
        what: String,
        /// Why it does not decode.
        source: DecodeError,
    },
    /// The file's tables contradict each other or redb found damage.
    #[error("store file is corrupt: {detail}")]
    Corrupt {
        /// What was found.
        detail: String,
    },
    /// The operating system gave no random bytes for the seed of the outbox's key
    /// generator (drawn once, on the first intent made without the caller's bytes).
    #[error("the system's random source")]
    Random(#[source] std::io::Error),
    /// The generation counter reached `u64::MAX`; no new claim can be fenced.
    #[error("generation counter exhausted: no generation after 18446744073709551615")]
    GenerationsExhausted,
    /// redb failed for another reason.
    #[error("storage")]
    Storage(#[source] redb::Error),
    /// The database failed the call (the PostgreSQL engine): the server refused a
    /// statement, timed out, or the connection was lost. A statement the server refused
    /// wrote nothing; after a lost connection the engine read the record back, and this
    /// error means it could not tell or could not reach the database.
    #[cfg(feature = "postgres")]
    #[error("database: {operation}")]
    Database {
        /// The call that failed: `begin`, `complete`, `sweep`, ...
        operation: &'static str,
        /// The driver's error, with the server's message.
        source: tokio_postgres::Error,
    },
    /// The database failed the call (the MariaDB engine): the server refused a
    /// statement, timed out, or the connection was lost. A statement the server refused
    /// wrote nothing; after a lost connection the engine read the record back, and this
    /// error means it could not tell or could not reach the database.
    #[cfg(feature = "mysql")]
    #[error("database: {operation}")]
    MySql {
        /// The call that failed: `begin`, `complete`, `sweep`, ...
        operation: &'static str,
        /// The driver's error, with the server's message.
        source: mysql_async::Error,
    },
    /// The Redis server failed the call (the Redis engine): it refused a command or a
    /// function, or the connection was lost. A refused call wrote nothing; after a lost
    /// connection the engine read the record back, and this error means it could not
    /// tell or could not reach the server.
    #[cfg(feature = "redis")]
    #[error("redis: {operation}")]
    Redis {
        /// The call that failed: `begin`, `complete`, `sweep`, ...
        operation: &'static str,
        /// The driver's error, with the server's message.
        source: redis::RedisError,
    },
    /// A begin lost the race for its key to other writers more times than the bound,
    /// each time to a write that changed the record between its read and its write.
    /// Nothing was written by this call; a retry is safe.
    #[error("begin: the record changed under {attempts} attempts in a row; retry")]
    Contended {
        /// How many times the begin read and tried to write.
        attempts: u32,
    },
    /// The engine that holds this store does not offer the operation (the outbox, check
    /// and compact are a file's; a server database keeps its own upkeep). Nothing was
    /// read or written.
    #[error("{what}: the {engine} engine does not offer it; {hint}")]
    Unsupported {
        /// The operation refused: `outbox`, `check`, `compact`, ...
        what: &'static str,
        /// The engine that refused it: `file`, `postgres`, ...
        engine: &'static str,
        /// Where the operation is offered.
        hint: &'static str,
    },
    /// A value does not fit the column that keeps it (the PostgreSQL and MariaDB
    /// engines keep times and generations as signed 64-bit numbers).
    #[error("{field}: {value} is beyond what the database keeps (at most 9223372036854775807)")]
    OutOfRange {
        /// The field: `generation`, `created_at`, ...
        field: &'static str,
        /// The value given.
        value: u64,
    },
}

impl From<redb::Error> for Error {
    fn from(e: redb::Error) -> Error {
        match e {
            redb::Error::Corrupted(detail) => Error::Corrupt { detail },
            redb::Error::PreviousIo => Error::NeedsReopen,
            other => Error::Storage(other),
        }
    }
}

macro_rules! via_redb_error {
    ($($ty:ty),*) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Error {
                Error::from(redb::Error::from(e))
            }
        }
    )*};
}

via_redb_error!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::SetDurabilityError,
    redb::DatabaseError
);

/// [`crate::Store::import`] failed; nothing was imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A line of the input is invalid (or cannot be read).
    #[error("import line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: u64,
        /// The field and the rule it broke.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

/// [`crate::Store::stats`], [`crate::Store::export`] or [`crate::Store::compact`]
/// failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaintainError {
    /// Compaction needs every transaction, in this and every other process, to be
    /// finished.
    #[error(
        "compaction refused: a transaction is in progress in this or another process; retry when the store is idle"
    )]
    CompactionBusy,
    /// Writing the export failed.
    #[error("writing the export")]
    Export(#[source] io::Error),
    /// Reading the size of the store file (or the length of its backend) failed.
    #[error("reading the size of the store file")]
    FileSize(#[source] io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

impl From<redb::CompactionError> for MaintainError {
    fn from(e: redb::CompactionError) -> MaintainError {
        match e {
            redb::CompactionError::TransactionInProgress => MaintainError::CompactionBusy,
            other => MaintainError::Store(Error::from(redb::Error::from(other))),
        }
    }
}

/// [`crate::Store::execute`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError<E> {
    /// The caller's work returned an error. Everything it wrote was rolled back with the
    /// claim: nothing was committed and the key is claimable again.
    #[error("the work failed and was rolled back, the key stays claimable: {0}")]
    Work(E),
    /// The store failed; nothing was committed (or, for [`Error::CommitFailed`], the
    /// outcome is unknown until the store is reopened and the key read).
    #[error(transparent)]
    Store(#[from] Error),
}

/// [`crate::Store::write`] failed; nothing was committed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError<E> {
    /// The caller's work returned an error; everything it wrote was rolled back.
    #[error("the work failed and was rolled back: {0}")]
    Work(E),
    /// The store failed; nothing was committed (or, for [`Error::CommitFailed`], the
    /// store decides at its reopen whether the commit landed).
    #[error(transparent)]
    Store(#[from] Error),
}

/// A JSON view (a record, an intent) that breaks a rule; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ViewError {
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong with it and the rule.
    pub message: String,
}

/// A [`ViewError`] of `field`.
pub(crate) fn view_error(field: &'static str, message: impl Into<String>) -> ViewError {
    ViewError {
        field,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn errors_cross_threads() {
        assert_send_sync::<Error>();
        assert_send_sync::<OpenError>();
        assert_send_sync::<ExecuteError<io::Error>>();
        assert_send_sync::<ImportError>();
        assert_send_sync::<MaintainError>();
    }

    /// Every message of a chain, joined: what a reader that prints causes shows.
    fn chain(error: &dyn std::error::Error) -> Vec<String> {
        let mut messages = vec![error.to_string()];
        let mut cause = error.source();
        while let Some(e) = cause {
            messages.push(e.to_string());
            cause = e.source();
        }
        messages
    }

    #[test]
    fn no_message_repeats_its_cause() {
        let io = || io::Error::new(io::ErrorKind::StorageFull, "no space left on device");
        let errors: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(Error::CommitFailed(redb::CommitError::Storage(
                redb::StorageError::Io(io()),
            ))),
            Box::new(Error::Storage(redb::Error::Io(io()))),
            Box::new(Error::Decode {
                what: "record t/o/k".into(),
                source: DecodeError::Invalid { what: "record" },
            }),
            Box::new(OpenError::Io {
                path: "/tmp/x.redb".into(),
                source: io(),
            }),
            Box::new(OpenError::Storage {
                path: "/tmp/x.redb".into(),
                source: redb::Error::Io(io()),
            }),
            Box::new(MaintainError::Export(io())),
            Box::new(MaintainError::FileSize(io())),
            Box::new(ImportError::Store(Error::Storage(redb::Error::Io(io())))),
        ];
        for error in &errors {
            let messages = chain(error.as_ref());
            assert!(messages.len() >= 2, "{messages:?} has no cause");
            for (i, outer) in messages.iter().enumerate() {
                for inner in &messages[i + 1..] {
                    assert!(
                        !outer.contains(inner.as_str()),
                        "{outer:?} repeats its cause {inner:?}"
                    );
                }
            }
        }
        assert_eq!(
            chain(&Error::CommitFailed(redb::CommitError::Storage(
                redb::StorageError::Io(io())
            )))
            .first()
            .map(String::as_str),
            Some("commit failed, the outcome of this call is unknown; reopen the store")
        );
    }

    #[test]
    fn messages_name_the_cause() {
        let locked = OpenError::Locked {
            path: "/tmp/x.redb".into(),
            waited: Duration::from_millis(250),
        };
        assert_eq!(
            locked.to_string(),
            "/tmp/x.redb: another process holds the file locked exclusively (a store opened in ExclusiveWriter mode keeps it while it runs); gave up after 250 ms (lock timeout)"
        );
        let import = ImportError::Line {
            line: 3,
            message: "fingerprint: 10 characters, expected 64 hex digits (0-9, a-f)".into(),
        };
        assert_eq!(
            import.to_string(),
            "import line 3: fingerprint: 10 characters, expected 64 hex digits (0-9, a-f)"
        );
        assert_eq!(
            Error::ReadOnly { operation: "begin" }.to_string(),
            "begin: refused, the store was opened read-only and begin writes to the file"
        );
        let work: ExecuteError<&str> = ExecuteError::Work("card declined");
        assert_eq!(
            work.to_string(),
            "the work failed and was rolled back, the key stays claimable: card declined"
        );
    }
}
