//! A failed batch's answers: the error for every caller of a batch whose commit failed,
//! each its own copy, as redb's errors cannot be cloned.

use std::io;

use redb::{CommitError, StorageError};

use super::jobs::Job;
use crate::error::Error;

/// Gives every job of a failed batch the error: the first the error itself, the others
/// an equivalent one (redb's errors cannot be cloned).
pub(super) fn fail_all(batch: &mut [Box<dyn Job>], error: Error) {
    let Some((first, rest)) = batch.split_first_mut() else {
        return;
    };
    for job in rest {
        job.fail(replicate(&error));
    }
    first.fail(error);
}

/// An error equal in variant and message to `error`, for another caller of its batch.
fn replicate(error: &Error) -> Error {
    match error {
        Error::Busy { waited } => Error::Busy { waited: *waited },
        Error::NeedsReopen => Error::NeedsReopen,
        Error::Reopening { cause } => Error::Reopening {
            cause: cause.clone(),
        },
        Error::NoRoom { dir, free, reserve } => Error::NoRoom {
            dir: dir.clone(),
            free: *free,
            reserve: *reserve,
        },
        Error::CommitFailed(CommitError::TransactionPoisoned) => {
            Error::CommitFailed(CommitError::TransactionPoisoned)
        }
        Error::CommitFailed(CommitError::Storage(storage)) => {
            Error::CommitFailed(CommitError::Storage(replicate_storage(storage)))
        }
        Error::Corrupt { detail } => Error::Corrupt {
            detail: detail.clone(),
        },
        Error::Refused(refusal) => Error::Refused(refusal.clone()),
        Error::Storage(redb::Error::TransactionPoisoned) => {
            Error::Storage(redb::Error::TransactionPoisoned)
        }
        Error::Storage(redb::Error::Io(e)) => Error::Storage(redb::Error::Io(copy_io(e))),
        other => Error::Storage(redb::Error::Io(io::Error::other(with_causes(other)))),
    }
}

fn replicate_storage(error: &StorageError) -> StorageError {
    match error {
        StorageError::Io(e) => StorageError::Io(copy_io(e)),
        StorageError::Corrupted(detail) => StorageError::Corrupted(detail.clone()),
        StorageError::PreviousIo => StorageError::PreviousIo,
        other => StorageError::Io(io::Error::other(with_causes(other))),
    }
}

/// `error` and every cause in its chain, joined by ": ", for a copy that has no source.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

fn copy_io(error: &io::Error) -> io::Error {
    io::Error::new(error.kind(), error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn replicated_errors_keep_variant_and_message() {
        let io = || io::Error::new(io::ErrorKind::StorageFull, "no space left on device");
        let errors = [
            Error::Busy {
                waited: Duration::from_millis(7),
            },
            Error::NeedsReopen,
            Error::Reopening {
                cause: "idem.redb: no space left on device".into(),
            },
            Error::CommitFailed(CommitError::Storage(StorageError::Io(io()))),
            Error::CommitFailed(CommitError::TransactionPoisoned),
            Error::Storage(redb::Error::Io(io())),
        ];
        for error in &errors {
            let copy = replicate(error);
            assert_eq!(copy.to_string(), error.to_string());
            assert_eq!(std::mem::discriminant(&copy), std::mem::discriminant(error));
        }
    }
}
