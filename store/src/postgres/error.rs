//! How the database's failures become the store's errors: which call failed, and
//! whether a lost connection leaves the outcome of a statement unknown.

use tokio_postgres::error::SqlState;

use crate::error::Error;

/// An error of the driver as the store's, for `operation`.
pub(super) fn database(operation: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |source| Error::Database { operation, source }
}

/// True when a failed statement may have been applied, or may apply on a retry once the
/// database is back: the connection broke (no answer, or a connection exception, class
/// 08), the server is shutting down or crashed (57P01, 57P02: a commit waiting for a
/// synchronous standby is then committed locally all the same), is starting or in
/// recovery (57P03), or is a standby not promoted yet (25006). Any other refusal of the
/// server wrote nothing.
pub(super) fn ambiguous(e: &Error) -> bool {
    let Error::Database { source, .. } = e else {
        return false;
    };
    match source.code() {
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::READ_ONLY_SQL_TRANSACTION,
                ]
                .contains(code)
        }
    }
}
