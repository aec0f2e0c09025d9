//! `idem intents list|get|resolve`: the outbox's intents, read, and the resolution of an
//! expired one.

use idem_core::{Intent, IntentState, LedgerConfig, LedgerError, ResolvedAs};
use idem_store::any::BlockingStore;
use idem_store::outbox::IntentFilter;
use idem_store::outbox::IntentView;
use idem_store::outbox::OutboxError;

use crate::exit::{Ending, Exit, Failure};
use crate::output::{Printer, table};
use crate::session::{Access, Session, store_failure};
use crate::time::{format_instant, format_span};

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
fn outbox_of(store: &BlockingStore) -> Result<idem_store::outbox::Outbox<'_>, Failure> {
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
        state => match &intent.outcome {
            Some(outcome) => format!("{state}, code {}", outcome.code),
            None => state.name().to_string(),
        },
    }
}
