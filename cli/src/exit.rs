//! Exit statuses of the CLI contract and the one-line failure that goes with them.

use std::fmt;
use std::panic;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

/// An exit status of the CLI contract (docs/design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Done: claimed, replay, settled, found.
    Done = 0,
    /// Runtime error: I/O, corrupt file.
    Runtime = 1,
    /// Usage or invalid input.
    Usage = 2,
    /// The key is live with another fingerprint.
    Conflict = 3,
    /// Another executor holds the key.
    InProgress = 4,
    /// The outcome is unknown and needs reconciliation.
    Unknown = 5,
    /// Stale generation, or the record's state does not fit the command.
    Stale = 6,
    /// No record under the key.
    NotFound = 7,
    /// No such token was issued for this tenant and operation.
    NotIssued = 8,
    /// The token's ttl passed before its first use.
    TokenExpired = 9,
    /// The request ran; its outcome is past retention and only its tombstone is kept.
    Forgotten = 13,
}

impl Exit {
    /// The process exit code.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }
}

/// A command that could not do its work: printed as `idem: <message>` on stderr, one
/// line, and the process exits with `exit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The status to exit with.
    pub(crate) exit: Exit,
    /// What went wrong, naming the field or file and the rule.
    pub(crate) message: String,
}

impl Failure {
    /// A failure with `exit` and `message`.
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Failure {
        Failure {
            exit,
            message: message.into(),
        }
    }

    /// The reader of stdout went away (`idem list | head`): the command stops, with
    /// nothing to say and its work done, as a pipe's writer does (exit 0).
    pub(crate) fn reader_gone() -> Failure {
        Failure::new(Exit::Done, String::new())
    }

    /// A failed write to stdout: the reader gone ([`Failure::reader_gone`]), or a
    /// runtime failure naming stdout.
    pub(crate) fn stdout(e: &std::io::Error) -> Failure {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::reader_gone()
        } else {
            Failure::runtime(format!("stdout: {e}"))
        }
    }

    /// Bad input from the command line (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::new(Exit::Usage, message)
    }

    /// An I/O or storage problem (exit 1).
    pub(crate) fn runtime(message: impl Into<String>) -> Failure {
        Failure::new(Exit::Runtime, message)
    }

    /// The message as one line: any line breaks from nested errors become "; ".
    pub(crate) fn one_line(&self) -> String {
        let parts: Vec<&str> = self
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        parts.join("; ")
    }
}

/// `error` and every cause in its chain, joined by ": ": what a store error says in
/// full (its message names the operation, its sources say why, each once).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.one_line())
    }
}

/// What a command returns: the exit code to end with (a contract status, or a program's
/// status for `exec`), or a failure to report.
pub(crate) type Ending = Result<i32, Failure>;

/// Set by the panic hook of [`quiet_redb_panics`]: whether the last panic was redb's.
static REDB_PANICKED: AtomicBool = AtomicBool::new(false);

/// Keeps redb's panics off stderr; every other panic is reported as before.
///
/// redb may panic on a file damaged outside it. The store turns such a panic into a
/// corrupt-file error, which the command reports on its one line; a panic the store did
/// not catch ends the command with [`redb_panicked`]'s failure instead. Either way the
/// default report (a message and a backtrace hint, several lines) is not wanted.
pub(crate) fn quiet_redb_panics() {
    let report = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let in_redb = info.location().is_some_and(|at| in_redb(at.file()));
        REDB_PANICKED.store(in_redb, Ordering::Relaxed);
        if !in_redb {
            report(info);
        }
    }));
}

/// True when the last panic since [`quiet_redb_panics`] was redb's.
pub(crate) fn redb_panicked() -> bool {
    REDB_PANICKED.load(Ordering::Relaxed)
}

/// True for a source file of the redb crate: under `redb-<version>/` (crates.io) or
/// `redb/` (a checkout or a vendored copy).
fn in_redb(file: &str) -> bool {
    Path::new(file).components().any(|part| match part {
        Component::Normal(name) => name
            .to_str()
            .is_some_and(|name| name == "redb" || name.starts_with("redb-")),
        _ => false,
    })
}

/// The one line of a clap error: its first paragraph, without the `error: ` prefix.
pub(crate) fn clap_line(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let paragraph: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let line = paragraph.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line).to_string();
    if line.is_empty() {
        "invalid command line; see 'idem --help'".into()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redb_sources_are_recognized() {
        assert!(in_redb(
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/redb-4.6.0/src/tree_store/btree.rs"
        ));
        assert!(in_redb("vendor/redb/src/db.rs"));
        assert!(!in_redb("cli/src/main.rs"));
        assert!(!in_redb("/home/u/redbook/src/main.rs"));
    }

    #[test]
    fn failures_print_on_one_line() {
        let f = Failure::usage("first\n  second\n\nthird");
        assert_eq!(f.to_string(), "first; second; third");
        assert_eq!(Exit::NotFound.code(), 7);
        assert_eq!((Exit::NotIssued.code(), Exit::TokenExpired.code()), (8, 9));
    }
}
