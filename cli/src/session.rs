//! One run of `idem`: where the store is, what time it is, how to print, and how store
//! errors become exit statuses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_core::{Config, RecordId, Refusal, Timestamp};
use idem_store::postgres::{ConnectError, PgStore};
use idem_store::{Error, ImportError, MaintainError, OpenError, Store, StoreBuilder};

use crate::engine::Engine;

use crate::exit::{Exit, Failure, with_causes};
use crate::output::Printer;
use crate::time::Clock;

/// How long the CLI waits for another process that holds the store's lock. Generous:
/// the CLI runs next to a live application and a few dozen scripts may start at once.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

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

    /// `--db` as a PostgreSQL URL (`postgres://…` or `postgresql://…`), when it is one.
    pub(crate) fn postgres_url(&self) -> Option<&str> {
        let db = self.db.to_str()?;
        (db.starts_with("postgres://") || db.starts_with("postgresql://")).then_some(db)
    }

    /// Opens the store the receiver commands work on: the file, or the PostgreSQL
    /// database `--db` names. Call only after every argument has been checked: opening
    /// may create the file, or the schema in the database.
    pub(crate) fn open_receiver(&self, config: Config, access: Access) -> Result<Engine, Failure> {
        match self.postgres_url() {
            Some(url) => self.connect(url, config, access),
            None => self.open(config, access).map(Engine::File),
        }
    }

    /// As [`Session::open_receiver`], for a command about one key: a missing file means
    /// the key has no record (exit 7).
    pub(crate) fn open_receiver_for_key(
        &self,
        config: Config,
        id: &RecordId,
        access: Access,
    ) -> Result<Engine, Failure> {
        match self.postgres_url() {
            Some(url) => self.connect(url, config, access),
            None => self.open_for_key(config, id, access).map(Engine::File),
        }
    }

    /// Connects to the database at `url`; only [`Access::Create`] creates idem's schema
    /// in a database without it.
    fn connect(&self, url: &str, config: Config, access: Access) -> Result<Engine, Failure> {
        if self.clock.is_fixed() {
            return Err(Failure::usage(
                "--now: a PostgreSQL database counts time on its own clock, the fleet's; --now applies to a store file",
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::runtime(format!("starting the database client: {e}")))?;
        let store = runtime
            .block_on(
                postgres_builder()?
                    .config(config)
                    .pool_size(2)
                    .create_schema(access == Access::Create)
                    .connect(url),
            )
            .map_err(|e| connect_failure(&e))?;
        Ok(Engine::Postgres { store, runtime })
    }

    /// Opens the store file with `config`. Call only after every argument has been
    /// checked: opening may create the file.
    pub(crate) fn open(&self, config: Config, access: Access) -> Result<Store, Failure> {
        if self.postgres_url().is_some() {
            return Err(Failure::usage(
                "--db: names a PostgreSQL database, and this command works on a store file (the outbox's intents, check and compact are a file's)",
            ));
        }
        self.check_now(access)?;
        if access != Access::Create && !self.db.exists() {
            return Err(Failure::runtime(format!(
                "{}: no store file here (begin, exec and import create one; --db or $IDEM_DB choose another)",
                self.db.display()
            )));
        }
        open_store(&self.db, config, access)
    }

    /// Opens the store for a command about one key. A missing file, or one without a
    /// store yet, means the key has no record: exit 7.
    pub(crate) fn open_for_key(
        &self,
        config: Config,
        id: &RecordId,
        access: Access,
    ) -> Result<Store, Failure> {
        self.check_now(access)?;
        if !self.db.exists() {
            return Err(not_found(id).with_note(&format!("no store file at {}", self.db.display())));
        }
        match builder(config, access).open(&self.db) {
            // An empty file, or one without idem's tables, read without creating them.
            Err(OpenError::NoStore { .. }) => {
                Err(not_found(id).with_note(&format!("no store in {}", self.db.display())))
            }
            opened => opened.map_err(open_failure),
        }
    }
}

/// Opens `path` with `config` and the CLI's lock timeout, read-only for [`Access::Read`].
pub(crate) fn open_store(path: &Path, config: Config, access: Access) -> Result<Store, Failure> {
    builder(config, access).open(path).map_err(open_failure)
}

fn builder(config: Config, access: Access) -> StoreBuilder {
    Store::builder()
        .config(config)
        .lock_timeout(LOCK_TIMEOUT)
        .read_only(access == Access::Read)
}

/// A builder for the database `--db` names: it trusts the certificates of the PEM file
/// `$PGSSLROOTCERT` (libpq's name for it) beside the system's roots, for TLS.
pub(crate) fn postgres_builder() -> Result<idem_store::postgres::PgStoreBuilder, Failure> {
    let builder = PgStore::builder();
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

/// A failed connection as a failure: a bad URL or config is input (2), everything else
/// is the database or the network (1).
pub(crate) fn connect_failure(e: &ConnectError) -> Failure {
    let message = format!("--db: {}", with_causes(e));
    match e {
        ConnectError::Url(_)
        | ConnectError::Config(_)
        | ConnectError::PoolSize
        | ConnectError::TlsRoots(_) => Failure::usage(message),
        _ => Failure::runtime(message),
    }
}

/// An open error as a failure: a bad config is input (2), everything else is the file
/// or the system (1).
pub(crate) fn open_failure(e: OpenError) -> Failure {
    let message = with_causes(&e);
    match e {
        OpenError::Config(_) | OpenError::Options(_) => Failure::usage(message),
        OpenError::NeedsRecovery { .. } => Failure::runtime(format!(
            "{message}: idem check (or any command that writes) recovers and verifies it"
        )),
        _ => Failure::runtime(message),
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
