//! idem on PostgreSQL against what a team would write by hand, in one run on one
//! server: begin + complete through idem against two statements sent by the bench with
//! no idem code (the floor: a bare `INSERT … ON CONFLICT DO NOTHING` and a fenced
//! `UPDATE`), against idem's own two statements sent by the bench (which also answer a
//! key in the way in the same round trip), seed 004's pattern (claim, SELECT, UPDATE, no
//! fencing; on its own one-index table, and on a table shaped like idem's) and
//! brandur's (each phase a SERIALIZABLE transaction), taking turns, at 1 and 64 callers;
//! a replay through idem (its replica cache) and read from the database; and moves of
//! entities, alone and inside an atomic execute, beside the same statements by hand
//! (`postgres/entities.rs`).
//!
//! ```text
//! cargo bench -p idem-bench --bench postgres [-- --ops N] [--callers N]
//! ```
//!
//! `--ops` is the number of calls of each timed run of one caller (3,000 by default;
//! runs of many callers make four times as many); `--callers` runs one number of
//! callers instead of 1 and 64. It starts a throwaway server of its own (as the tests
//! do), or uses the database at `IDEM_BENCH_PG_URL` (whose server must allow 400
//! connections, for a role that may run `CHECKPOINT`). Every caller has a connection of
//! its own; idem's pool has one per caller, opened (and its statements prepared) before
//! anything is timed, as the floor's connections are. The rows take turns five times,
//! each run after a checkpoint, in an order reversed every other round; a row's figures
//! are its median run, a ratio the median of the rounds' ratios. Each run's rate goes to
//! stderr as it ends. Prints figures only: nothing here asserts a speed.

#[path = "../../store/tests/common/postgres.rs"]
mod server;

#[path = "postgres/entities.rs"]
mod entities;

use std::error::Error;
use std::sync::Arc;

use idem_bench::measure::{
    BenchError, Row, argument, measure_tasks as measure, median, paired, table,
};
use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::postgres::tokio_postgres::types::ToSql;
use idem_store::postgres::tokio_postgres::{self, Client, NoTls};
use idem_store::postgres::{PgStore, fresh_key_statements};

const CALLERS: [u32; 2] = [1, 64];

/// Rounds of turns: each row runs once a round, beside the others.
const PAIRS: usize = 5;

/// Runs of many callers make this many times as many calls as runs of one: they go
/// about three times as fast, and a run should last seconds, not a fraction of one.
const MANY: u32 = 4;

/// A round's turns: in the given order in even rounds, reversed in odd ones (A B C,
/// C B A, A B C, …), so that no one always runs first or last as the machine drifts.
fn in_turn<const N: usize>(round: usize, mut turns: [usize; N]) -> [usize; N] {
    if round % 2 == 1 {
        turns.reverse();
    }
    turns
}

/// A checkpoint before each timed run: every run then starts with the same WAL to
/// write (a page's first change after a checkpoint logs the whole page), and no timed
/// checkpoint falls inside a run.
async fn checkpoint(setup: &Client) -> Result<(), BenchError> {
    setup.batch_execute("CHECKPOINT").await.map_err(|e| {
        let why = e
            .as_db_error()
            .map_or(e.to_string(), |db| db.message().to_owned());
        format!("CHECKPOINT before a run (the role needs pg_checkpoint or superuser): {why}").into()
    })
}

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let ops = argument("--ops")?.unwrap_or(3_000);
    let callers: Vec<u32> = match argument("--callers")? {
        Some(callers) => vec![callers],
        None => CALLERS.to_vec(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server;
    let url = match std::env::var("IDEM_BENCH_PG_URL") {
        Ok(url) => url,
        Err(_) => {
            // At 64 callers, idem's pool and four sets of connections by hand are open
            // at once: 320, and the 1-caller run's closing.
            server = server::Server::start_with(&[("max_connections", "500")]);
            server.url()
        }
    };
    runtime.block_on(run(&url, ops, &callers))
}

async fn connect(url: &str) -> Result<Client, BenchError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ended = connection.await;
    });
    client.batch_execute("SET synchronous_commit = on").await?;
    Ok(client)
}

async fn run(url: &str, ops: u32, every: &[u32]) -> Result<(), Box<dyn Error + Send + Sync>> {
    let setup = connect(url).await?;
    let version: String = setup.query_one("SHOW server_version", &[]).await?.get(0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "idem-bench postgres: PostgreSQL {version}, {cores} cores, {ops} calls per run of one caller \
         ({many}x that for many callers), synchronous_commit = on",
        many = MANY
    );
    drop(PgStore::connect(url).await?); // the schema
    setup
        .batch_execute(
            "DROP TABLE IF EXISTS floor_keys, seed004_keys, seed004_records, brandur_keys; \
             CREATE TABLE floor_keys (LIKE idem_records INCLUDING ALL); \
             CREATE TABLE seed004_records (LIKE idem_records INCLUDING ALL); \
             CREATE TABLE seed004_keys (key text PRIMARY KEY, status text NOT NULL, \
               response bytea, expires_at timestamptz NOT NULL); \
             CREATE TABLE brandur_keys (id bigserial PRIMARY KEY, user_id bigint NOT NULL, \
               idempotency_key text NOT NULL, locked_at timestamptz, recovery_point text NOT NULL, \
               request_params jsonb NOT NULL, response_code int, response_body bytea, \
               UNIQUE (user_id, idempotency_key))",
        )
        .await?;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let mut entity_ratios = Vec::new();
    for &callers in every {
        // brandur's pattern goes several times slower: its runs keep `base` calls.
        let (base, ops) = (ops, if callers > 1 { ops * MANY } else { ops });
        let idem = PgStore::builder()
            .pool_size(callers as usize)
            .connect(url)
            .await?;
        warm(&idem, callers, "idem").await?;
        let floor_clients = prepared_floor(url, callers).await?;
        let floor_clients = Arc::new(floor_clients);
        let own_clients = Arc::new(prepared_own(url, callers).await?);
        let seed_clients: Vec<Arc<Seed004>> = prepared_seed004(url, callers, false)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        let seed_shaped_clients: Vec<Arc<Seed004>> = prepared_seed004(url, callers, true)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        let brandur_clients: Vec<Arc<Brandur>> = prepared_brandur(url, callers)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut turns: [Vec<Row>; 6] = Default::default();
        // idem, the floors, seed 004 (twice) and brandur take turns, in the listed order
        // in even rounds and the reverse in odd ones, each after a checkpoint: this
        // machine's disk and CPU drift within a run, and neither place in the order
        // nor the WAL a turn inherits may favour one side.
        for round in 0..PAIRS {
            for turn in in_turn(round, [0, 1, 2, 3, 4, 5]) {
                checkpoint(&setup).await?;
                let row = match turn {
                    0 => {
                        eprintln!("  {callers} callers: idem ({round})");
                        Row::new(
                            "pg_idem",
                            "idem: begin + complete",
                            callers,
                            &measure(
                                callers,
                                ops,
                                per_caller(&idem, callers),
                                move |idem, caller, n| async move {
                                    let key = format!("i-{callers}-{round}-{caller}-{n}");
                                    begin_complete(&idem, &key).await
                                },
                            )
                            .await?,
                        )
                    }
                    1 => {
                        eprintln!("  {callers} callers: the floor ({round})");
                        let clients = Arc::clone(&floor_clients);
                        by_hand(ByHand::Bare, clients, callers, ops, round).await?
                    }
                    2 => {
                        eprintln!("  {callers} callers: idem's statements by hand ({round})");
                        let clients = Arc::clone(&own_clients);
                        by_hand(ByHand::Own, clients, callers, ops, round).await?
                    }
                    3 => {
                        eprintln!("  {callers} callers: seed 004 ({round})");
                        let clients = seed_clients.clone();
                        seed004(clients, callers, ops, round, false).await?
                    }
                    4 => {
                        eprintln!("  {callers} callers: seed 004 on a table like idem's ({round})");
                        let clients = seed_shaped_clients.clone();
                        seed004(clients, callers, ops, round, true).await?
                    }
                    _ => {
                        eprintln!("  {callers} callers: brandur ({round})");
                        Row::new(
                            "pg_brandur",
                            "brandur: two SERIALIZABLE phases",
                            callers,
                            &measure(
                                callers,
                                base,
                                brandur_clients.clone(),
                                move |state, caller, n| async move {
                                    let key = format!("b-{callers}-{round}-{caller}-{n}");
                                    brandur(&state, &key).await
                                },
                            )
                            .await?,
                        )
                    }
                };
                turns[turn].push(row);
            }
        }
        // Their connections closed: the server's max_connections is shared by all.
        drop((
            floor_clients,
            own_clients,
            seed_clients,
            seed_shaped_clients,
            brandur_clients,
        ));
        ratios.push((
            callers,
            [1, 2, 3, 4, 5].map(|other| paired(&turns[0], &turns[other])),
        ));
        // idem, the floors, seed 004 (twice) and brandur, each its median run.
        rows.extend(turns.map(median));
        eprintln!("  {callers} callers: replays");
        let replay_row = replays(
            &idem,
            callers,
            ops,
            "pg_idem_replay",
            "idem: replay (a replica's cache)",
        )
        .await?;
        let uncached = PgStore::builder()
            .pool_size(callers as usize)
            .replay_cache(0)
            .connect(url)
            .await?;
        warm(&uncached, callers, "uncached").await?;
        let read_row = replays(
            &uncached,
            callers,
            ops,
            "pg_idem_replay_read",
            "idem: replay read from the database",
        )
        .await?;
        rows.extend([replay_row, read_row]);
        let moves = entities::rows(url, &idem, callers, ops).await?;
        entity_ratios.push((
            callers,
            paired(&moves[0], &moves[1]),
            paired(&moves[2], &moves[3]),
            paired(&moves[2], &moves[4]),
        ));
        rows.extend(moves.map(median));
    }
    println!();
    print!("{}", table(&rows));
    println!();
    for (callers, [floor, own, seed, shaped, brandur]) in ratios {
        println!(
            "{callers:>2} callers: idem / floor {floor:.2}x (/ idem's own statements by hand \
             {own:.2}x), idem / seed 004 {seed:.2}x (on a table shaped like idem's \
             {shaped:.2}x), idem / brandur {brandur:.2}x"
        );
    }
    for (callers, alone, inside, by_hand) in entity_ratios {
        println!(
            "{callers:>2} callers: a move through idem / the UPDATE by hand {alone:.2}x; \
             inside execute, a move through idem / the UPDATE by hand {inside:.2}x \
             (/ the whole transaction by hand {by_hand:.2}x)"
        );
    }
    Ok(())
}

/// A fresh key's begin and complete through idem.
async fn begin_complete(idem: &PgStore, key: &str) -> Result<(), BenchError> {
    let id = RecordId::new("bench", "charge", key)?;
    let Decision::Claimed { generation, .. } =
        idem.begin(&id, Fingerprint([7; 32]), Timestamp(0)).await?
    else {
        return Err(format!("{key}: a fresh key was not claimed").into());
    };
    idem.complete(
        &id,
        generation,
        Verdict::Succeeded,
        Outcome::new(201, "ok"),
        Timestamp(0),
    )
    .await?;
    Ok(())
}

/// Opens every connection of `idem`'s pool and prepares its statements, as the floor's
/// connections are before they are timed: `callers` callers at once, twice each.
async fn warm(idem: &PgStore, callers: u32, name: &str) -> Result<(), BenchError> {
    let name = name.to_owned();
    measure(
        callers,
        callers * 2,
        per_caller(idem, callers),
        move |idem, caller, n| {
            let name = name.clone();
            async move { begin_complete(&idem, &format!("w-{name}-{callers}-{caller}-{n}")).await }
        },
    )
    .await?;
    Ok(())
}

/// Each caller's state for [`measure`]: a handle of its own on `idem` (one pool).
fn per_caller(idem: &PgStore, callers: u32) -> Vec<PgStore> {
    vec![idem.clone(); callers as usize]
}

/// Replays of the keys the first round of begin + complete settled, one per caller,
/// through `idem`: from its replay cache, or read from the database when it has none.
async fn replays(
    idem: &PgStore,
    callers: u32,
    ops: u32,
    name: &'static str,
    what: &'static str,
) -> Result<Row, BenchError> {
    let timing = measure(
        callers,
        ops,
        per_caller(idem, callers),
        move |idem, caller, _| async move {
            let id = RecordId::new("bench", "charge", &format!("i-{callers}-0-{caller}-0"))?;
            match idem.begin(&id, Fingerprint([7; 32]), Timestamp(0)).await? {
                Decision::Replay { .. } => Ok(()),
                other => Err(format!("{other:?}").into()),
            }
        },
    )
    .await?;
    Ok(Row::new(name, what, callers, &timing))
}

type Floor = (Client, tokio_postgres::Statement, tokio_postgres::Statement);

async fn prepared_floor(url: &str, callers: u32) -> Result<Vec<Floor>, BenchError> {
    let mut prepared = Vec::new();
    for _ in 0..callers {
        let client = connect(url).await?;
        let (claim, settle) = floor_statements(&client, "charge").await?;
        prepared.push((client, claim, settle));
    }
    Ok(prepared)
}

/// A connection per caller with idem's own two statements of a fresh key prepared, as
/// the engine prepares them ([`fresh_key_statements`]).
async fn prepared_own(url: &str, callers: u32) -> Result<Vec<Floor>, BenchError> {
    let [claim, complete] = fresh_key_statements();
    let mut prepared = Vec::new();
    for _ in 0..callers {
        let client = connect(url).await?;
        let claim = client.prepare(&claim).await?;
        let complete = client.prepare(&complete).await?;
        prepared.push((client, claim, complete));
    }
    Ok(prepared)
}

/// The two statements of a fresh key sent by the bench with no idem code, on a
/// [`Floor`] connection: the bare ones ([`floor_statements`]), or idem's own
/// ([`prepared_own`]), which name the tenant and operation and answer a key in the way.
#[derive(Clone, Copy)]
enum ByHand {
    Bare,
    Own,
}

impl ByHand {
    /// The row's id and measurement, and the prefix of its keys.
    fn row(self) -> (&'static str, &'static str, &'static str) {
        match self {
            ByHand::Bare => (
                "pg_floor",
                "floor: INSERT … DO NOTHING + fenced UPDATE, by hand",
                "f",
            ),
            ByHand::Own => (
                "pg_own",
                "floor: idem's own claim and complete, by hand",
                "o",
            ),
        }
    }

    /// Claims the fresh key `key` and settles it, with the values idem's complete sends.
    async fn call(self, (client, claim, settle): &Floor, key: &str) -> Result<(), BenchError> {
        let fingerprint = [7u8; 32];
        let fingerprint = fingerprint.as_slice();
        let (tenant, operation) = ("bench", "own");
        let settled = match self {
            ByHand::Bare => {
                let row = client
                    .query_opt(claim, &[&key, &fingerprint, &30_000i64])
                    .await?
                    .ok_or("a fresh key was not claimed")?;
                let generation: i64 = row.get(0);
                let settled: &[&(dyn ToSql + Sync)] = &[
                    &key,
                    &generation,
                    &86_400_000i64,
                    &201i32,
                    &b"ok".as_slice(),
                ];
                client.query_opt(settle, settled).await?
            }
            ByHand::Own => {
                // The claimant: the engine's mark of the begin (any value will do here).
                let claimed: &[&(dyn ToSql + Sync)] =
                    &[&tenant, &operation, &key, &fingerprint, &30_000i64, &1i64];
                let rows = client.query(claim, claimed).await?;
                let row = rows.first().ok_or("a fresh key found no row")?;
                if !row.get::<_, bool>(0) {
                    return Err("a fresh key was not claimed".into());
                }
                // After `claimed` and the time: fingerprint, then generation.
                let generation: i64 = row.get(3);
                let settled: &[&(dyn ToSql + Sync)] = &[
                    &tenant,
                    &operation,
                    &key,
                    &Some(generation),
                    &0i16,
                    &1i16,
                    &Some(0i16),
                    &None::<i64>,
                    &Some(0i64),
                    &Some(86_400_000i64),
                    &Some(201i32),
                    &Some(b"ok".as_slice()),
                ];
                client.query_opt(settle, settled).await?
            }
        };
        settled.ok_or("the claim was not settled")?;
        Ok(())
    }
}

/// Statements by hand, timed: each call claims a fresh key and settles it, on a
/// connection of `clients` per caller.
async fn by_hand(
    statements: ByHand,
    clients: Arc<Vec<Floor>>,
    callers: u32,
    ops: u32,
    round: usize,
) -> Result<Row, BenchError> {
    let (id, what, prefix) = statements.row();
    let timing = measure(
        callers,
        ops,
        (0..callers as usize).collect(),
        move |state, caller, n| {
            let clients = Arc::clone(&clients);
            async move {
                let key = format!("{prefix}-{callers}-{round}-{caller}-{n}");
                statements.call(&clients[*state], &key).await
            }
        },
    )
    .await?;
    Ok(Row::new(id, what, callers, &timing))
}

/// The floor's claim (`$1` key, `$2` fingerprint, `$3` lease) and fenced settle (`$1`
/// key, `$2` generation, `$3` retention, `$4` code, `$5` body) of keys under
/// `operation`, prepared on `client`.
async fn floor_statements(
    client: &Client,
    operation: &str,
) -> Result<(tokio_postgres::Statement, tokio_postgres::Statement), BenchError> {
    let claim = client
        .prepare(&format!(
            "INSERT INTO floor_keys (tenant, operation, key, fingerprint, generation, state, created_at, updated_at, lease_until) \
             VALUES ('bench', '{operation}', $1, $2, nextval('idem_generation'), 0, idem_now(), idem_now(), idem_now() + $3) \
             ON CONFLICT DO NOTHING RETURNING generation"
        ))
        .await?;
    let settle = client
        .prepare(&format!(
            "UPDATE floor_keys SET state = 1, verdict = 0, updated_at = idem_now(), lease_until = NULL, \
               completed_at = idem_now(), expires_at = idem_now() + $3, outcome_code = $4, outcome_body = $5 \
             WHERE tenant = 'bench' AND operation = '{operation}' AND key = $1 AND generation = $2 AND state = 0 \
             RETURNING generation"
        ))
        .await?;
    Ok((claim, settle))
}

type Seed004 = (
    Client,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
    tokio_postgres::Statement,
);

/// Seed 004's statements (claim, SELECT, UPDATE; no fencing), prepared on a connection
/// per caller: on seed 004's own table (`seed004_keys`: one index, a completion that
/// updates no indexed column), or, with `idem_shaped`, on a table shaped like idem's
/// records (`seed004_records`: its indexes for sweep and the reconciler too).
async fn prepared_seed004(
    url: &str,
    callers: u32,
    idem_shaped: bool,
) -> Result<Vec<Seed004>, BenchError> {
    let [claim, select, update] = if idem_shaped {
        [
            "INSERT INTO seed004_records (tenant, operation, key, fingerprint, generation, state, created_at, updated_at, lease_until) \
             VALUES ('bench', 'seed', $1, '\\x07', 0, 0, idem_now(), idem_now(), idem_now() + 30000) ON CONFLICT DO NOTHING",
            "SELECT CASE state WHEN 0 THEN 'in_progress' ELSE 'completed' END, outcome_body \
               FROM seed004_records WHERE tenant = 'bench' AND operation = 'seed' AND key = $1",
            "UPDATE seed004_records SET state = 1, verdict = 0, updated_at = idem_now(), lease_until = NULL, \
               completed_at = idem_now(), expires_at = idem_now() + 86400000, outcome_code = 201, outcome_body = $2 \
             WHERE tenant = 'bench' AND operation = 'seed' AND key = $1",
        ]
    } else {
        [
            "INSERT INTO seed004_keys (key, status, expires_at) VALUES ($1, 'in_progress', now() + interval '24 hours') \
             ON CONFLICT (key) DO NOTHING",
            "SELECT status, response FROM seed004_keys WHERE key = $1",
            "UPDATE seed004_keys SET status = 'completed', response = $2 WHERE key = $1",
        ]
    };
    let mut prepared = Vec::new();
    for _ in 0..callers {
        let client = connect(url).await?;
        let claim = client.prepare(claim).await?;
        let select = client.prepare(select).await?;
        let update = client.prepare(update).await?;
        prepared.push((client, claim, select, update));
    }
    Ok(prepared)
}

/// Seed 004's pattern, timed: each call claims a fresh key, reads it back and
/// completes it, on `clients` ([`prepared_seed004`]).
async fn seed004(
    clients: Vec<Arc<Seed004>>,
    callers: u32,
    ops: u32,
    round: usize,
    idem_shaped: bool,
) -> Result<Row, BenchError> {
    let (name, what) = if idem_shaped {
        (
            "pg_seed004_idem_table",
            "seed 004 on a table shaped like idem's",
        )
    } else {
        ("pg_seed004", "seed 004: claim, SELECT, UPDATE (no fencing)")
    };
    let timing = measure(callers, ops, clients, move |state, caller, n| async move {
        let (client, claim, select, update) = &**state;
        let key = format!("s-{callers}-{round}-{caller}-{n}");
        client.execute(claim, &[&key]).await?;
        let row = client.query_one(select, &[&key]).await?;
        let status: String = row.get(0);
        if status != "in_progress" {
            return Err("the claim is not in progress".into());
        }
        client.execute(update, &[&key, &b"ok".as_slice()]).await?;
        Ok(())
    })
    .await?;
    Ok(Row::new(name, what, callers, &timing))
}

type Brandur = Client;

async fn prepared_brandur(url: &str, callers: u32) -> Result<Vec<Brandur>, BenchError> {
    let mut prepared = Vec::new();
    for _ in 0..callers {
        prepared.push(connect(url).await?);
    }
    Ok(prepared)
}

/// brandur's "atomic phases": phase 1 looks the key up and locks it, or inserts it, in a
/// SERIALIZABLE transaction; phase 2 stores the response and finishes, in another.
/// A serialization failure retries its phase.
async fn brandur(client: &Client, key: &str) -> Result<(), BenchError> {
    let phase = |sql: &'static [&'static str]| async move {
        loop {
            let attempt = async {
                client
                    .batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                    .await?;
                for statement in sql {
                    client.execute(*statement, &[&key]).await?;
                }
                client.batch_execute("COMMIT").await
            };
            match attempt.await {
                Ok(()) => return Ok::<_, BenchError>(()),
                Err(e)
                    if e.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE) =>
                {
                    client.batch_execute("ROLLBACK").await?;
                }
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(e.into());
                }
            }
        }
    };
    phase(&[
        "SELECT id FROM brandur_keys WHERE user_id = 1 AND idempotency_key = $1",
        "INSERT INTO brandur_keys (user_id, idempotency_key, locked_at, recovery_point, request_params) \
         VALUES (1, $1, now(), 'started', '{}')",
    ])
    .await?;
    phase(&[
        "UPDATE brandur_keys SET locked_at = NULL, recovery_point = 'finished', response_code = 201, \
           response_body = 'ok' WHERE user_id = 1 AND idempotency_key = $1",
    ])
    .await
}
