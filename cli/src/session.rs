//! One run of `idem`: where the store is, what time it is, how to print, and how store
//! errors become exit statuses.

use std::path::PathBuf;
use std::time::Duration;

use idem_core::{Config, RecordId, Refusal, Timestamp};
use idem_store::any::{self, AnyOpenError, AnyStore, AnyStoreBuilder, BlockingStore};
use idem_store::{Error, ImportError, MaintainError, OpenError};

use crate::exit::{Exit, Failure, with_causes};
use crate::output::Printer;
use crate::time::Clock;

/// How long a command that writes waits for another process that holds the store's
/// lock. Generous: the CLI runs next to a live application and a few dozen scripts may
/// start at once.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a command that only reads waits for a process that holds the file
/// exclusively (an application in `ExclusiveWriter` mode keeps it for as long as it
/// runs): the library's default bound, after which the read fails with the lock named.
const READ_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How a command opens the store file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// `begin`, `exec`, `import`: the first use of a store makes it.
    Create,
    /// The other commands that write (`complete`, `sweep`, `check`, `compact`, ...): a
    /// missing file is reported, not made.
    Write,
    /// `get`, `list`, `stats`, `export`, `sweep --dry-run`: a read-only open, which
    /// changes no byte of the file, works on a read-only file or mount, and does not wait
    /// for the processes writing it. A missing file is reported.
    Read,
}

/// The settings every command shares.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The store file.
    pub(crate) db: PathBuf,
    /// The file that holds the database's password (`--db-password-file`).
    pub(crate) password_file: Option<PathBuf>,
    /// The clock, or `--now`.
    pub(crate) clock: Clock,
    /// `--json`.
    pub(crate) json: bool,
}

impl Session {
    /// The current time.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Refuses a `--now` far ahead of the system clock for a command that writes
    /// (exit 2), before the file is opened.
    fn check_now(&self, access: Access) -> Result<(), Failure> {
        if access == Access::Read {
            return Ok(());
        }
        self.clock
            .check_for_write(idem_store::now())
            .map_err(Failure::usage)
    }

    /// A printer measuring ages from now.
    pub(crate) fn printer(&self) -> Printer {
        Printer {
            json: self.json,
            now: self.now(),
        }
    }

    /// The name of the engine `--db` names: `file`, or a database's (`postgres`).
    pub(crate) fn engine(&self) -> Result<&'static str, Failure> {
        any::engine_of(&self.db).map_err(|e| Failure::usage(format!("--db: {e}")))
    }

    /// Opens the store the receiver commands work on: the file, or the database `--db`
    /// names. Call only after every argument has been checked: opening may create the
    /// file, or the schema in the database.
    pub(crate) fn open_receiver(
        &self,
        config: Config,
        access: Access,
    ) -> Result<BlockingStore, Failure> {
        let builder = self.builder(config, access)?;
        recovering(builder, &self.db).map_err(|e| match e {
                AnyOpenError::Missing { path } => Failure::runtime(format!(
                    "{}: no store file here (begin, exec and import create one; --db or $IDEM_DB choose another)",
                    path.display()
                )),
                other => open_failure(other),
            })
    }

    /// As [`Session::open_receiver`], for a command about one key: a missing file, or
    /// one without a store yet, means the key has no record (exit 7).
    pub(crate) fn open_receiver_for_key(
        &self,
        config: Config,
        id: &RecordId,
        access: Access,
    ) -> Result<BlockingStore, Failure> {
        let builder = self.builder(config, access)?.create(false);
        match recovering(builder, &self.db) {
            Err(AnyOpenError::Missing { path }) => {
                Err(not_found(id).with_note(&format!("no store file at {}", path.display())))
            }
            // An empty file, or one without idem's tables, read without creating them.
            Err(AnyOpenError::File(OpenError::NoStore { .. })) => {
                Err(not_found(id).with_note(&format!("no store in {}", self.db.display())))
            }
            opened => opened.map_err(open_failure),
        }
    }

    /// Opens the store file for a command that only a file offers (the outbox's
    /// intents, check, compact), refusing a database before connecting to it.
    pub(crate) fn open_file(
        &self,
        config: Config,
        access: Access,
    ) -> Result<BlockingStore, Failure> {
        self.engine()?;
        if let Some(database) = any::database_of(&self.db) {
            return Err(Failure::usage(format!(
                "--db: names a {database} database, and this command works on a store file (the outbox's intents, check and compact are a file's)"
            )));
        }
        self.open_receiver(config, access)
    }

    /// How a command opens `--db` ([`store_builder`]), after its `--now` is checked: a
    /// database keeps time on its own clock, so `--now` is refused there; a file refuses
    /// a `--now` far ahead for a command that writes.
    pub(crate) fn builder(
        &self,
        config: Config,
        access: Access,
    ) -> Result<AnyStoreBuilder, Failure> {
        if let Some(database) = any::database_of(&self.db) {
            if self.clock.is_fixed() {
                return Err(Failure::usage(format!(
                    "--now: a {database} database counts time on its own clock, the fleet's; --now applies to a store file"
                )));
            }
        } else {
            self.check_now(access)?;
        }
        let builder = store_builder(config, access)?;
        match &self.password_file {
            Some(path) => Ok(builder.password(read_password(path)?)),
            None => Ok(builder),
        }
    }
}

/// The password in the file at `path`: its content, less one trailing newline.
fn read_password(path: &std::path::Path) -> Result<String, Failure> {
    let flag = "--db-password-file";
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("{flag}: cannot read {}: {e}", path.display())))?;
    let password = text.strip_suffix('\n').map_or(text.as_str(), |line| {
        line.strip_suffix('\r').unwrap_or(line)
    });
    if password.is_empty() {
        return Err(Failure::usage(format!(
            "{flag}: {} is empty; it holds the password alone",
            path.display()
        )));
    }
    if password.contains(['\n', '\r']) {
        return Err(Failure::usage(format!(
            "{flag}: {} has more than one line; it holds the password alone",
            path.display()
        )));
    }
    Ok(password.to_owned())
}

/// Opens `db` with `builder`. A read of a file whose last writer died without closing it
/// (a `kill -9`, a power cut) cannot be done read-only: the file needs the recovery only
/// a writable open does. When nobody holds the file, that open is made here, which
/// recovers it (as `idem check` would), and the read goes on, with a note on stderr; a
/// file another process holds is its writer's to recover, and the error says so.
pub(crate) fn recovering(
    builder: AnyStoreBuilder,
    db: &std::path::Path,
) -> Result<BlockingStore, AnyOpenError> {
    match builder.clone().open_blocking(db) {
        Err(AnyOpenError::File(OpenError::NeedsRecovery { path })) => {
            let recovered = builder.read_only(false).create(false).open_blocking(db);
            if recovered.is_ok() {
                eprintln!(
                    "idem: {}: its last writer did not close it cleanly; recovered it before reading",
                    path.display()
                );
                return recovered;
            }
            Err(AnyOpenError::File(OpenError::NeedsRecovery { path }))
        }
        other => other,
    }
}

/// Settings to open a store with `config`: the CLI's lock timeout for a file, read-only
/// for [`Access::Read`]; two connections for a database, its schema created only for
/// [`Access::Create`], and the certificates of `$PGSSLROOTCERT`.
pub(crate) fn store_builder(config: Config, access: Access) -> Result<AnyStoreBuilder, Failure> {
    let builder = AnyStore::builder()
        .config(config)
        .lock_timeout(if access == Access::Read {
            READ_LOCK_TIMEOUT
        } else {
            LOCK_TIMEOUT
        })
        .read_only(access == Access::Read)
        .create(access == Access::Create)
        .pool_size(2);
    tls_roots(builder)
}

/// `builder` trusting the certificates of the PEM file `$PGSSLROOTCERT` (libpq's name
/// for it) beside the system's roots, for TLS to a database.
pub(crate) fn tls_roots(builder: AnyStoreBuilder) -> Result<AnyStoreBuilder, Failure> {
    match std::env::var_os("PGSSLROOTCERT") {
        Some(path) if !path.is_empty() => {
            let pem = std::fs::read(&path).map_err(|e| {
                Failure::usage(format!(
                    "PGSSLROOTCERT: cannot read {}: {e}",
                    std::path::Path::new(&path).display()
                ))
            })?;
            Ok(builder.tls_root_certificates(&pem))
        }
        _ => Ok(builder),
    }
}

/// An open error as a failure: the caller's input (a bad config, URL or scheme) is 2,
/// everything else is the file, the database, the network or the system (1).
pub(crate) fn open_failure(e: AnyOpenError) -> Failure {
    let message = with_causes(&e);
    match e {
        AnyOpenError::File(OpenError::NeedsRecovery { .. }) => Failure::runtime(format!(
            "{message}: idem check (or any command that writes) recovers and verifies it"
        )),
        AnyOpenError::File(_) => failure_of(&e, message),
        _ => failure_of(&e, format!("--db: {message}")),
    }
}

fn failure_of(e: &AnyOpenError, message: String) -> Failure {
    if e.is_input() {
        Failure::usage(message)
    } else {
        Failure::runtime(message)
    }
}

/// A store error as a failure with the exit status of the contract.
pub(crate) fn store_failure(e: Error) -> Failure {
    let exit = match &e {
        Error::Id(_) | Error::Token(_) => Exit::Usage,
        Error::Refused(Refusal::NotFound) => Exit::NotFound,
        Error::Refused(Refusal::Stale { .. } | Refusal::WrongState { .. }) => Exit::Stale,
        Error::Refused(_) => Exit::Usage,
        _ => Exit::Runtime,
    };
    Failure::new(exit, with_causes(&e))
}

/// A failed stats, export or compact as a failure: exit 1, or the store error's status.
pub(crate) fn maintain_failure(e: MaintainError) -> Failure {
    match e {
        MaintainError::Store(e) => store_failure(e),
        other => Failure::runtime(with_causes(&other)),
    }
}

/// A failed import as a failure: a bad line is input (2), a store error its status.
pub(crate) fn import_failure(e: ImportError) -> Failure {
    match e {
        ImportError::Store(e) => store_failure(e),
        other => Failure::usage(with_causes(&other)),
    }
}

/// A store error about `id`: the refusal's message gets the key in front.
pub(crate) fn key_failure(id: &RecordId, e: Error) -> Failure {
    let failure = store_failure(e);
    match failure.exit {
        Exit::NotFound | Exit::Stale => {
            Failure::new(failure.exit, format!("{id}: {}", failure.message))
        }
        _ => failure,
    }
}

/// No record under `id` (exit 7).
pub(crate) fn not_found(id: &RecordId) -> Failure {
    Failure::new(Exit::NotFound, format!("{id}: no record under this key"))
}

impl Failure {
    /// The failure with `note` appended after a comma.
    pub(crate) fn with_note(self, note: &str) -> Failure {
        Failure::new(self.exit, format!("{}, {note}", self.message))
    }
}
