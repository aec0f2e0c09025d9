//! `idem intents list|get|resolve`: the outbox's intents, and the resolution of one.
//!
//! The intents are read as they are; only an expired one is resolved.

use clap::Subcommand;
use idem_core::{Intent, IntentState, LedgerConfig, LedgerError, ResolvedAs};
use idem_store::any::BlockingStore;
use idem_store::outbox::IntentFilter;
use idem_store::outbox::IntentView;
use idem_store::outbox::OutboxError;

use crate::exit::{Ending, Exit, Failure};
use crate::output::{Printer, table};
use crate::session::{Access, Session, store_failure};
use crate::time::{format_instant, format_span};

/// `idem intents ...`: the sender's side of the file.
#[derive(Debug, Subcommand)]
pub(crate) enum IntentsCommand {
    /// List intents, oldest first, filtered by state.
    #[command(after_help = "\
States: queued, in_flight, completed, failed, conflict, expired. An expired intent got no
definitive answer before its deadline and is never sent again: check with the receiver
what happened to it, then record it with `idem intents resolve`. Until resolved it is
never forgotten.

Examples:
  idem intents list --state expired
  idem intents list --json --limit 50")]
    List {
        /// Only intents in this state.
        #[arg(long, value_name = "STATE", value_parser = parse_intent_state)]
        state: Option<IntentState>,
        /// At most this many intents.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Show one intent.
    #[command(after_help = "\
Exit status 7 when no intent has the key.

Example:
  idem intents get 0190b7c2-5e1a-7c3e-9a41-8d2f0c6b7e11 --json")]
    Get {
        /// The intent's idempotency key.
        #[arg(value_name = "KEY", allow_hyphen_values = true)]
        key: String,
    },
    /// Record what happened to an expired intent, as the receiver's records show.
    #[command(after_help = "\
An expired intent got no definitive answer before its deadline: the receiver may or may
not have executed it. Ask the receiver (its records, a statement), then record the answer
here, with a reason saying how you know (1-1024 bytes, one line). The intent stays
expired and carries the resolution; only then may the application forget it. After
not-executed, the user may start the action again: a new intent, with a new key.

Exit status: 0 resolved · 2 bad --as or reason · 6 the intent is not expired, or is
resolved already · 7 no intent has the key.

Example:
  idem intents resolve 0190b7c2-5e1a-7c3e-9a41-8d2f0c6b7e11 --as not-executed \\
    --reason \"not on the acquirer's statement of 2025-03-02\"")]
    Resolve {
        /// The intent's idempotency key.
        #[arg(value_name = "KEY", allow_hyphen_values = true)]
        key: String,
        /// What happened: completed, failed or not-executed.
        #[arg(long = "as", value_name = "RESOLUTION", value_parser = parse_resolved_as)]
        resolved_as: ResolvedAs,
        /// How you know (who confirmed it, where): 1-1024 bytes, one line.
        #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
        reason: String,
    },
}

fn parse_resolved_as(text: &str) -> Result<ResolvedAs, String> {
    ResolvedAs::from_name(&text.replace('-', "_"))
        .ok_or_else(|| "expected one of completed, failed, not-executed".to_string())
}

fn parse_intent_state(text: &str) -> Result<IntentState, String> {
    IntentState::from_name(text).ok_or_else(|| {
        "expected one of queued, in_flight, completed, failed, conflict, expired".to_string()
    })
}

/// `idem intents list [--state S] [--limit N]`
pub(crate) fn list(session: &Session, state: Option<IntentState>, limit: Option<usize>) -> Ending {
    let store = session.open_file(idem_core::Config::default(), Access::Read)?;
    let intents = outbox_of(&store)?
        .intents(&IntentFilter { state, limit })
        .map_err(store_failure)?;
    let printer = session.printer();
    if printer.json {
        for intent in &intents {
            printer.json_line(&IntentView::new(intent))?;
        }
        return Ok(Exit::Done.code());
    }
    if intents.is_empty() {
        printer.line("no intents")?;
        return Ok(Exit::Done.code());
    }
    let mut cells = vec![
        ["KEY", "OPERATION", "STATE", "ATTEMPTS", "DETAIL"]
            .map(String::from)
            .to_vec(),
    ];
    cells.extend(intents.iter().map(|intent| {
        vec![
            intent.key.clone(),
            intent.operation.clone(),
            intent.state.name().to_string(),
            intent.attempts.to_string(),
            detail(&printer, intent),
        ]
    }));
    printer.line(&table(&cells))?;
    Ok(Exit::Done.code())
}

/// `idem intents get KEY`
pub(crate) fn get(session: &Session, key: &str) -> Ending {
    let store = session.open_file(idem_core::Config::default(), Access::Read)?;
    let Some(intent) = outbox_of(&store)?.intent(key).map_err(store_failure)? else {
        return Err(Failure::new(
            Exit::NotFound,
            format!("intent {key}: no intent under this key"),
        ));
    };
    print_intent(session, &intent)?;
    Ok(Exit::Done.code())
}

/// `idem intents resolve KEY --as RESOLUTION --reason TEXT`
pub(crate) fn resolve(
    session: &Session,
    key: &str,
    resolved_as: ResolvedAs,
    reason: &str,
) -> Ending {
    let store = session.open_file(idem_core::Config::default(), Access::Write)?;
    let resolved = outbox_of(&store)?
        .resolve(key, resolved_as, reason, session.now())
        .map_err(|e| match e {
            OutboxError::Ledger(e @ LedgerError::UnknownKey { .. }) => Failure::new(
                Exit::NotFound,
                format!("intent {key}: no intent under this key ({e})"),
            ),
            OutboxError::Ledger(e @ LedgerError::NotExpired { .. }) => {
                Failure::new(Exit::Stale, e.to_string())
            }
            OutboxError::Ledger(e @ LedgerError::Reason { .. }) => Failure::usage(format!("--{e}")),
            OutboxError::Ledger(e) => Failure::usage(e.to_string()),
            OutboxError::Store(e) => store_failure(e),
            other => Failure::runtime(other.to_string()),
        })?;
    print_intent(session, &resolved)?;
    Ok(Exit::Done.code())
}

/// One intent: its JSON view, or a table of its fields.
fn print_intent(session: &Session, intent: &Intent) -> Result<(), Failure> {
    let printer = session.printer();
    printer.either(&IntentView::new(intent), || {
        let view = IntentView::new(intent);
        let mut rows = vec![
            ("key", view.key.clone()),
            ("operation", view.operation.clone()),
            ("state", detail(&printer, intent)),
            ("attempts", view.attempts.to_string()),
            ("fingerprint", view.fingerprint.clone()),
            ("created", format_instant(intent.created_at)),
            ("deadline", format_instant(intent.deadline)),
            ("payload", format!("{} bytes", intent.payload.len())),
        ];
        if let Some(status) = intent.last_status {
            rows.push(("last status", status.to_string()));
        }
        if let Some(outcome) = &intent.outcome {
            rows.push(("code", outcome.code.to_string()));
            rows.push(("outcome", format!("{} bytes", outcome.body.len())));
        }
        if let Some(resolution) = &intent.resolution {
            rows.push(("resolved as", resolution.resolved_as.name().to_string()));
            rows.push(("reason", resolution.reason.clone()));
            rows.push(("resolved", format_instant(resolution.resolved_at)));
        }
        rows.iter()
            .map(|(name, value)| format!("{name:<12} {value}"))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    Ok(())
}

/// The outbox, for reading: its retry settings play no part in a read.
fn outbox_of(store: &BlockingStore) -> Result<idem_store::outbox::Outbox, Failure> {
    store
        .file("outbox")
        .map_err(store_failure)?
        .outbox(LedgerConfig::with_seed(0))
        .map_err(|e| Failure::runtime(e.to_string()))
}

/// What an intent waits for, from now.
fn detail(printer: &Printer, intent: &Intent) -> String {
    let now = printer.now;
    match intent.state {
        IntentState::Queued if intent.next_attempt_at > now => format!(
            "queued, next attempt in {}",
            format_span(intent.next_attempt_at.millis_since(now))
        ),
        IntentState::Queued => "queued, due now".into(),
        IntentState::InFlight => "in flight, waiting for a reply".into(),
        IntentState::Expired => match &intent.resolution {
            Some(resolution) => format!(
                "expired, resolved as {}: {}",
                resolution.resolved_as, resolution.reason
            ),
            None => "expired: no definitive answer before the deadline; ask the receiver, then `idem intents resolve`".into(),
        },
        IntentState::Unknown => match &intent.resolution {
            Some(resolution) => format!(
                "unknown at the receiver, resolved as {}: {}",
                resolution.resolved_as, resolution.reason
            ),
            None => "unknown at the receiver (503, outcome unknown): reconcile the key there, then `idem intents resolve`".into(),
        },
        state => match &intent.outcome {
            Some(outcome) => format!("{state}, code {}", outcome.code),
            None => state.name().to_string(),
        },
    }
}
