//! Input from the command line, checked before any store is opened: record ids, payload
//! and outcome files, fingerprints, the store path.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use idem_core::{Config, Fingerprint, Outcome, RecordId};

use crate::args::{IdArgs, RequestArgs};
use crate::exit::Failure;

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
