//! `idem transition` and `idem entity get|list`: business entities and their moves.
//!
//! An entity moves by a state machine with a version check (docs/design.md §8).

use idem_store::entity::Entities;
use std::path::Path;

use clap::Subcommand;
use idem_core::Config;
use idem_core::machine::{Entity, EntityDecision, Machine, MachineSpec};
use idem_store::entity::EntityId;
use serde::Serialize;

use crate::exit::{Ending, Exit, Failure, with_causes};
use crate::input::read_source;
use crate::output::table;
use crate::session::{Access, Session, store_failure};
use crate::time::format_instant;

/// `idem entity ...`: the entities of `idem transition`.
#[derive(Debug, Subcommand)]
pub(crate) enum EntityCommand {
    /// Show one entity: its state, version and last move.
    #[command(after_help = "\
Exit status 7 when the entity was never moved.
JSON: {\"tenant\",\"kind\",\"id\",\"state\",\"version\",\"updated_at\"}.

Example:
  idem entity get shop-7 payment p-991 --json")]
    Get {
        /// Tenant.
        #[arg(value_name = "TENANT")]
        tenant: String,
        /// The kind of business object.
        #[arg(value_name = "KIND")]
        kind: String,
        /// The object's id.
        #[arg(value_name = "ID", allow_hyphen_values = true)]
        id: String,
    },
    /// List the entities of a kind, by state.
    #[command(after_help = "\
Example:
  idem entity list payment --state paid --limit 20")]
    List {
        /// The kind of business object.
        #[arg(value_name = "KIND")]
        kind: String,
        /// Only entities in this state.
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// At most this many entities.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
}

/// An entity as JSON.
#[derive(Serialize)]
struct EntityView<'a> {
    tenant: &'a str,
    kind: &'a str,
    id: &'a str,
    state: &'a str,
    version: u64,
    updated_at: u64,
}

impl<'a> EntityView<'a> {
    fn new(id: &'a EntityId, entity: &'a Entity) -> EntityView<'a> {
        EntityView {
            tenant: id.tenant(),
            kind: id.kind(),
            id: id.id(),
            state: &entity.state,
            version: entity.version,
            updated_at: entity.updated_at.as_millis(),
        }
    }
}

/// The machine in `path`, checked.
fn read_machine(path: &Path) -> Result<Machine, Failure> {
    let bytes = read_source("--machine", path)?;
    let spec: MachineSpec = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::usage(format!("--machine: {}: {e}", path.display())))?;
    Machine::new(spec).map_err(|e| Failure::usage(format!("--machine: {}: {e}", path.display())))
}

fn entity_id((tenant, kind, id): (&str, &str, &str)) -> Result<EntityId, Failure> {
    EntityId::new(tenant, kind, id).map_err(|e| Failure::usage(with_causes(&e)))
}

/// `idem transition TENANT KIND ID TO --machine FILE [--expected-version N]`
pub(crate) fn transition(
    session: &Session,
    id: (&str, &str, &str),
    to: &str,
    machine: &Path,
    expected_version: Option<u64>,
) -> Ending {
    let id = entity_id(id)?;
    let machine = read_machine(machine)?;
    let store = session.open_receiver(Config::default(), Access::Create)?;
    let decision = store
        .call(|s| s.transition(&machine, &id, to, expected_version, session.now()))
        .map_err(store_failure)?;
    let printer = session.printer();
    match &decision {
        EntityDecision::Applied { entity } | EntityDecision::AlreadyThere { entity } => {
            let name = if matches!(decision, EntityDecision::Applied { .. }) {
                "applied"
            } else {
                "already_there"
            };
            let value = serde_json::json!({
                "decision": name,
                "state": entity.state,
                "version": entity.version,
                "updated_at": entity.updated_at.as_millis(),
            });
            printer.either(&value, || {
                format!(
                    "{}: {id} is {} (version {})",
                    name.replace('_', " "),
                    entity.state,
                    entity.version
                )
            })?;
            Ok(Exit::Done.code())
        }
        EntityDecision::Illegal { from, to } => {
            let value = serde_json::json!({ "decision": "illegal", "from": from, "to": to });
            printer.either(&value, || {
                format!("illegal: the machine does not allow {id} to move from {from} to {to}")
            })?;
            Ok(Exit::Stale.code())
        }
        EntityDecision::VersionMismatch { expected, current } => {
            let value = serde_json::json!({
                "decision": "version_mismatch",
                "expected": expected,
                "current": current,
            });
            printer.either(&value, || {
                format!(
                    "version mismatch: {id} is at version {current}, not {expected}; someone moved it meanwhile, read it again"
                )
            })?;
            Ok(Exit::Stale.code())
        }
    }
}

/// `idem entity get TENANT KIND ID`
pub(crate) fn get(session: &Session, id: (&str, &str, &str)) -> Ending {
    let id = entity_id(id)?;
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let Some(entity) = store.call(|s| s.get_entity(&id)).map_err(store_failure)? else {
        return Err(Failure::new(
            Exit::NotFound,
            format!("{id}: no entity (never moved)"),
        ));
    };
    session
        .printer()
        .either(&EntityView::new(&id, &entity), || {
            format!(
                "tenant   {}\nkind     {}\nid       {}\nstate    {}\nversion  {}\nupdated  {}",
                id.tenant(),
                id.kind(),
                id.id(),
                entity.state,
                entity.version,
                format_instant(entity.updated_at)
            )
        })?;
    Ok(Exit::Done.code())
}

/// `idem entity list KIND [--state S] [--limit N]`
pub(crate) fn list(
    session: &Session,
    kind: &str,
    state: Option<&str>,
    limit: Option<usize>,
) -> Ending {
    // The kind's rule, before the file.
    entity_id(("t", kind, "k"))?;
    let store = session.open_receiver(Config::default(), Access::Read)?;
    let entities = store
        .call(|s| s.list_entities(kind, state, limit.unwrap_or(usize::MAX)))
        .map_err(store_failure)?;
    let printer = session.printer();
    if printer.json {
        for (id, entity) in &entities {
            printer.json_line(&EntityView::new(id, entity))?;
        }
        return Ok(Exit::Done.code());
    }
    if entities.is_empty() {
        printer.line("no entities")?;
        return Ok(Exit::Done.code());
    }
    let mut cells = vec![
        ["TENANT", "ID", "STATE", "VERSION", "UPDATED"]
            .map(String::from)
            .to_vec(),
    ];
    cells.extend(entities.iter().map(|(id, entity)| {
        vec![
            id.tenant().to_string(),
            id.id().to_string(),
            entity.state.clone(),
            entity.version.to_string(),
            format_instant(entity.updated_at),
        ]
    }));
    printer.line(&table(&cells))?;
    Ok(Exit::Done.code())
}
