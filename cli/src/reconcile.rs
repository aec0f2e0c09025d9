//! `idem reconcile --with PROGRAM`: unknown records settled by a checker program.
//!
//! Silent claims are turned unknown first; then every unknown record is shown to the
//! checker, whose exit status says what happened.

use idem_store::Receiver;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use idem_core::{Outcome, Record, RecordId};
use idem_store::maintain::Check;
use idem_store::maintain::ReconcileError;
use idem_store::maintain::ReconcileReport;
use serde::Serialize;

use crate::exit::{Ending, Exit, Failure, with_causes};
use crate::progress::{self, Unit};
use crate::session::{Access, Session, maintain_failure, store_failure};

/// The checker's exit statuses (documented in `idem reconcile --help`).
const SUCCEEDED: i32 = 0;
const FAILED: i32 = 10;
const NOT_EXECUTED: i32 = 11;
const CANNOT_TELL: i32 = 12;

/// Why a checker gave no answer; it stops the run.
#[derive(Debug, thiserror::Error)]
enum CheckerError {
    #[error("PROGRAM: cannot run {program}")]
    Start {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "PROGRAM exited {0}, which is not an answer (0 succeeded, 10 failed, 11 not executed, 12 cannot tell)"
    )]
    Status(i32),
    #[error("PROGRAM was killed by signal {0}")]
    Signal(i32),
    #[error("PROGRAM's stdout is {len} bytes, more than the {max} an outcome keeps")]
    TooLarge { len: usize, max: usize },
    #[error("PROGRAM: reading its stdout failed")]
    Read(#[source] std::io::Error),
    #[error("PROGRAM: waiting for it to end failed")]
    Wait(#[source] std::io::Error),
}

/// What `idem reconcile --json` prints.
#[derive(Serialize)]
struct Summary {
    abandoned_turned_unknown: usize,
    #[serde(flatten)]
    report: ReconcileReport,
}

/// How many abandoned claims one run of `idem reconcile` turns Unknown.
const RECOVER_LIMIT: usize = 100_000;

/// `idem reconcile --with PROGRAM [--limit N] [--retention DUR] [-- ARGS...]`
pub(crate) fn run(
    session: &Session,
    program: &OsString,
    args: &[OsString],
    limit: Option<usize>,
    retention_ms: Option<u64>,
) -> Ending {
    let config = crate::keyed::config(None, retention_ms);
    let store = session.open_receiver(config.clone(), Access::Write)?;
    let now = session.now();
    let abandoned = store
        .call(|s| s.recover_abandoned(now, RECOVER_LIMIT))
        .map_err(store_failure)?;
    let limit = limit.unwrap_or(usize::MAX);
    let unknown = store
        .call(|s| s.stats(now))
        .map_err(maintain_failure)?
        .unknown;
    let bar = progress::bar(
        Some(unknown.min(u64::try_from(limit).unwrap_or(u64::MAX))),
        "reconciling",
        Unit::Items,
    );
    let checked = store.call(|s| {
        s.reconcile(now, limit, |id, record| {
            let answer = check(program, args, id, record, config.max_outcome_bytes);
            bar.inc(1);
            answer
        })
    });
    bar.finish_and_clear();
    let report = match checked {
        Ok(report) => report,
        Err(ReconcileError::Checker { id, report, source }) => {
            let exit = match source {
                CheckerError::Start { .. } => Exit::Usage,
                _ => Exit::Runtime,
            };
            return Err(Failure::new(
                exit,
                format!(
                    "{id}: {}; it and the records after it are unchanged ({})",
                    with_causes(&source),
                    summary_text(abandoned.turned_unknown.len(), &report)
                ),
            ));
        }
        Err(ReconcileError::Store(e)) => return Err(store_failure(e)),
        Err(other) => return Err(Failure::runtime(with_causes(&other))),
    };
    let summary = Summary {
        abandoned_turned_unknown: abandoned.turned_unknown.len(),
        report,
    };
    session.printer().either(&summary, || {
        summary_text(summary.abandoned_turned_unknown, &report)
    })?;
    Ok(Exit::Done.code())
}

fn summary_text(abandoned: usize, report: &ReconcileReport) -> String {
    let mut text = format!(
        "reconciled {} unknown records: {} succeeded, {} failed, {} not executed, {} still unknown (the checker could not tell), {} changed meanwhile",
        report.examined,
        report.succeeded,
        report.failed,
        report.not_executed,
        report.undecided,
        report.changed_meanwhile
    );
    if abandoned > 0 {
        text.push_str(&format!("; {abandoned} silent claims turned unknown first"));
    }
    if report.remaining {
        text.push_str("; more unknown records remain past --limit");
    }
    text
}

/// Runs the checker for one record and reads its answer.
fn check(
    program: &OsString,
    args: &[OsString],
    id: &RecordId,
    record: &Record,
    max_outcome: usize,
) -> Result<Check, CheckerError> {
    let mut child = Command::new(program)
        .args(args)
        .env("IDEM_TENANT", id.tenant())
        .env("IDEM_OPERATION", id.operation())
        .env("IDEM_KEY", id.key())
        .env("IDEM_GENERATION", record.generation.to_string())
        .env("IDEM_FINGERPRINT", record.fingerprint.to_string())
        .env("IDEM_CREATED_AT", record.created_at.as_millis().to_string())
        .env(
            "IDEM_UNKNOWN_SINCE",
            record.updated_at.as_millis().to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| CheckerError::Start {
            program: program.to_string_lossy().into_owned(),
            source,
        })?;
    let mut stdout = Vec::new();
    let read = child
        .stdout
        .take()
        .map_or(Ok(0), |mut out| out.read_to_end(&mut stdout));
    let status = child.wait().map_err(CheckerError::Wait)?;
    read.map_err(CheckerError::Read)?;
    let Some(code) = status.code() else {
        return Err(CheckerError::Signal(status.signal().unwrap_or(0)));
    };
    let outcome = |code| {
        if stdout.len() > max_outcome {
            return Err(CheckerError::TooLarge {
                len: stdout.len(),
                max: max_outcome,
            });
        }
        Ok(Outcome::new(code, stdout.clone()))
    };
    match code {
        SUCCEEDED => Ok(Check::Succeeded(outcome(0)?)),
        FAILED => Ok(Check::Failed(outcome(1)?)),
        NOT_EXECUTED => Ok(Check::NotExecuted),
        CANNOT_TELL => Ok(Check::CannotTell),
        other => Err(CheckerError::Status(other)),
    }
}
