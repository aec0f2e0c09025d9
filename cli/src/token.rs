//! `idem token`: one-time tokens issued, consumed (a program run at most once), shown.
//!
//! Every argument is checked before the store is opened.

use idem_store::Receiver;
use idem_store::token::Tokens;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;

use clap::{Args, Subcommand};
use idem_core::token::{self, Issue};
use idem_core::{Config, RecordId, Token, TokenRefusal};
use idem_store::token::Consumed;
use serde::Serialize;

use crate::exec::{
    Claim, FingerprintArgs, claim, command_fingerprint, exit_status, run_claimed, write_stdout,
};
use crate::exit::{Ending, Exit, Failure};
use crate::input::{self, RequestArgs};
use crate::keyed::config;
use crate::session::{Access, Session, key_failure, store_failure};
use crate::time::{format_instant, parse_duration};

/// `idem token ...`: tokens the server hands out for one use.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Issue a one-time token for TENANT and OPERATION, valid for --ttl.
    #[command(after_help = "\
Prints the token: 22 characters of URL-safe base64 (128 random bits from the system).
--json prints {\"token\",\"issued_at\",\"expires_at\",\"intent_id\",\"new\"}.
With --intent, issuing again returns the same token while it is unused and unexpired
(\"new\": false), so a lost reply can be asked for again. The ttl is at most the retention
(24h): the record of a token's use must outlive the token.

Example:
  TOKEN=$(idem token issue shop-7 redeem --ttl 15m --intent order-991)")]
    Issue {
        /// Tenant: 1-255 bytes of UTF-8, no control characters.
        #[arg(value_name = "TENANT")]
        tenant: String,
        /// Operation: 1-255 bytes of UTF-8, no control characters.
        #[arg(value_name = "OPERATION")]
        operation: String,
        /// How long the token may be used for the first time (at most 24h).
        #[arg(long, value_name = "DUR", required = true, value_parser = parse_duration)]
        ttl: u64,
        /// The intent the token is for: 1-255 bytes of printable ASCII.
        #[arg(long, value_name = "ID", allow_hyphen_values = true)]
        intent: Option<String>,
    },
    /// Consume a token: run PROGRAM at most once with it, as exec does for a key.
    #[command(after_help = "\
A token never issued for TENANT and OPERATION exits 8, one whose ttl passed before its
first use exits 9; neither runs PROGRAM nor changes the file. Otherwise as exec: the first
consume runs PROGRAM and stores its stdout and exit status; a retry with the same command
and payload prints the stored stdout and exits with the stored status, without running
PROGRAM (not \"token already used\"); another command or payload is a conflict (exit 3);
another consume running it exits 4. A program's exit 75 releases the token: it can be
consumed again.

Example:
  idem token consume shop-7 redeem \"$TOKEN\" --payload voucher.json -- ./redeem.sh")]
    Consume {
        #[command(flatten)]
        id: TokenIdArgs,
        #[command(flatten)]
        request: RequestArgs,
        /// How long a claim holds without renewal; renewed while PROGRAM runs [default: 30s].
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        lease: Option<u64>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
        program: Vec<OsString>,
    },
    /// Show a token: when it was issued, when it expires, whether it was used.
    #[command(after_help = "\
Exit status 8 when no such token is stored (never issued here, or swept), 2 for a
malformed token.

Example:
  idem token get shop-7 redeem \"$TOKEN\" --json")]
    Get {
        #[command(flatten)]
        id: TokenIdArgs,
    },
    /// Delete tokens whose ttl has passed, oldest first.
    #[command(after_help = "\
The record of a used token stays until `idem sweep` deletes it after its retention; a
retry of its consume is replayed until then. An expired token that was never used is
gone: consuming it exits 8.

Example:
  idem token sweep --limit 10000")]
    Sweep {
        /// At most this many tokens [default: all that expired].
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
}

/// `T O TOKEN`: where a token lives.
#[derive(Debug, Args)]
pub(crate) struct TokenIdArgs {
    /// Tenant: 1-255 bytes of UTF-8, no control characters.
    #[arg(value_name = "TENANT")]
    pub(crate) tenant: String,
    /// Operation: 1-255 bytes of UTF-8, no control characters.
    #[arg(value_name = "OPERATION")]
    pub(crate) operation: String,
    /// The token: 22 characters of URL-safe base64, as `token issue` printed it.
    #[arg(value_name = "TOKEN", allow_hyphen_values = true)]
    pub(crate) token: String,
}

/// `idem token issue T O --ttl DUR [--intent ID]`
pub(crate) fn issue(
    session: &Session,
    tenant: &str,
    operation: &str,
    ttl_ms: u64,
    intent: Option<&str>,
) -> Ending {
    let config = Config::default();
    // The rules of the store, checked before the file is opened.
    RecordId::new(tenant, operation, "-").map_err(|e| Failure::usage(e.to_string()))?;
    token::check_ttl(ttl_ms, &config).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(intent) = intent {
        token::check_intent_id(intent).map_err(|e| Failure::usage(e.to_string()))?;
    }
    let random = random_bits()?;
    let store = session.open_receiver(config, Access::Create)?;
    let issued = store
        .call(|s| s.issue_token(tenant, operation, ttl_ms, intent, random, session.now()))
        .map_err(store_failure)?;
    let entry = issued.entry();
    let view = IssuedView {
        token: issued.token().as_str(),
        issued_at: entry.issued_at.as_millis(),
        expires_at: entry.expires_at.as_millis(),
        intent_id: entry.intent_id.as_deref(),
        new: matches!(issued, Issue::New { .. }),
    };
    session
        .printer()
        .either(&view, || issued.token().as_str().to_string())?;
    Ok(Exit::Done.code())
}

#[derive(Serialize)]
struct IssuedView<'a> {
    token: &'a str,
    issued_at: u64,
    expires_at: u64,
    intent_id: Option<&'a str>,
    new: bool,
}

/// `idem token consume T O TOKEN [--payload FILE|-] [--lease DUR] -- PROGRAM ARGS...`
pub(crate) fn consume(
    session: &Session,
    id: &TokenIdArgs,
    request: &RequestArgs,
    lease: Option<u64>,
    program: &[std::ffi::OsString],
) -> Ending {
    let id = token_id(id)?;
    let Some((name, args)) = program.split_first() else {
        return Err(Failure::usage("PROGRAM: missing; give it after --"));
    };
    let input = input::fingerprint(request)?;
    let fingerprint = command_fingerprint(name, args, FingerprintArgs::All, input);
    let config = config(lease, None);
    let store = session.open_receiver(config.clone(), Access::Create)?;
    let begin = || match store.call(|s| s.consume(&id, fingerprint, session.now())) {
        Ok(Consumed::Admitted(decision)) => Ok(decision),
        Ok(Consumed::Refused(refusal)) => Err(refused(&id, refusal)),
        Err(e) => Err(key_failure(&id, e)),
    };
    match claim(&id, begin, None)? {
        Claim::Held(generation) => {
            run_claimed(session, &store, &id, generation, &config, &[], program)
        }
        Claim::Settled(verdict, outcome) => {
            write_stdout(&outcome.body)?;
            Ok(exit_status(verdict, outcome.code))
        }
    }
}

/// `idem token get T O TOKEN`
pub(crate) fn get(session: &Session, id: &TokenIdArgs) -> Ending {
    let id = token_id(id)?;
    let not_issued = || {
        Failure::new(
            Exit::NotIssued,
            format!(
                "{id}: no such token (never issued for this tenant and operation, or swept after its ttl)"
            ),
        )
    };
    if session.engine()? == "file" && !session.db.exists() {
        return Err(not_issued());
    }
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let entry = store
        .call(|s| s.get_token(&id))
        .map_err(|e| key_failure(&id, e))?;
    let record = store
        .call(|s| s.get(&id))
        .map_err(|e| key_failure(&id, e))?;
    let Some(entry) = entry else {
        // Swept after its ttl: its use, if any, is still a record.
        return match record {
            Some(record) => {
                session.printer().record(&id, &record)?;
                Ok(Exit::Done.code())
            }
            None => Err(not_issued()),
        };
    };
    let now = session.now();
    let view = TokenView {
        tenant: id.tenant(),
        operation: id.operation(),
        token: id.key(),
        issued_at: entry.issued_at.as_millis(),
        expires_at: entry.expires_at.as_millis(),
        intent_id: entry.intent_id.as_deref(),
        expired: entry.is_expired(now),
        used: record.as_ref().map(|r| r.state().name()),
    };
    session.printer().either(&view, || {
        let status = match (&view.used, view.expired) {
            (Some(state), _) => format!("used ({state})"),
            (None, true) => "expired, unused".to_string(),
            (None, false) => "unused".to_string(),
        };
        format!(
            "{id}: {status}, issued {}, expires {}{}",
            format_instant(entry.issued_at),
            format_instant(entry.expires_at),
            view.intent_id
                .map(|i| format!(", intent {i}"))
                .unwrap_or_default()
        )
    })?;
    Ok(Exit::Done.code())
}

#[derive(Serialize)]
struct TokenView<'a> {
    tenant: &'a str,
    operation: &'a str,
    token: &'a str,
    issued_at: u64,
    expires_at: u64,
    intent_id: Option<&'a str>,
    expired: bool,
    /// The state of the record of its use, if it was used.
    used: Option<&'static str>,
}

/// `idem token sweep [--limit N]`
pub(crate) fn sweep(session: &Session, limit: Option<usize>) -> Ending {
    let store = session.open_receiver(Config::default(), Access::Write)?;
    let report = store
        .call(|s| s.sweep_tokens(session.now(), limit.unwrap_or(usize::MAX)))
        .map_err(store_failure)?;
    let value = serde_json::json!({
        "removed": report.removed,
        "remaining_expired": report.remaining_expired,
    });
    session.printer().either(&value, || {
        let more = if report.remaining_expired {
            "; more expired tokens remain past --limit"
        } else {
            ""
        };
        format!("swept {} expired tokens{more}", report.removed)
    })?;
    Ok(Exit::Done.code())
}

/// The validated `(tenant, operation, token)`.
fn token_id(args: &TokenIdArgs) -> Result<RecordId, Failure> {
    let id = RecordId::new(&args.tenant, &args.operation, "-")
        .map_err(|e| Failure::usage(e.to_string()))?;
    let token = Token::parse(&args.token).map_err(|e| Failure::usage(e.to_string()))?;
    RecordId::new(id.tenant(), id.operation(), token.as_str())
        .map_err(|e| Failure::usage(e.to_string()))
}

/// A refused token as a failure: exit 8 or 9.
fn refused(id: &RecordId, refusal: TokenRefusal) -> Failure {
    let exit = match refusal {
        TokenRefusal::Expired { .. } => Exit::TokenExpired,
        _ => Exit::NotIssued,
    };
    let detail = match refusal {
        TokenRefusal::Expired { expires_at } => format!(
            "token expired at {} before its first use",
            format_instant(expires_at)
        ),
        _ => "token not issued for this tenant and operation".to_string(),
    };
    Failure::new(exit, format!("{id}: {detail}; nothing was run"))
}

/// 128 bits from the system's random source.
fn random_bits() -> Result<[u8; 16], Failure> {
    let mut random = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut source| source.read_exact(&mut random))
        .map_err(|e| Failure::runtime(format!("/dev/urandom: {e}")))?;
    Ok(random)
}
