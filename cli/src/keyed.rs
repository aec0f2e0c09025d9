//! The commands about one key: begin, complete, release, heartbeat, mark-unknown, resolve, get.
//!
//! Each checks all of its input before it opens the store.

use clap::Args;
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, Outcome, Record, RecordId, Verdict};
use idem_store::any::BlockingStore;
use idem_store::{ListFilter, Receiver};

use crate::Failure;
use crate::exit::{Ending, Exit};
use crate::input::{self, IdArgs, RequestArgs};
use crate::session::{Access, Session, key_failure, not_found};
use crate::time::format_instant;

/// `--generation N`, the fencing token a claim returned.
#[derive(Debug, Args)]
pub(crate) struct GenerationArg {
    /// The generation that `begin` returned for this claim.
    #[arg(long, value_name = "N", required = true)]
    pub(crate) generation: u64,
}

/// The protocol settings of one call: `--lease` and `--retention` replace the defaults.
pub(crate) fn config(lease_ms: Option<u64>, retention_ms: Option<u64>) -> Config {
    let defaults = Config::default();
    Config {
        lease_ms: lease_ms.unwrap_or(defaults.lease_ms),
        success_retention_ms: retention_ms.unwrap_or(defaults.success_retention_ms),
        failure_retention_ms: retention_ms.unwrap_or(defaults.failure_retention_ms),
        ..defaults
    }
}

/// The exit status that goes with a `begin` decision.
pub(crate) fn decision_exit(decision: &Decision) -> Exit {
    match decision {
        Decision::Claimed { .. } | Decision::Replay { .. } => Exit::Done,
        Decision::Conflict { .. } => Exit::Conflict,
        Decision::InProgress { .. } => Exit::InProgress,
        Decision::NeedsReconciliation { .. } => Exit::Unknown,
        Decision::Forgotten { .. } => Exit::Forgotten,
    }
}

/// `idem begin T O K [--payload FILE|-] [--fingerprint HEX] [--lease DUR]`
pub(crate) fn begin(
    session: &Session,
    id: &IdArgs,
    request: &RequestArgs,
    lease: Option<u64>,
) -> Ending {
    let id = input::record_id(id)?;
    let fingerprint = input::fingerprint(request)?;
    let store = session.open_receiver(config(lease, None), Access::Create)?;
    let decision = store
        .call(|s| s.begin(&id, fingerprint, session.now()))
        .map_err(|e| key_failure(&id, e))?;
    session.printer().decision(&decision)?;
    Ok(decision_exit(&decision).code())
}

/// `idem complete T O K --generation N [--failed] [--code INT] [--outcome FILE|-] [--retention DUR]`
pub(crate) fn complete(
    session: &Session,
    id: &IdArgs,
    generation: &GenerationArg,
    failed: bool,
    outcome: (Option<i32>, Option<&std::path::Path>),
    retention: Option<u64>,
) -> Ending {
    let id = input::record_id(id)?;
    let outcome = input::outcome(outcome.0, outcome.1, failed)?;
    let verdict = if failed {
        Verdict::Failed
    } else {
        Verdict::Succeeded
    };
    let store = session.open_receiver_for_key(config(None, retention), &id, Access::Write)?;
    let record = store
        .call(|s| {
            s.complete(
                &id,
                Generation(generation.generation),
                verdict,
                outcome,
                session.now(),
            )
        })
        .map_err(|e| key_failure(&id, e))?;
    print_settled(session, &id, &record, "settled")
}

/// `idem release T O K --generation N`
pub(crate) fn release(session: &Session, id: &IdArgs, generation: &GenerationArg) -> Ending {
    let id = input::record_id(id)?;
    let store = session.open_receiver_for_key(Config::default(), &id, Access::Write)?;
    let generation = Generation(generation.generation);
    store
        .call(|s| s.release(&id, generation, session.now()))
        .map_err(|e| key_failure(&id, e))?;
    let printer = session.printer();
    printer.either(
        &serde_json::json!({ "released": true, "generation": generation.0 }),
        || format!("released: generation {generation} deleted, a retry may claim {id}"),
    )?;
    Ok(Exit::Done.code())
}

/// `idem heartbeat T O K --generation N [--lease DUR]`
pub(crate) fn heartbeat(
    session: &Session,
    id: &IdArgs,
    generation: &GenerationArg,
    lease: Option<u64>,
) -> Ending {
    let id = input::record_id(id)?;
    let store = session.open_receiver_for_key(config(lease, None), &id, Access::Write)?;
    let record = store
        .call(|s| s.heartbeat(&id, Generation(generation.generation), session.now()))
        .map_err(|e| key_failure(&id, e))?;
    let printer = session.printer();
    if printer.json {
        printer.record(&id, &record)?;
    } else {
        let until = record
            .lease_until()
            .map_or_else(String::new, |t| printer.instant_from_now(t));
        printer.line(&format!(
            "lease renewed: generation {}, lease until {until}",
            record.generation
        ))?;
    }
    Ok(Exit::Done.code())
}

/// `idem mark-unknown T O K --generation N`
pub(crate) fn mark_unknown(session: &Session, id: &IdArgs, generation: &GenerationArg) -> Ending {
    let id = input::record_id(id)?;
    let store = session.open_receiver_for_key(Config::default(), &id, Access::Write)?;
    let record = store
        .call(|s| s.mark_unknown(&id, Generation(generation.generation), session.now()))
        .map_err(|e| key_failure(&id, e))?;
    let printer = session.printer();
    if printer.json {
        printer.record(&id, &record)?;
    } else {
        printer.line(&format!(
            "unknown: generation {} of {id} needs reconciliation (idem resolve)",
            record.generation
        ))?;
    }
    Ok(Exit::Done.code())
}

/// How `resolve` was asked to settle the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reconciled {
    /// `--succeeded`.
    Succeeded,
    /// `--failed`.
    Failed,
    /// `--not-executed`.
    NotExecuted,
}

/// `idem resolve T O K (--succeeded|--failed|--not-executed) [--code INT] [--outcome FILE|-]
/// [--force --generation N]`: an Unknown key, or a Pending one in one step (its lease
/// ended, or `forced` with its generation), turned Unknown by its generation first.
pub(crate) fn resolve(
    session: &Session,
    id: &IdArgs,
    how: Reconciled,
    outcome: (Option<i32>, Option<&std::path::Path>),
    retention_ms: Option<u64>,
    forced: Option<u64>,
) -> Ending {
    let id = input::record_id(id)?;
    let resolution = match how {
        Reconciled::Succeeded => {
            Resolution::Succeeded(input::outcome(outcome.0, outcome.1, false)?)
        }
        Reconciled::Failed => Resolution::Failed(input::outcome(outcome.0, outcome.1, true)?),
        Reconciled::NotExecuted => Resolution::NotExecuted,
    };
    let store = session.open_receiver_for_key(config(None, retention_ms), &id, Access::Write)?;
    let current = store
        .call(|s| s.get(&id))
        .map_err(|e| key_failure(&id, e))?;
    match current {
        None => return Err(not_found_naming_operations(&store, &id)),
        Some(record) => {
            if let Some(lease_until) = record.lease_until() {
                let now = session.now();
                let ended = lease_until <= now;
                if !ended && forced != Some(record.generation.0) {
                    return Err(Failure::new(
                        Exit::InProgress,
                        format!(
                            "{id}: pending, claimed by generation {}, its lease running until {}: its executor may still be working; resolve it once the lease ends, or now with --force --generation {}",
                            record.generation.0,
                            format_instant(lease_until),
                            record.generation.0
                        ),
                    ));
                }
                // The claim turns Unknown by its generation: a heartbeat or a settle that
                // came meanwhile refuses this, and nothing is resolved.
                store
                    .call(|s| s.mark_unknown(&id, record.generation, now))
                    .map_err(|e| key_failure(&id, e))?;
            }
        }
    }
    let settled = store
        .call(|s| s.resolve(&id, resolution, session.now()))
        .map_err(|e| key_failure(&id, e))?;
    match settled {
        Some(record) => print_settled(session, &id, &record, "resolved"),
        None => {
            session.printer().either(
                &serde_json::json!({ "resolved": "not_executed" }),
                || format!("resolved: not executed; the record is deleted, the next retry of {id} claims it afresh"),
            )?;
            Ok(Exit::Done.code())
        }
    }
}

/// `idem get T O K`
pub(crate) fn get(session: &Session, id: &IdArgs) -> Ending {
    let id = input::record_id(id)?;
    let store = session.open_receiver_for_key(Config::default(), &id, Access::Read)?;
    let record = store
        .call(|s| s.get(&id))
        .map_err(|e| key_failure(&id, e))?
        .ok_or_else(|| not_found(&id))?;
    session.printer().record(&id, &record)?;
    Ok(Exit::Done.code())
}

fn print_settled(session: &Session, id: &RecordId, record: &Record, verb: &str) -> Ending {
    let printer = session.printer();
    if printer.json {
        printer.record(id, record)?;
    } else if let idem_core::Status::Settled {
        verdict,
        outcome,
        expires_at,
        ..
    } = &record.status
    {
        printer.line(&settled_line(
            verb,
            *verdict,
            outcome,
            format_instant(*expires_at),
        ))?;
    } else {
        printer.line(&format!("{verb}: {}", printer.state_detail(record)))?;
    }
    Ok(Exit::Done.code())
}

fn settled_line(verb: &str, verdict: Verdict, outcome: &Outcome, until: String) -> String {
    format!(
        "{verb}: {verdict} with code {}, {} bytes of outcome, replayed until {until}",
        outcome.code,
        outcome.body.len()
    )
}

/// No record under `id` (exit 7), naming the operations of its tenant that have a record
/// under the same key (a request through `idem proxy` is recorded under its method and
/// path, `POST /orders`), from at most 100,000 records of the tenant.
fn not_found_naming_operations(store: &BlockingStore, id: &RecordId) -> Failure {
    let filter = ListFilter {
        tenant: Some(id.tenant().to_owned()),
        limit: Some(100_000),
        ..ListFilter::default()
    };
    let mut operations = Vec::new();
    let _listed = store.list(&filter, |other, _| {
        if other.key() == id.key() && !operations.iter().any(|o| o == other.operation()) {
            operations.push(other.operation().to_owned());
        }
        std::ops::ControlFlow::Continue(())
    });
    if operations.is_empty() {
        return not_found(id);
    }
    let named: Vec<String> = operations.iter().map(|o| format!("{o:?}")).collect();
    not_found(id).with_note(&format!(
        "the key has a record under operation {} of this tenant",
        named.join(", ")
    ))
}
