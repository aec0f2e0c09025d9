//! idem on MariaDB against what a team would write by hand, in one run on one server:
//! begin + complete through idem against idem's own two statements sent by the bench
//! with no idem code (the floor: the claim and the fenced update, with values the bench
//! makes itself), and against seed 004's pattern (`INSERT … ON DUPLICATE KEY UPDATE id =
//! id`, the affected rows read, then an `UPDATE` of the result: no fencing), on its own
//! table (a surrogate id and a `UNIQUE` key) and on a table shaped like idem's; taking
//! turns, at 1 and 64 callers; a replay read from the database and from the replica's
//! cache; and the statements each input sends, counted by the server.
//!
//! ```text
//! cargo bench -p idem-bench --bench mariadb [-- --ops N] [--callers N]
//! ```
//!
//! `--ops` is the number of keys of each timed run of one caller (2,000 by default; runs
//! of many callers make four times as many); `--callers` runs one number of callers
//! instead of 1 and 64. It starts a throwaway server of its own (as the tests do: the
//! binary log off, `innodb_flush_log_at_trx_commit = 1`), or uses the database at
//! `IDEM_BENCH_MYSQL_URL` (whose server must allow 300 connections). Every caller has a
//! connection of its own; idem's pool has one per caller, opened and its statements
//! prepared before anything is timed, as the floor's are. The rows take turns five times,
//! in an order reversed every other round; a row's figures are its median run, a ratio
//! the median of the rounds' ratios. Prints figures only: nothing here asserts a speed.

#[path = "../../store/tests/common/mariadb.rs"]
mod server;

use std::error::Error;
use std::sync::Arc;

use idem_bench::measure::{
    BenchError, KeySequence, Row, argument, measure_tasks, median, paired, table,
};
use idem_bench::receiver::{begin_then_complete, replays};
use idem_core::protocol::Decision;
use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::Receiver;
use idem_store::mysql::MySqlStore;
use idem_store::mysql::mysql_async::prelude::Queryable;
use idem_store::mysql::mysql_async::{self, Conn, Value};
use tokio::sync::Mutex;

const CALLERS: [u32; 2] = [1, 64];

/// Rounds of turns: each row runs once a round, beside the others.
const PAIRS: usize = 5;

/// Runs of many callers make this many times as many calls as runs of one.
const MANY: u32 = 4;

/// The outcome every row stores: a small JSON answer.
const ANSWER: &[u8] = b"{\"id\":\"ch_1\",\"status\":\"paid\"}";

/// Seed 004's statements on its own table, and on a table shaped like idem's.
const SEED_OWN: [&str; 2] = [
    "INSERT INTO seed004_payments (idempotency_key, status) VALUES (?, 'pending') \
     ON DUPLICATE KEY UPDATE id = id",
    "UPDATE seed004_payments SET status = 'succeeded', response = ? WHERE idempotency_key = ?",
];
const SEED_SHAPED: [&str; 2] = [
    "INSERT INTO seed004_records (tenant, operation, idem_key, fingerprint, generation, \
       revision, state, created_at, updated_at, lease_until) \
     VALUES ('bench', 'seed', ?, X'07', 0, 0, 0, idem_now(), idem_now(), idem_now() + 30000) \
     ON DUPLICATE KEY UPDATE generation = generation",
    "UPDATE seed004_records SET state = 1, verdict = 0, updated_at = idem_now(), \
       lease_until = NULL, completed_at = idem_now(), expires_at = idem_now() + 86400000, \
       outcome_code = 201, outcome_body = ? \
     WHERE tenant = 'bench' AND operation = 'seed' AND idem_key = ?",
];

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let ops = argument("--ops")?.unwrap_or(2_000);
    let callers: Vec<u32> = match argument("--callers")? {
        Some(callers) => vec![callers],
        None => CALLERS.to_vec(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server;
    let url = match std::env::var("IDEM_BENCH_MYSQL_URL") {
        Ok(url) => url,
        Err(_) => {
            server = server::Server::start();
            server.sql("CREATE DATABASE bench");
            server.url_of("bench")
        }
    };
    runtime.block_on(run(&url, ops, &callers))
}

/// One key through idem's two statements sent by hand: the begin (whose claim draws the
/// generation, marked `mark`), then the fenced update that settles it, with the values
/// the bench makes.
async fn by_hand(conn: &mut Conn, key: &str, mark: i64) -> Result<(), BenchError> {
    let [claim, complete] = MySqlStore::fresh_key_statements();
    let fingerprint = Fingerprint::of_bytes(key.as_bytes()).0.to_vec();
    let claimed: Option<mysql_async::Row> = conn
        .exec_first(claim, ("bench", "hand", key, fingerprint, 30_000_i64, mark))
        .await?;
    let claimed = claimed.ok_or_else(|| format!("{key}: the claim returned no row"))?;
    // The row is this call's claim when it carries this call's mark.
    let (Some(Some(claimant)), Some(Some(generation))) = (
        claimed.get::<Option<i64>, _>(0),
        claimed.get::<Option<i64>, _>(4),
    ) else {
        return Err(format!("{key}: {claimed:?}").into());
    };
    if claimant != mark {
        return Err(format!("{key}: not claimed").into());
    }
    let retention = i64::try_from(Config::default().success_retention_ms)?;
    let params: Vec<Value> = vec![
        1_i16.into(),
        0_i16.into(),
        Value::NULL,
        0_i64.into(),
        retention.into(),
        201_i32.into(),
        ANSWER.into(),
        "bench".into(),
        "hand".into(),
        key.into(),
        generation.into(),
        0_i16.into(),
    ];
    let settled = conn.exec_iter(complete, params).await?;
    let changed = settled.affected_rows();
    settled.drop_result().await?;
    if changed != 1 {
        return Err(format!("{key}: the settle changed {changed} rows").into());
    }
    Ok(())
}

/// One key through seed 004's pattern: the claim (a new row when it affected one), then
/// the result written.
async fn seed004(conn: &mut Conn, statements: [&str; 2], key: &str) -> Result<(), BenchError> {
    let claimed = conn.exec_iter(statements[0], (key,)).await?;
    let new = claimed.affected_rows() == 1;
    claimed.drop_result().await?;
    if !new {
        return Err(format!("{key}: not new").into());
    }
    conn.exec_drop(statements[1], (ANSWER, key)).await?;
    Ok(())
}

/// A connection per caller, its statements prepared by one call each.
async fn connections(
    url: &str,
    callers: u32,
    statements: &[&str],
) -> Result<Vec<Mutex<Conn>>, BenchError> {
    let mut conns = Vec::new();
    for _ in 0..callers {
        let mut conn = Conn::new(mysql_async::Opts::from_url(url)?).await?;
        conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        for statement in statements {
            conn.prep(*statement).await?;
        }
        conns.push(Mutex::new(conn));
    }
    Ok(conns)
}

/// The server's count of statements sent by clients, read on `setup` (which adds one).
async fn questions(setup: &mut Conn) -> Result<u64, BenchError> {
    let row: Option<(String, u64)> = setup
        .query_first("SHOW GLOBAL STATUS LIKE 'Questions'")
        .await?;
    Ok(row.ok_or("no Questions")?.1)
}

/// The statements per key of idem's inputs, counted by the server with one caller:
/// a fresh key's begin and complete, and a replay read from the database.
async fn round_trips(url: &str, setup: &mut Conn) -> Result<(f64, f64, f64), BenchError> {
    const KEYS: u32 = 200;
    let store = MySqlStore::builder()
        .pool_size(1)
        .replay_cache(0)
        .connect(url)
        .await?;
    let id = |n: u32| RecordId::new("bench", "count", &format!("k{n}"));
    begin_then_complete(&store, &RecordId::new("bench", "count", "warm")?, ANSWER).await?;
    let fp = |id: &RecordId| Fingerprint::of_bytes(id.key().as_bytes());
    let mut generations = Vec::new();
    let at = questions(setup).await?;
    for n in 0..KEYS {
        let id = id(n)?;
        match store.begin(&id, fp(&id), Timestamp(0)).await? {
            Decision::Claimed { generation, .. } => generations.push(generation),
            other => return Err(format!("{other:?}").into()),
        }
    }
    let begun = questions(setup).await?;
    for (n, generation) in (0..KEYS).zip(generations) {
        let outcome = Outcome::new(201, ANSWER.to_vec());
        store
            .complete(
                &id(n)?,
                generation,
                Verdict::Succeeded,
                outcome,
                Timestamp(0),
            )
            .await?;
    }
    let completed = questions(setup).await?;
    for n in 0..KEYS {
        let id = id(n)?;
        store.begin(&id, fp(&id), Timestamp(0)).await?;
    }
    let replayed = questions(setup).await?;
    let per_key = |from: u64, to: u64| (to - from - 1) as f64 / f64::from(KEYS);
    Ok((
        per_key(at, begun),
        per_key(begun, completed),
        per_key(completed, replayed),
    ))
}

async fn run(url: &str, ops: u32, every: &[u32]) -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut setup = Conn::new(mysql_async::Opts::from_url(url)?).await?;
    let version: String = setup
        .query_first("SELECT VERSION()")
        .await?
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "idem-bench mariadb: MariaDB {version}, {cores} cores, {ops} keys per run of one caller \
         ({MANY}x that for many callers), innodb_flush_log_at_trx_commit = 1"
    );
    drop(MySqlStore::connect(url).await?); // the schema
    setup
        .query_drop(
            "DROP TABLE IF EXISTS seed004_payments, seed004_records; \
             CREATE TABLE seed004_payments (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
               idempotency_key VARCHAR(255) NOT NULL UNIQUE, status VARCHAR(16) NOT NULL, \
               response BLOB); \
             CREATE TABLE seed004_records LIKE idem_records",
        )
        .await?;
    let (begin, complete, replay) = round_trips(url, &mut setup).await?;
    let keys = Arc::new(KeySequence::default());
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &callers in every {
        let total = if callers > 1 { ops * MANY } else { ops };
        let idem = MySqlStore::builder()
            .pool_size(callers as usize)
            .replay_cache(0)
            .connect(url)
            .await?;
        // Every connection of the pool opened and its statements prepared.
        let warm = Arc::clone(&keys);
        measure_tasks(
            callers,
            callers * 2,
            vec![idem.clone(); callers as usize],
            move |store, _, _| {
                let id = RecordId::new("bench", "charge", &warm.next("warm"));
                async move { begin_then_complete(&*store, &id?, ANSWER).await }
            },
        )
        .await?;
        let hand = connections(url, callers, &MySqlStore::fresh_key_statements()).await?;
        let own = connections(url, callers, &SEED_OWN).await?;
        let shaped = connections(url, callers, &SEED_SHAPED).await?;
        let (hand, own, shaped) = (Arc::new(hand), Arc::new(own), Arc::new(shaped));
        let mut turns_of: [Vec<Row>; 4] = Default::default();
        for round in 0..PAIRS {
            let mut turns = [0, 1, 2, 3];
            if round % 2 == 1 {
                turns.reverse();
            }
            for turn in turns {
                let keys = Arc::clone(&keys);
                let row = match turn {
                    0 => {
                        let timing = measure_tasks(
                            callers,
                            total,
                            vec![idem.clone(); callers as usize],
                            move |store, _, _| {
                                let id = RecordId::new("bench", "charge", &keys.next("idem"));
                                async move { begin_then_complete(&*store, &id?, ANSWER).await }
                            },
                        )
                        .await?;
                        Row::new(
                            "mariadb_idem",
                            "idem begin + complete (2 statements)",
                            callers,
                            &timing,
                        )
                    }
                    1 => {
                        let conns = Arc::clone(&hand);
                        let timing = measure_tasks(
                            callers,
                            total,
                            (0..callers as usize).collect(),
                            move |caller, _, _| {
                                let conns = Arc::clone(&conns);
                                let mark = keys.take();
                                let key = format!("hand{mark:010}");
                                async move {
                                    let mark = i64::try_from(mark)?;
                                    by_hand(&mut *conns[*caller].lock().await, &key, mark).await
                                }
                            },
                        )
                        .await?;
                        Row::new(
                            "mariadb_floor",
                            "floor: idem's claim and fenced update, by hand",
                            callers,
                            &timing,
                        )
                    }
                    2 | 3 => {
                        let (conns, statements, id, what) = if turn == 2 {
                            (
                                Arc::clone(&own),
                                SEED_OWN,
                                "mariadb_seed004",
                                "seed 004: ON DUPLICATE KEY UPDATE id = id, UPDATE (no fencing)",
                            )
                        } else {
                            (
                                Arc::clone(&shaped),
                                SEED_SHAPED,
                                "mariadb_seed004_idem_table",
                                "seed 004 on a table shaped like idem's",
                            )
                        };
                        let timing = measure_tasks(
                            callers,
                            total,
                            (0..callers as usize).collect(),
                            move |caller, _, _| {
                                let (conns, key) = (Arc::clone(&conns), keys.next("seed"));
                                async move {
                                    seed004(&mut *conns[*caller].lock().await, statements, &key)
                                        .await
                                }
                            },
                        )
                        .await?;
                        Row::new(id, what, callers, &timing)
                    }
                    _ => unreachable!("four turns"),
                };
                eprintln!(
                    "  {}, {callers} callers: {:.0}/s",
                    row.measurement, row.per_second
                );
                turns_of[turn].push(row);
            }
        }
        let [idem_rows, hand_rows, own_rows, shaped_rows] = turns_of;
        ratios.push((
            callers,
            paired(&idem_rows, &hand_rows),
            paired(&idem_rows, &own_rows),
            paired(&idem_rows, &shaped_rows),
        ));
        rows.extend([idem_rows, hand_rows, own_rows, shaped_rows].map(median));

        // A replay read from the database, and one answered from the replica's cache.
        let settled = RecordId::new("bench", "charge", &keys.next("replayed"))?;
        begin_then_complete(&idem, &settled, ANSWER).await?;
        let cached = MySqlStore::builder()
            .pool_size(callers as usize)
            .connect(url)
            .await?;
        for (store, id, what) in [
            (
                &idem,
                "mariadb_replay",
                "idem replay read from the database",
            ),
            (
                &cached,
                "mariadb_replay_cached",
                "idem replay from the replica's cache",
            ),
        ] {
            let timing = replays(store, &settled, callers, total).await?;
            rows.push(Row::new(id, what, callers, &timing));
        }
    }
    println!("{}", table(&rows));
    println!(
        "statements per key, counted by the server (Questions): begin {begin:.2}, complete \
         {complete:.2}, replay read from the database {replay:.2} (0 from the cache)"
    );
    for (callers, floor, own, shaped) in ratios {
        println!(
            "{callers} callers: idem / its statements by hand {floor:.2}x; idem / seed 004 \
             {own:.2}x on its own table, {shaped:.2}x on a table shaped like idem's"
        );
    }
    Ok(())
}
