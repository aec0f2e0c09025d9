//! Moves of entities on PostgreSQL: a transition alone, and a transition inside an
//! atomic execute, each beside the same statements sent by the bench with no idem code.

use std::sync::Arc;

use idem_bench::measure::{BenchError, Row};
use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
use idem_store::ExecuteError;
use idem_store::entity::{EntityDecision, EntityId, Machine, MachineSpec};
use idem_store::postgres::PgStore;
use idem_store::postgres::tokio_postgres::{
    self, Client, SimpleQueryMessage, Statement, Transaction,
};
use tokio::sync::Barrier;

use super::{PAIRS, checkpoint, connect, floor_statements, in_turn, measure, per_caller};

/// How many times as many calls a run of moves alone makes as a run of executes.
const ALONE: u32 = 3;

/// Moves of entities: each caller flips its own entity between two states, with a
/// version check, through idem's `transition` and by a bare `UPDATE … WHERE version = $v`
/// sent by the bench (the floor); then a move inside an atomic execute of idem beside
/// the same execute with the bench's `UPDATE` inside (the floor of the move there), and
/// beside the whole transaction by hand. Each row alternates with the others
/// [`PAIRS`] times, as the rows of begin + complete do. Returns each round's rows: move,
/// its floor, move inside execute, the UPDATE by hand inside execute, the transaction by
/// hand.
pub(crate) async fn rows(
    url: &str,
    idem: &PgStore,
    callers: u32,
    ops: u32,
) -> Result<[Vec<Row>; 5], BenchError> {
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
    // `a-…` entities move alone, `x-…` ones inside executes, `y-…` ones (by hand only)
    // inside executes of idem.
    for prefix in ["a", "x", "y"] {
        for caller in 0..callers {
            let name = format!("{prefix}-{callers}-{caller}");
            let id = EntityId::new("bench", "account", &name)?;
            if prefix != "y" {
                let created = idem.transition(&flip, &id, "even", None).await?;
                if !matches!(created, EntityDecision::Applied { .. }) {
                    return Err(format!("{id}: {created:?}").into());
                }
            }
            setup
                .execute(
                    "INSERT INTO floor_entities VALUES ('bench', 'account', $1, 'even', 1, idem_now())",
                    &[&name],
                )
                .await?;
        }
    }
    let mut clients = Vec::new();
    for _ in 0..callers {
        clients.push(Arc::new(Prepared::new(connect(url).await?).await?));
    }
    // A move alone takes a third of an execute's time: its runs make [`ALONE`] times as
    // many, to last as long.
    let alone_ops = ops * ALONE;
    // Each caller's k-th move (from 0) finds version k + 1 and goes to odd when k is
    // even; a run of `ops` calls makes `ops / callers` moves per caller.
    let steps = move |ops: u32| {
        let per_caller = u64::from((ops / callers).max(1));
        move |round: usize, n: u32| {
            let k = round as u64 * per_caller + u64::from(n);
            (k + 1, if k % 2 == 0 { "odd" } else { "even" })
        }
    };
    let (alone, step) = (steps(alone_ops), steps(ops));
    HandUpdate::prepare(idem, callers).await?;
    let mut measured: [Vec<Row>; 5] = Default::default();
    for round in 0..PAIRS {
        // Each caller's entity is one row moved thousands of times: its dead versions
        // slow every lookup until a vacuum, which autovacuum runs when it likes. Both
        // tables start each round vacuumed.
        setup
            .batch_execute("VACUUM idem_entities, floor_entities")
            .await?;
        for turn in in_turn(round, [0, 1, 2, 3, 4]) {
            checkpoint(&setup).await?;
            let row = match turn {
                0 => {
                    eprintln!("  {callers} callers: moves through idem ({round})");
                    let flip = Arc::clone(&flip);
                    Row::new(
                        "pg_idem_transition",
                        "idem: a move with a version check",
                        callers,
                        &measure(
                            callers,
                            alone_ops,
                            per_caller(idem, callers),
                            move |idem, caller, n| {
                                let flip = Arc::clone(&flip);
                                async move {
                                    let name = format!("a-{callers}-{caller}");
                                    let id = EntityId::new("bench", "account", &name)?;
                                    let (version, to) = alone(round, n);
                                    match idem.transition(&flip, &id, to, Some(version)).await? {
                                        EntityDecision::Applied { .. } => Ok(()),
                                        other => Err(format!("{id}: {other:?}").into()),
                                    }
                                }
                            },
                        )
                        .await?,
                    )
                }
                1 => {
                    eprintln!("  {callers} callers: moves by hand ({round})");
                    Row::new(
                        "pg_floor_transition",
                        "floor: UPDATE … WHERE version = $v, by hand",
                        callers,
                        &measure(
                            callers,
                            alone_ops,
                            clients.clone(),
                            move |state, caller, n| async move {
                                let (version, to) = alone(round, n);
                                let version = i64::try_from(version)?;
                                let name = format!("a-{callers}-{caller}");
                                let moved = state
                                    .client
                                    .execute(&state.move_entity, &[&name, &to, &version])
                                    .await?;
                                if moved == 1 {
                                    Ok(())
                                } else {
                                    Err("the move by hand found another version".into())
                                }
                            },
                        )
                        .await?,
                    )
                }
                2 => {
                    eprintln!("  {callers} callers: moves inside execute through idem ({round})");
                    let mover = Mover::Idem(Arc::clone(&flip));
                    inside_execute(idem, mover, callers, ops, round, step).await?
                }
                3 => {
                    eprintln!(
                        "  {callers} callers: UPDATEs by hand inside execute through idem ({round})"
                    );
                    inside_execute(idem, Mover::ByHand, callers, ops, round, step).await?
                }
                _ => {
                    eprintln!("  {callers} callers: moves inside a transaction by hand ({round})");
                    inside_by_hand(clients.clone(), callers, ops, round, step).await?
                }
            };
            measured[turn].push(row);
        }
    }
    Ok(measured)
}

/// What moves the entity inside an execute: idem's `transition_in`, or the bench's own
/// `UPDATE … WHERE version = $v` on the execute's connection.
#[derive(Clone)]
enum Mover {
    Idem(Arc<Machine>),
    ByHand,
}

/// The bench's `UPDATE` of a `floor_entities` row inside an execute of idem: a
/// statement prepared once on each connection of idem's pool (`PREPARE hand_move`), run
/// by name.
struct HandUpdate;

impl HandUpdate {
    const PREPARE: &str = "PREPARE hand_move(text, text, bigint) AS \
        UPDATE floor_entities SET state = $2, version = version + 1, updated_at = idem_now() \
         WHERE tenant = 'bench' AND kind = 'account' AND id = $1 AND version = $3";

    /// Prepares the `UPDATE` on every connection of `idem`'s pool before it is timed, as
    /// the statements by hand are: `callers` executes, each of which waits inside its
    /// transaction (holding its connection) until all have prepared, so that each runs
    /// on a connection of its own and every connection of the pool is reached.
    async fn prepare(idem: &PgStore, callers: u32) -> Result<(), BenchError> {
        let everyone = Arc::new(Barrier::new(callers as usize));
        measure(
            callers,
            callers,
            per_caller(idem, callers),
            move |idem, caller, _| {
                let everyone = Arc::clone(&everyone);
                async move {
                    let key =
                        RecordId::new("bench", "move", &format!("prepare-{callers}-{caller}"))?;
                    let executed = idem
                        .execute(&key, Fingerprint([7; 32]), move |txn| {
                            Box::pin(async move {
                                txn.batch_execute(Self::PREPARE).await.map_err(why)?;
                                everyone.wait().await;
                                Ok((Verdict::Succeeded, Outcome::new(200, "prepared"), ()))
                            })
                        })
                        .await
                        .map_err(|e: ExecuteError<String>| e.to_string())?;
                    match executed {
                        idem_store::Executed::Ran { .. } => Ok(()),
                        other => Err(format!("{key}: {other:?}").into()),
                    }
                }
            },
        )
        .await?;
        Ok(())
    }

    /// Moves entity `id` of `floor_entities` from `version` to state `to` inside `txn`,
    /// by the statement [`HandUpdate::prepare`] made on its connection.
    async fn apply(txn: &Transaction<'_>, id: &str, to: &str, version: u64) -> Result<(), String> {
        let run = format!("EXECUTE hand_move('{id}', '{to}', {version})");
        let answers = txn.simple_query(&run).await.map_err(why)?;
        let moved = answers.iter().find_map(|answer| match answer {
            SimpleQueryMessage::CommandComplete(rows) => Some(*rows),
            _ => None,
        });
        match moved {
            Some(1) => Ok(()),
            _ => Err(format!("{id}: the move by hand found another version")),
        }
    }
}

/// The server's own words for a failed statement (the driver's display says only "db
/// error").
fn why(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// A move inside an atomic execute: each call claims a fresh key, moves the caller's
/// entity with a version check and settles the key, in one transaction. `mover` is
/// idem's `transition_in` (the `x-…` entities) or the bench's own `UPDATE` (the `y-…`
/// rows of `floor_entities`).
async fn inside_execute(
    idem: &PgStore,
    mover: Mover,
    callers: u32,
    ops: u32,
    round: usize,
    step: impl Fn(usize, u32) -> (u64, &'static str) + Copy + Send + Sync + 'static,
) -> Result<Row, BenchError> {
    let (name, what, prefix) = match mover {
        Mover::Idem(_) => (
            "pg_idem_execute_transition",
            "idem: execute with a move inside",
            "x",
        ),
        Mover::ByHand => (
            "pg_floor_execute_update",
            "floor: execute with the UPDATE by hand inside",
            "y",
        ),
    };
    Ok(Row::new(
        name,
        what,
        callers,
        &measure(
            callers,
            ops,
            per_caller(idem, callers),
            move |idem, caller, n| {
                let mover = mover.clone();
                async move {
                    let key = format!("{prefix}-{callers}-{round}-{caller}-{n}");
                    let key = RecordId::new("bench", "move", &key)?;
                    let name = format!("{prefix}-{callers}-{caller}");
                    let id = EntityId::new("bench", "account", &name)?;
                    let (version, to) = step(round, n);
                    let store = idem.clone();
                    let executed = idem
                        .execute(&key, Fingerprint([7; 32]), move |txn| {
                            Box::pin(async move {
                                match mover {
                                    Mover::Idem(flip) => {
                                        let moved = store
                                            .transition_in(txn, &flip, &id, to, Some(version))
                                            .await
                                            .map_err(|e| e.to_string())?;
                                        if !matches!(moved, EntityDecision::Applied { .. }) {
                                            return Err(format!("{id}: {moved:?}"));
                                        }
                                    }
                                    Mover::ByHand => {
                                        HandUpdate::apply(txn, &name, to, version).await?;
                                    }
                                }
                                Ok((Verdict::Succeeded, Outcome::new(200, "moved"), ()))
                            })
                        })
                        .await
                        .map_err(|e| e.to_string())?;
                    match executed {
                        idem_store::Executed::Ran { .. } => Ok(()),
                        other => Err(format!("{key}: {other:?}").into()),
                    }
                }
            },
        )
        .await?,
    ))
}

/// The same transaction by hand: BEGIN, the claim's INSERT, the move's UPDATE, the
/// settle's UPDATE, COMMIT, each statement prepared.
async fn inside_by_hand(
    clients: Vec<Arc<Prepared>>,
    callers: u32,
    ops: u32,
    round: usize,
    step: impl Fn(usize, u32) -> (u64, &'static str) + Copy + Send + Sync + 'static,
) -> Result<Row, BenchError> {
    Ok(Row::new(
        "pg_floor_execute_transition",
        "floor: BEGIN, INSERT, UPDATE … WHERE version, UPDATE, COMMIT",
        callers,
        &measure(callers, ops, clients, move |state, caller, n| async move {
            let client = &state.client;
            let key = format!("x-{callers}-{round}-{caller}-{n}");
            let (version, to) = step(round, n);
            let version = i64::try_from(version)?;
            client.batch_execute("BEGIN").await?;
            let row = client
                .query_opt(&state.claim, &[&key, &[7u8; 32].as_slice(), &30_000i64])
                .await?
                .ok_or("a fresh key was not claimed")?;
            let generation: i64 = row.get(0);
            let moved = client
                .execute(
                    &state.move_entity,
                    &[&format!("x-{callers}-{caller}"), &to, &version],
                )
                .await?;
            if moved != 1 {
                return Err("the move by hand found another version".into());
            }
            client
                .query_opt(
                    &state.settle,
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
    ))
}

/// A connection of the moves by hand, with its statements.
struct Prepared {
    client: Client,
    claim: Statement,
    move_entity: Statement,
    settle: Statement,
}

impl Prepared {
    async fn new(client: Client) -> Result<Prepared, BenchError> {
        let (claim, settle) = floor_statements(&client, "move").await?;
        let move_entity = client
            .prepare(
                "UPDATE floor_entities SET state = $2, version = version + 1, updated_at = idem_now() \
                  WHERE tenant = 'bench' AND kind = 'account' AND id = $1 AND version = $3",
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
