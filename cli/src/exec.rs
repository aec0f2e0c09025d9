//! `idem exec`: a program run at most once per key, its stdout and status replayed.
//!
//! The program's stdout and exit status are stored and replayed to every retry.
//!
//! The two-phase path of the store, driven for a child process: begin (commits Pending)
//! → run the program while a heartbeat thread renews the lease → complete with the
//! program's status, or mark the record unknown when nobody can tell what the program
//! did (killed by a signal, output too large to keep).

use idem_store::Receiver;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use idem_core::protocol::Decision;
use idem_core::{Config, Fingerprint, Generation, Outcome, RecordId, Verdict};
use idem_store::any::BlockingStore;

use crate::exit::{Ending, Exit, Failure, with_causes};
use crate::input::{self, IdArgs, RequestArgs};
use crate::keyed::config;
use crate::session::{Access, Session, key_failure};
use crate::time::{Clock, format_instant};

/// Longest pause between two polls of `--wait`.
const MAX_POLL: Duration = Duration::from_millis(500);

/// EX_TEMPFAIL (sysexits.h): the program failed for now and may succeed if run again.
pub(crate) const TEMPFAIL: i32 = 75;

/// Which of PROGRAM's arguments `idem exec` fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FingerprintArgs {
    /// Every argument, in order.
    All,
    /// None: PROGRAM and the payload only.
    None,
}

/// What `exec` was asked to do.
#[derive(Debug)]
pub(crate) struct ExecRequest<'a> {
    /// `T O K`.
    pub(crate) id: &'a IdArgs,
    /// `--payload` or `--fingerprint`.
    pub(crate) request: &'a RequestArgs,
    /// `--lease`, in ms.
    pub(crate) lease: Option<u64>,
    /// `--wait`, in ms.
    pub(crate) wait: Option<u64>,
    /// `--retry-on`: exit statuses that release the key, besides [`TEMPFAIL`].
    pub(crate) retry_on: &'a [i32],
    /// `--fingerprint-args`.
    pub(crate) fingerprint_args: FingerprintArgs,
    /// `PROGRAM ARGS...`.
    pub(crate) program: &'a [OsString],
}

/// `idem exec T O K [--payload FILE|-] [--lease DUR] [--wait DUR] -- PROGRAM ARGS...`
pub(crate) fn exec(session: &Session, request: &ExecRequest<'_>) -> Ending {
    let id = input::record_id(request.id)?;
    let Some((program, args)) = request.program.split_first() else {
        return Err(Failure::usage("PROGRAM: missing; give it after --"));
    };
    let input = input::fingerprint(request.request)?;
    let fingerprint = command_fingerprint(program, args, request.fingerprint_args, input);
    let config = config(request.lease, None);
    let store = session.open_receiver(config.clone(), Access::Create)?;
    let begin = || {
        store
            .call(|s| s.begin(&id, fingerprint, session.now()))
            .map_err(|e| key_failure(&id, e))
    };
    match claim(&id, begin, request.wait)? {
        Claim::Held(generation) => run_claimed(
            session,
            &store,
            &id,
            generation,
            &config,
            request.retry_on,
            request.program,
        ),
        Claim::Settled(verdict, outcome) => {
            write_stdout(&outcome.body)?;
            Ok(exit_status(verdict, outcome.code))
        }
    }
}

/// Runs `PROGRAM ARGS...` for the claim `generation` holds on `id`, then settles the
/// key with its status and stdout (or releases it on a temporary failure), and answers
/// like the program.
pub(crate) fn run_claimed(
    session: &Session,
    store: &BlockingStore,
    id: &RecordId,
    generation: Generation,
    config: &Config,
    retry_on: &[i32],
    program: &[OsString],
) -> Ending {
    let Some((program, args)) = program.split_first() else {
        return Err(Failure::usage("PROGRAM: missing; give it after --"));
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::inherit());
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            // Nothing ran: give the key back so a corrected retry can claim it.
            store
                .call(|s| s.release(id, generation, session.now()))
                .map_err(|e| key_failure(id, e))?;
            return Err(Failure::usage(format!(
                "PROGRAM: cannot run {}: {e}; the claim was released",
                program.to_string_lossy()
            )));
        }
    };
    let (status, stdout) = run_with_heartbeat(store, id, generation, config, session.clock, child)?;
    if let Some(code) = status
        .code()
        .filter(|code| *code == TEMPFAIL || retry_on.contains(code))
    {
        // A failure for now: nothing is settled, a retry runs PROGRAM again.
        let released = store.call(|s| s.release(id, generation, session.now()));
        write_stdout(&stdout)?;
        released.map_err(|e| key_failure(id, e))?;
        eprintln!(
            "idem: {id}: PROGRAM exited {code}, a temporary failure (75 or --retry-on): the key was released, a retry runs PROGRAM again"
        );
        return Ok(code);
    }
    settle(session, store, id, generation, config, status, &stdout)
}

/// The fingerprint of one exec: PROGRAM as written, its arguments (unless `which` is
/// `none`) and the fingerprint of the input (the payload, or `--fingerprint`), as named
/// fields, so that no two command lines share one.
pub(crate) fn command_fingerprint(
    program: &OsStr,
    args: &[OsString],
    which: FingerprintArgs,
    input: Fingerprint,
) -> Fingerprint {
    // Each argument length-prefixed: ["a b"] and ["a", "b"] differ.
    let mut argv = Vec::new();
    for arg in args {
        let bytes = arg.as_bytes();
        argv.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        argv.extend_from_slice(bytes);
    }
    let mut fields: Vec<(&str, &[u8])> = vec![
        ("exec.program", program.as_bytes()),
        ("exec.input", &input.0),
    ];
    if which == FingerprintArgs::All {
        fields.push(("exec.args", &argv));
    }
    // Three distinct names: of_fields refuses only repeated names.
    Fingerprint::of_fields(&fields).unwrap_or_else(|e| unreachable!("exec fields: {e}"))
}

/// How `begin` ended for exec: this process holds the key, or the outcome is known.
pub(crate) enum Claim {
    Held(Generation),
    Settled(Verdict, Outcome),
}

/// Begins with `begin`, and with `--wait` polls while another executor holds the key.
pub(crate) fn claim(
    id: &RecordId,
    mut begin: impl FnMut() -> Result<Decision, Failure>,
    wait_ms: Option<u64>,
) -> Result<Claim, Failure> {
    let started = Instant::now();
    let wait = Duration::from_millis(wait_ms.unwrap_or(0));
    let mut pause = Duration::from_millis(20);
    loop {
        match begin()? {
            Decision::Claimed { generation, .. } => return Ok(Claim::Held(generation)),
            Decision::Replay {
                verdict, outcome, ..
            } => return Ok(Claim::Settled(verdict, outcome)),
            Decision::InProgress {
                generation,
                lease_until,
            } => {
                let remaining = wait.saturating_sub(started.elapsed());
                if remaining.is_zero() {
                    let waited = if wait_ms.is_some() {
                        " after waiting"
                    } else {
                        ""
                    };
                    return Err(Failure::new(
                        Exit::InProgress,
                        format!(
                            "{id}: in progress{waited}: generation {generation} holds the key, lease until {}; retry later or pass --wait",
                            format_instant(lease_until)
                        ),
                    ));
                }
                thread::sleep(pause.min(remaining));
                pause = (pause * 2).min(MAX_POLL);
            }
            Decision::Conflict {
                state,
                stored_fingerprint,
            } => {
                return Err(Failure::new(
                    Exit::Conflict,
                    format!(
                        "{id}: conflict: the key is live ({state}) with another payload (fingerprint {stored_fingerprint}); a new request needs a new key"
                    ),
                ));
            }
            Decision::NeedsReconciliation { generation } => {
                return Err(Failure::new(
                    Exit::Unknown,
                    format!(
                        "{id}: unknown: nobody knows whether generation {generation} ran to the end; check, then `idem resolve`"
                    ),
                ));
            }
            Decision::Forgotten {
                generation,
                verdict,
                completed_at,
            } => {
                return Err(Failure::new(
                    Exit::Forgotten,
                    format!(
                        "{id}: forgotten: generation {generation} ran and {verdict} at {}; its output is past retention and no longer kept, and it does not run again",
                        format_instant(completed_at)
                    ),
                ));
            }
        }
    }
}

/// Waits for the child, reading its stdout, while a thread renews the lease every third
/// of it. A refused heartbeat (someone resolved or took the key) is reported and the
/// heartbeats stop; the completion will then be refused too. Any other failure (the
/// write lock held long by another process) is reported and the renewals go on.
fn run_with_heartbeat(
    store: &BlockingStore,
    id: &RecordId,
    generation: Generation,
    config: &Config,
    clock: Clock,
    mut child: std::process::Child,
) -> Result<(ExitStatus, Vec<u8>), Failure> {
    let every = Duration::from_millis((config.lease_ms / 3).max(1));
    let (stop, stopped) = mpsc::channel::<()>();
    thread::scope(|scope| {
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                match store.call(|s| s.heartbeat(id, generation, clock.now())) {
                    Ok(_) => {}
                    Err(e @ idem_store::Error::Refused(_)) => {
                        eprintln!(
                            "idem: warning: {id}: lease renewal refused, the outcome may not be stored: {}",
                            with_causes(&e)
                        );
                        return;
                    }
                    Err(e) => eprintln!(
                        "idem: warning: {id}: lease renewal failed, trying again: {}",
                        with_causes(&e)
                    ),
                }
            }
        });
        let mut stdout = Vec::new();
        let read = child
            .stdout
            .take()
            .map_or(Ok(0), |mut pipe| pipe.read_to_end(&mut stdout));
        let status = child.wait();
        drop(stop);
        let status =
            status.map_err(|e| Failure::runtime(format!("PROGRAM: waiting for it failed: {e}")))?;
        read.map_err(|e| Failure::runtime(format!("PROGRAM: reading its stdout failed: {e}")))?;
        Ok((status, stdout))
    })
}

/// Stores what the program did and answers like the program.
fn settle(
    session: &Session,
    store: &BlockingStore,
    id: &RecordId,
    generation: Generation,
    config: &Config,
    status: ExitStatus,
    stdout: &[u8],
) -> Ending {
    let now = session.now();
    let Some(code) = status.code() else {
        let signal = status
            .signal()
            .map_or_else(|| "a signal".into(), |s| format!("signal {s}"));
        store
            .call(|s| s.mark_unknown(id, generation, now))
            .map_err(|e| key_failure(id, e))?;
        write_stdout(stdout)?;
        return Err(Failure::new(
            Exit::Unknown,
            format!(
                "{id}: PROGRAM was killed by {signal}; whether it took effect is unknown, generation {generation} is marked unknown (idem resolve)"
            ),
        ));
    };
    if stdout.len() > config.max_outcome_bytes {
        store
            .call(|s| s.mark_unknown(id, generation, now))
            .map_err(|e| key_failure(id, e))?;
        write_stdout(stdout)?;
        return Err(Failure::new(
            Exit::Unknown,
            format!(
                "{id}: PROGRAM exited {code} but its stdout is {} bytes, more than the {} a record keeps; generation {generation} is marked unknown (idem resolve)",
                stdout.len(),
                config.max_outcome_bytes
            ),
        ));
    }
    let verdict = if code == 0 {
        Verdict::Succeeded
    } else {
        Verdict::Failed
    };
    let completed =
        store.call(|s| s.complete(id, generation, verdict, Outcome::new(code, stdout), now));
    // Persist first, answer after: the program's output is released only once its
    // outcome is durable, or together with the reason it is not.
    write_stdout(stdout)?;
    completed.map_err(|e| {
        let failure = key_failure(id, e);
        Failure::new(
            failure.exit,
            format!(
                "PROGRAM exited {code} but its outcome was not stored: {}",
                failure.message
            ),
        )
    })?;
    Ok(code)
}

/// The exit status that replays a stored outcome: the code itself when it is a valid
/// exit status that agrees with the verdict, else 0 for succeeded and 1 for failed, so
/// a failed outcome never exits 0 (an exit status keeps only the low 8 bits).
pub(crate) fn exit_status(verdict: Verdict, code: i32) -> i32 {
    match (verdict, code) {
        (Verdict::Failed, 0) => 1,
        (_, 0..=255) => code,
        (Verdict::Succeeded, _) => 0,
        (Verdict::Failed, _) => 1,
    }
}

pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::stdout(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_covers_program_arguments_and_input() {
        let fp = |program: &str, args: &[&str], which, input: &[u8]| {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            command_fingerprint(
                OsStr::new(program),
                &args,
                which,
                Fingerprint::of_bytes(input),
            )
        };
        let all = FingerprintArgs::All;
        let base = fp("./charge.sh", &["10"], all, b"");
        assert_eq!(base, fp("./charge.sh", &["10"], all, b""));
        assert_ne!(base, fp("./charge.sh", &["9999"], all, b""));
        assert_ne!(base, fp("./refund.sh", &["10"], all, b""));
        assert_ne!(base, fp("./charge.sh", &["10"], all, b"x"));
        assert_ne!(fp("p", &["a b"], all, b""), fp("p", &["a", "b"], all, b""));
        assert_ne!(fp("p", &["ab"], all, b""), fp("p", &["a", "b"], all, b""));
        let none = FingerprintArgs::None;
        assert_eq!(
            fp("./charge.sh", &["10"], none, b""),
            fp("./charge.sh", &["9999"], none, b"")
        );
        assert_ne!(
            fp("./charge.sh", &["10"], none, b""),
            fp("./refund.sh", &["10"], none, b"")
        );
        // Not the payload's own fingerprint: a key used by begin with the same payload
        // is a conflict for exec.
        assert_ne!(base, Fingerprint::of_bytes(b""));
    }

    #[test]
    fn replayed_statuses_never_turn_a_failure_into_success() {
        assert_eq!(exit_status(Verdict::Succeeded, 0), 0);
        assert_eq!(exit_status(Verdict::Failed, 3), 3);
        assert_eq!(exit_status(Verdict::Failed, 0), 1);
        assert_eq!(exit_status(Verdict::Failed, 256), 1);
        assert_eq!(exit_status(Verdict::Failed, -1), 1);
        assert_eq!(exit_status(Verdict::Succeeded, 201), 201);
        assert_eq!(exit_status(Verdict::Succeeded, 1000), 0);
    }
}
