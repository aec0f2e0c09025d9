//! Moves of entities on PostgreSQL: a transition alone, and a transition inside an
//! atomic execute, each beside the same statements sent by the bench with no idem code.

use std::sync::Arc;

use idem_bench::measure::{BenchError, Row};
use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
use idem_store::entity::{EntityDecision, EntityId, Machine, MachineSpec};
use idem_store::postgres::PgStore;
use idem_store::postgres::tokio_postgres::{Client, Statement};

use super::{connect, measure};

/// Moves of entities: each caller flips its own entity between two states, with a
/// version check, through idem's `transition` and by a bare `UPDATE … WHERE version = $v`
/// sent by the bench (the floor).
pub(crate) async fn rows(
    url: &str,
    idem: &PgStore,
    callers: u32,
    ops: u32,
) -> Result<Vec<Row>, BenchError> {
    let flip = Arc::new(Machine::new(MachineSpec {
        states: vec!["even".into(), "odd".into()],
        initial: "even".into(),
        moves: vec![("even".into(), "odd".into()), ("odd".into(), "even".into())],
    })?);
    let setup = connect(url).await?;
    setup
        .batch_execute(
            "DROP TABLE IF EXISTS floor_entities; \
             CREATE TABLE floor_entities (LIKE idem_entities INCLUDING ALL)",
        )
        .await?;
    for caller in 0..callers {
        let id = EntityId::new("bench", "account", &format!("a-{callers}-{caller}"))?;
        let created = idem.transition(&flip, &id, "even", None).await?;
        if !matches!(created, EntityDecision::Applied { .. }) {
            return Err(format!("{id}: {created:?}").into());
        }
        setup
            .execute(
                "INSERT INTO floor_entities VALUES ('bench', 'account', $1, 'even', 1, idem_now())",
                &[&format!("a-{callers}-{caller}")],
            )
            .await?;
    }
    eprintln!("  {callers} callers: moves through idem");
    let moves = Row::new(
        "pg_idem_transition",
        "idem: a move with a version check",
        callers,
        &measure(callers, ops, vec![(); callers as usize], {
            let (idem, flip) = (idem.clone(), Arc::clone(&flip));
            move |_, caller, n| {
                let (idem, flip) = (idem.clone(), Arc::clone(&flip));
                async move {
                    let id = EntityId::new("bench", "account", &format!("a-{callers}-{caller}"))?;
                    let to = if n % 2 == 0 { "odd" } else { "even" };
                    match idem
                        .transition(&flip, &id, to, Some(u64::from(n) + 1))
                        .await?
                    {
                        EntityDecision::Applied { .. } => Ok(()),
                        other => Err(format!("{id}: {other:?}").into()),
                    }
                }
            }
        })
        .await?,
    );
    eprintln!("  {callers} callers: moves by hand");
    let mut clients = Vec::new();
    for _ in 0..callers {
        let client = connect(url).await?;
        let update = client
            .prepare(
                "UPDATE floor_entities SET state = $2, version = version + 1, updated_at = idem_now() \
                  WHERE tenant = 'bench' AND kind = 'account' AND id = $1 AND version = $3",
            )
            .await?;
        clients.push((client, update));
    }
    let by_hand = Row::new(
        "pg_floor_transition",
        "floor: UPDATE … WHERE version = $v, by hand",
        callers,
        &measure(callers, ops, clients, move |state, caller, n| async move {
            let (client, update) = &*state;
            let to = if n % 2 == 0 { "odd" } else { "even" };
            let moved = client
                .execute(
                    update,
                    &[&format!("a-{callers}-{caller}"), &to, &(i64::from(n) + 1)],
                )
                .await?;
            if moved == 1 {
                Ok(())
            } else {
                Err("the move by hand found another version".into())
            }
        })
        .await?,
    );
    let (inside, inside_by_hand) = inside_execute(url, idem, &flip, callers, ops).await?;
    Ok(vec![moves, by_hand, inside, inside_by_hand])
}

/// A move inside an atomic execute: each call claims a fresh key, moves the caller's
/// entity with a version check and settles the key, in one transaction; beside it the
/// same by hand: BEGIN, the claim's INSERT, the move's UPDATE, the settle's UPDATE,
/// COMMIT, each prepared.
async fn inside_execute(
    url: &str,
    idem: &PgStore,
    flip: &Arc<Machine>,
    callers: u32,
    ops: u32,
) -> Result<(Row, Row), BenchError> {
    let setup = connect(url).await?;
    for caller in 0..callers {
        let name = format!("x-{callers}-{caller}");
        let id = EntityId::new("bench", "account", &name)?;
        let created = idem.transition(flip, &id, "even", None).await?;
        if !matches!(created, EntityDecision::Applied { .. }) {
            return Err(format!("{id}: {created:?}").into());
        }
        setup
            .execute(
                "INSERT INTO floor_entities VALUES ('bench', 'account', $1, 'even', 1, idem_now())",
                &[&name],
            )
            .await?;
    }
    eprintln!("  {callers} callers: moves inside execute through idem");
    let through_idem = Row::new(
        "pg_idem_execute_transition",
        "idem: execute with a move inside",
        callers,
        &measure(callers, ops, vec![(); callers as usize], {
            let (idem, flip) = (idem.clone(), Arc::clone(flip));
            move |_, caller, n| {
                let (idem, flip) = (idem.clone(), Arc::clone(&flip));
                async move {
                    let key = RecordId::new("bench", "move", &format!("x-{callers}-{caller}-{n}"))?;
                    let id = EntityId::new("bench", "account", &format!("x-{callers}-{caller}"))?;
                    let to = if n % 2 == 0 { "odd" } else { "even" };
                    let mover = idem.clone();
                    let executed = idem
                        .execute(&key, Fingerprint([7; 32]), move |txn| {
                            Box::pin(async move {
                                let moved = mover
                                    .transition_in(txn, &flip, &id, to, Some(u64::from(n) + 1))
                                    .await
                                    .map_err(|e| e.to_string())?;
                                match moved {
                                    EntityDecision::Applied { .. } => {
                                        Ok((Verdict::Succeeded, Outcome::new(200, "moved"), ()))
                                    }
                                    other => Err(format!("{id}: {other:?}")),
                                }
                            })
                        })
                        .await
                        .map_err(|e| e.to_string())?;
                    match executed {
                        idem_store::Executed::Ran { .. } => Ok(()),
                        other => Err(format!("{key}: {other:?}").into()),
                    }
                }
            }
        })
        .await?,
    );
    eprintln!("  {callers} callers: moves inside a transaction by hand");
    let mut clients = Vec::new();
    for _ in 0..callers {
        clients.push(Prepared::new(connect(url).await?).await?);
    }
    let by_hand = Row::new(
        "pg_floor_execute_transition",
        "floor: BEGIN, INSERT, UPDATE … WHERE version, UPDATE, COMMIT",
        callers,
        &measure(callers, ops, clients, move |state, caller, n| async move {
            let prepared = &*state;
            let client = &prepared.client;
            let key = format!("x-{callers}-{caller}-{n}");
            let to = if n % 2 == 0 { "odd" } else { "even" };
            client.batch_execute("BEGIN").await?;
            let row = client
                .query_opt(&prepared.claim, &[&key, &[7u8; 32].as_slice(), &30_000i64])
                .await?
                .ok_or("a fresh key was not claimed")?;
            let generation: i64 = row.get(0);
            let moved = client
                .execute(
                    &prepared.move_entity,
                    &[&format!("x-{callers}-{caller}"), &to, &(i64::from(n) + 1)],
                )
                .await?;
            if moved != 1 {
                return Err("the move by hand found another version".into());
            }
            client
                .query_opt(
                    &prepared.settle,
                    &[
                        &key,
                        &generation,
                        &86_400_000i64,
                        &200i32,
                        &b"moved".as_slice(),
                    ],
                )
                .await?
                .ok_or("the claim was not settled")?;
            client.batch_execute("COMMIT").await?;
            Ok(())
        })
        .await?,
    );
    Ok((through_idem, by_hand))
}

/// A connection of the by-hand transaction, with its statements.
struct Prepared {
    client: Client,
    claim: Statement,
    move_entity: Statement,
    settle: Statement,
}

impl Prepared {
    async fn new(client: Client) -> Result<Prepared, BenchError> {
        let claim = client
            .prepare(
                "INSERT INTO floor_keys (tenant, operation, key, fingerprint, generation, state, created_at, updated_at, lease_until) \
                 VALUES ('bench', 'move', $1, $2, nextval('idem_generation'), 0, idem_now(), idem_now(), idem_now() + $3) \
                 ON CONFLICT DO NOTHING RETURNING generation",
            )
            .await?;
        let move_entity = client
            .prepare(
                "UPDATE floor_entities SET state = $2, version = version + 1, updated_at = idem_now() \
                  WHERE tenant = 'bench' AND kind = 'account' AND id = $1 AND version = $3",
            )
            .await?;
        let settle = client
            .prepare(
                "UPDATE floor_keys SET state = 1, verdict = 0, updated_at = idem_now(), lease_until = NULL, \
                   completed_at = idem_now(), expires_at = idem_now() + $3, outcome_code = $4, outcome_body = $5 \
                 WHERE tenant = 'bench' AND operation = 'move' AND key = $1 AND generation = $2 AND state = 0 \
                 RETURNING generation",
            )
            .await?;
        Ok(Prepared {
            client,
            claim,
            move_entity,
            settle,
        })
    }
}
