//! The pool's connections and their session: READ COMMITTED, a short
//! `innodb_lock_wait_timeout`, a statement timeout, strict SQL, UTC. A connection that
//! broke is dropped by the driver's pool, and the next call connects anew: the pool
//! recovers without a restart of the process.

use std::time::Duration;

use mysql_async::{Opts, OptsBuilder, PoolConstraints, PoolOpts};

use super::ConnectError;

/// The session every connection of the engine runs in.
#[derive(Debug, Clone)]
pub(super) struct Session {
    statements: Vec<String>,
}

impl Session {
    /// The session's settings, from the builder's timeouts: the lock timeout in whole
    /// seconds (the server's unit), the statement timeout in seconds with fractions.
    pub(super) fn new(statement: Duration, lock: Duration) -> Result<Session, ConnectError> {
        if lock.subsec_nanos() != 0 || lock.as_secs() == 0 {
            return Err(ConnectError::Timeout {
                field: "lock_timeout",
                problem: format!(
                    "{lock:?}, must be a whole number of seconds, at least 1 (innodb_lock_wait_timeout)"
                ),
            });
        }
        if statement.is_zero() {
            return Err(ConnectError::Timeout {
                field: "statement_timeout",
                problem: "0, must be above 0".into(),
            });
        }
        Ok(Session {
            statements: vec![
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".into(),
                format!("SET SESSION innodb_lock_wait_timeout = {}", lock.as_secs()),
                format!(
                    "SET SESSION max_statement_time = {:.3}",
                    statement.as_secs_f64()
                ),
                "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO'".into(),
                "SET SESSION time_zone = '+00:00'".into(),
                "SET SESSION autocommit = 1".into(),
            ],
        })
    }
}

/// How long a connection of the pool may stay idle before it is closed. The driver
/// closes a returned connection at once when this is 0 (its default) and the pool's
/// minimum is 0: every call would connect, set up its session and prepare its
/// statements again.
const IDLE_FOR: Duration = Duration::from_secs(60);

impl Session {
    /// The session on a Galera node: a statement whose commit fails certification is not
    /// run again by the server (`wsrep_retry_autocommit`, 1 by default), but answered
    /// with the deadlock (1213) that every input starts over on. Run again, a claim's
    /// `RETURNING` would have sent the row of its first, rolled-back run before the row
    /// in the way: its client would take the key for its own, and a second client, whose
    /// claim won, too.
    pub(super) fn galera(mut self) -> Session {
        self.statements
            .push("SET SESSION wsrep_retry_autocommit = 0".into());
        self
    }
}

/// The driver's options for connections of `opts` in `session`, at most `size` of them.
/// The connections are kept as they are between uses (no reset, which would undo the
/// session), idle up to [`IDLE_FOR`], over TCP as the URL says.
pub(super) fn options(opts: &Opts, session: &Session, size: usize) -> Opts {
    let constraints = PoolConstraints::new(0, size).unwrap_or_default();
    OptsBuilder::from_opts(opts.clone())
        .init(session.statements.clone())
        .prefer_socket(false)
        .stmt_cache_size(64)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                .with_inactive_connection_ttl(IDLE_FOR)
                .with_reset_connection(false),
        )
        .into()
}
