//! Input from the command line, checked before any store is opened.
//!
//! Record ids, payload and outcome files, fingerprints, the store path. The flags that
//! several commands share, a record's address (`T O K`) and what identifies a request
//! (`--payload`, `--fingerprint`), are declared here beside their checks.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use clap::Args;
use idem_core::{Config, Fingerprint, Outcome, RecordId};

use crate::exit::Failure;

/// `T O K`: the record's address.
#[derive(Debug, Args)]
pub(crate) struct IdArgs {
    /// Tenant: 1-255 bytes of UTF-8, no control characters.
    #[arg(value_name = "TENANT")]
    pub(crate) tenant: String,
    /// Operation: 1-255 bytes of UTF-8, no control characters.
    #[arg(value_name = "OPERATION")]
    pub(crate) operation: String,
    /// Idempotency key: 1-255 bytes of printable ASCII.
    #[arg(value_name = "KEY", allow_hyphen_values = true)]
    pub(crate) key: String,
}

/// What identifies the request: its payload's bytes or a fingerprint given as is.
#[derive(Debug, Args)]
pub(crate) struct RequestArgs {
    /// The request payload, from a file or - for stdin; its raw bytes are fingerprinted
    /// as given, never parsed, so no JSON limit applies [default: empty].
    #[arg(long, value_name = "FILE|-")]
    pub(crate) payload: Option<PathBuf>,
    /// A SHA-256 fingerprint in 64 hex digits, for callers that hash their own
    /// canonical form. idem's canonical JSON (RFC 8785, in idem-core and the npm
    /// package) accepts at most 16 MiB of UTF-8 and 10,000 levels of nesting, refuses
    /// duplicate member names, numbers beyond a double's range and lone surrogates,
    /// and accepts noncharacters.
    #[arg(long, value_name = "HEX", conflicts_with = "payload")]
    pub(crate) fingerprint: Option<String>,
}

/// The store file: `--db`, else `$IDEM_DB`, else `./idem.redb`.
pub(crate) fn db_path(flag: Option<&Path>) -> PathBuf {
    if let Some(path) = flag {
        return path.to_path_buf();
    }
    match std::env::var_os("IDEM_DB") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from("./idem.redb"),
    }
}

/// The database's password file: `--db-password-file`, else `$IDEM_DB_PASSWORD_FILE`
/// when `db` names a database (a store file has no password, and the variable set for
/// the databases of a machine does not stop its commands on files).
pub(crate) fn password_file(flag: Option<&Path>, db: &Path) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_path_buf());
    }
    idem_store::any::database_of(db)?;
    std::env::var_os("IDEM_DB_PASSWORD_FILE")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// The validated `(tenant, operation, key)`.
pub(crate) fn record_id(args: &IdArgs) -> Result<RecordId, Failure> {
    RecordId::new(&args.tenant, &args.operation, &args.key)
        .map_err(|e| Failure::usage(e.to_string()))
}

/// The bytes of `FILE`, or of stdin for `-`; `flag` names the flag in errors.
pub(crate) fn read_source(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| Failure::usage(format!("{flag}: cannot read {}: {e}", path.display())))?;
    Ok(bytes)
}

/// The request's fingerprint: SHA-256 of the payload's raw bytes (none means empty), or
/// `--fingerprint` as given.
pub(crate) fn fingerprint(args: &RequestArgs) -> Result<Fingerprint, Failure> {
    match (&args.fingerprint, &args.payload) {
        (Some(_), Some(_)) => Err(Failure::usage(
            "--payload and --fingerprint: give one; the fingerprint is made from the payload",
        )),
        (Some(hex), None) => {
            Fingerprint::from_hex(hex).map_err(|e| Failure::usage(format!("--{e}")))
        }
        (None, Some(path)) => Ok(Fingerprint::of_bytes(&read_source("--payload", path)?)),
        (None, None) => Ok(Fingerprint::of_bytes(b"")),
    }
}

/// An outcome from `--code` and `--outcome`, checked against the size limit now, so an
/// oversize body is refused before the store is opened. `failed` picks the default code.
pub(crate) fn outcome(
    code: Option<i32>,
    body: Option<&Path>,
    failed: bool,
) -> Result<Outcome, Failure> {
    let body = match body {
        Some(path) => read_source("--outcome", path)?,
        None => Vec::new(),
    };
    let outcome = Outcome::new(code.unwrap_or(i32::from(failed)), body);
    let max = Config::default().max_outcome_bytes;
    outcome
        .check_size(max)
        .map_err(|e| Failure::usage(format!("--{e}")))?;
    Ok(outcome)
}
