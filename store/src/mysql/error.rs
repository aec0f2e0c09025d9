//! How the database's failures become the store's errors: which call failed, whether a
//! lost connection leaves the outcome of a statement unknown, and which refusals mean
//! "start over" (a deadlock, a lock wait that ran out) or "the row is there" (a
//! duplicate key).

use crate::error::Error;

/// A duplicate key (`ER_DUP_ENTRY`): the row is there.
pub(super) const DUPLICATE_KEY: u16 = 1062;
/// A lock wait ran out (`ER_LOCK_WAIT_TIMEOUT`): the statement wrote nothing.
pub(super) const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// A deadlock (`ER_LOCK_DEADLOCK`): the server rolled the transaction back.
pub(super) const DEADLOCK: u16 = 1213;
/// The server runs read-only (`ER_OPTION_PREVENTS_STATEMENT`, `--read-only`): a replica,
/// or a primary demoted by a switchover. The statement wrote nothing.
pub(super) const READ_ONLY: u16 = 1290;

/// An error of the driver as the store's, for `operation`.
pub(super) fn database(operation: &'static str) -> impl Fn(mysql_async::Error) -> Error {
    move |source| Error::MySql { operation, source }
}

/// The server's error code of `e`, when the server refused a statement.
pub(super) fn code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(server) => Some(server.code),
        _ => None,
    }
}

/// True when the statement that failed with `e` ran into another transaction and wrote
/// nothing: a deadlock (the server rolled back) or a lock wait that ran out. The input
/// starts over, a bounded number of times.
pub(super) fn contended(e: &mysql_async::Error) -> bool {
    matches!(code(e), Some(DEADLOCK | LOCK_WAIT_TIMEOUT))
}

/// True when a failed statement may have been applied: the connection broke (an I/O
/// error, a closed connection, no answer), or the server went away mid-statement
/// (shutting down, the connection killed). Any other refusal of the server wrote
/// nothing.
pub(super) fn ambiguous(e: &Error) -> bool {
    let Error::MySql { source, .. } = e else {
        return false;
    };
    match source {
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
        // ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, the idle connection closed.
        mysql_async::Error::Server(server) => matches!(server.code, 1053 | 1927 | 4031),
        _ => false,
    }
}

/// True when the server refused a write because it runs read-only: the host in use is
/// no longer the primary, and the input may start over on the one that is.
pub(super) fn read_only(e: &Error) -> bool {
    matches!(e, Error::MySql { source, .. } if code(source) == Some(READ_ONLY))
}

/// True when no host of the URL's list took writes when asked (a promotion under way),
/// or none gave a connection within the connect timeout: waited out as a restart is.
pub(super) fn out_of_reach(e: &Error) -> bool {
    matches!(e, Error::MySql { source, .. } if super::hosts::out_of_reach(source))
}
