//! idem on Redis beside the guard teams write by hand, in one run on one server: begin +
//! complete through idem, against the same two function calls sent by the bench with no
//! idem code (the floor: `idem_read` and `idem_write` with bytes made in advance), and
//! against seed 004's guard (`GET` a cached result, `SET NX PX` a lock, then a pipeline
//! of `SET` the result and `DEL` the lock: no fencing, no durable claim, no Unknown);
//! taking turns, at 1 and 64 callers; and a replay through idem beside a bare `GET`.
//!
//! ```text
//! cargo bench -p idem-bench --bench redis [-- --ops N] [--callers N]
//! ```
//!
//! `--ops` is the number of keys of each timed run of one caller (3,000 by default; runs
//! of many callers make four times as many); `--callers` runs one number of callers
//! instead of 1 and 64. It starts a throwaway server of its own (as the tests do), with
//! the settings the engine requires (`appendonly yes`, `appendfsync always`,
//! `noeviction`), or uses the server at `IDEM_BENCH_REDIS_URL`. Every row's callers share
//! one connection, on which their calls are pipelined, as idem's store does. The rows
//! take turns five times, in an order reversed every other round; a row's figures are its
//! median run, a ratio the median of the rounds' ratios. Prints figures only: nothing
//! here asserts a speed.

#[path = "../../store/tests/common/redis.rs"]
mod server;

use std::error::Error;
use std::sync::Arc;

use idem_bench::measure::{
    BenchError, KeySequence, Row, argument, measure_tasks, median, paired, table,
};
use idem_bench::receiver::{begin_then_complete, replays};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, Status, Timestamp, Verdict,
};
use idem_store::redis::RedisStore;
use redis::aio::MultiplexedConnection;

const CALLERS: [u32; 2] = [1, 64];

/// Rounds of turns: each row runs once a round, beside the others.
const PAIRS: usize = 5;

/// Runs of many callers make this many times as many calls as runs of one.
const MANY: u32 = 4;

/// The outcome every row stores: a small JSON answer.
const ANSWER: &[u8] = b"{\"id\":\"ch_1\",\"status\":\"paid\"}";

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
    let url = match std::env::var("IDEM_BENCH_REDIS_URL") {
        Ok(url) => url,
        Err(_) => {
            server = server::Server::start();
            server.url()
        }
    };
    runtime.block_on(run(&url, ops, &callers))
}

/// A clone of `shared` for each of `callers`: every row's callers share one connection.
fn each<S: Clone>(callers: u32, shared: &S) -> Vec<S> {
    (0..callers).map(|_| shared.clone()).collect()
}

/// idem's record key of `id`, as its library names it.
fn record_key(id: &RecordId) -> Vec<u8> {
    let mut key = b"{idem}:r:".to_vec();
    key.extend_from_slice(&id.to_key_bytes());
    key
}

/// One key through idem's two function calls sent by hand: the read (which draws the
/// generation), the claim's write; the read again, the settle's write. The records are
/// made here, without idem-core's decisions or the store's code around the calls.
async fn by_hand(conn: &MultiplexedConnection, id: &RecordId) -> Result<(), BenchError> {
    let mut conn = conn.clone();
    let key = record_key(id);
    let member = id.to_key_bytes();
    let (_, now, drawn): (Vec<u8>, u64, u64) = redis::cmd("FCALL")
        .arg("idem_read")
        .arg(1)
        .arg(&key)
        .arg("claim")
        .query_async(&mut conn)
        .await?;
    let pending = Record {
        fingerprint: Fingerprint::of_bytes(id.key().as_bytes()),
        generation: Generation(drawn),
        created_at: Timestamp(now),
        updated_at: Timestamp(now),
        status: Status::Pending {
            lease_until: Timestamp(now + 30_000),
        },
    };
    let claimed = pending.encode();
    let written: i64 = redis::cmd("FCALL")
        .arg("idem_write")
        .arg(1)
        .arg(&key)
        .arg(&member)
        .arg("")
        .arg(&claimed)
        .arg("pending")
        .arg(now)
        .arg(0)
        .arg(now)
        .query_async(&mut conn)
        .await?;
    if written != 1 {
        return Err(format!("{id}: the claim's write lost").into());
    }
    let (seen, now, _): (Vec<u8>, u64, u64) = redis::cmd("FCALL")
        .arg("idem_read")
        .arg(1)
        .arg(&key)
        .arg("")
        .query_async(&mut conn)
        .await?;
    let expires_at = now + Config::default().success_retention_ms;
    let settled = Record {
        updated_at: Timestamp(now),
        status: Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(200, ANSWER.to_vec()),
            completed_at: Timestamp(now),
            expires_at: Timestamp(expires_at),
        },
        ..pending
    };
    let written: i64 = redis::cmd("FCALL")
        .arg("idem_write")
        .arg(1)
        .arg(&key)
        .arg(&member)
        .arg(&seen)
        .arg(settled.encode())
        .arg("succeeded")
        .arg(expires_at)
        .arg(expires_at + Config::default().tombstone_retention_ms)
        .arg(now)
        .query_async(&mut conn)
        .await?;
    if written != 1 {
        return Err(format!("{id}: the settle's write lost").into());
    }
    Ok(())
}

/// One key through seed 004's guard: `GET` the cached result (none), `SET NX PX` the
/// lock, then one pipeline that stores the result and deletes the lock.
async fn seed_guard(conn: &MultiplexedConnection, key: &str) -> Result<(), BenchError> {
    let mut conn = conn.clone();
    let result_key = format!("seed:result:{key}");
    let lock_key = format!("seed:lock:{key}");
    let cached: Option<Vec<u8>> = redis::cmd("GET")
        .arg(&result_key)
        .query_async(&mut conn)
        .await?;
    if cached.is_some() {
        return Err(format!("{key}: already cached").into());
    }
    let locked: Option<String> = redis::cmd("SET")
        .arg(&lock_key)
        .arg("1")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut conn)
        .await?;
    if locked.is_none() {
        return Err(format!("{key}: locked").into());
    }
    let _stored: () = redis::pipe()
        .cmd("SET")
        .arg(&result_key)
        .arg(ANSWER)
        .arg("PX")
        .arg(86_400_000)
        .ignore()
        .cmd("DEL")
        .arg(&lock_key)
        .ignore()
        .query_async(&mut conn)
        .await?;
    Ok(())
}

async fn run(url: &str, ops: u32, every: &[u32]) -> Result<(), Box<dyn Error + Send + Sync>> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn.clone())
        .await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "idem-bench redis: Redis {version}, {cores} cores, {ops} keys per run of one caller \
         ({MANY}x that for many callers), appendfsync always"
    );
    // No replay cache: a replay row measures the call; the cached one is its own row.
    let store = Arc::new(RedisStore::builder().replay_cache(0).connect(url).await?);
    let cached = Arc::new(RedisStore::connect(url).await?);
    let keys = Arc::new(KeySequence::default());
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &callers in every {
        let total = if callers > 1 { ops * MANY } else { ops };
        let (mut idem_rows, mut hand_rows, mut seed_rows) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..PAIRS {
            let mut turns = [0, 1, 2];
            if round % 2 == 1 {
                turns.reverse();
            }
            for turn in turns {
                match turn {
                    0 => {
                        eprintln!("  idem begin + complete, {callers} callers");
                        let keys = Arc::clone(&keys);
                        let timing = measure_tasks(
                            callers,
                            total,
                            each(callers, &store),
                            move |store, _, _| {
                                let id = RecordId::new("shop", "charge", &keys.next("idem"));
                                async move { begin_then_complete(&**store, &id?, ANSWER).await }
                            },
                        )
                        .await?;
                        idem_rows.push(Row::new(
                            "redis_idem",
                            "idem begin + complete (4 calls)",
                            callers,
                            &timing,
                        ));
                    }
                    1 => {
                        eprintln!("  the same calls by hand, {callers} callers");
                        let keys = Arc::clone(&keys);
                        let timing = measure_tasks(
                            callers,
                            total,
                            each(callers, &conn),
                            move |conn, _, _| {
                                let id = RecordId::new("shop", "charge", &keys.next("hand"));
                                async move { by_hand(&conn, &id?).await }
                            },
                        )
                        .await?;
                        hand_rows.push(Row::new(
                            "redis_floor",
                            "idem's 4 function calls by hand (floor)",
                            callers,
                            &timing,
                        ));
                    }
                    _ => {
                        eprintln!("  seed 004's guard, {callers} callers");
                        let keys = Arc::clone(&keys);
                        let timing = measure_tasks(
                            callers,
                            total,
                            each(callers, &conn),
                            move |conn, _, _| {
                                let key = keys.next("seed");
                                async move { seed_guard(&conn, &key).await }
                            },
                        )
                        .await?;
                        seed_rows.push(Row::new(
                            "redis_seed004",
                            "seed 004's guard: GET, SET NX PX, SET + DEL",
                            callers,
                            &timing,
                        ));
                    }
                }
            }
        }
        ratios.push((
            callers,
            paired(&idem_rows, &hand_rows),
            paired(&idem_rows, &seed_rows),
        ));
        rows.push(median(idem_rows));
        rows.push(median(hand_rows));
        rows.push(median(seed_rows));

        // A replay through idem: one call, and none from a replica's cache.
        for (store, id, what) in [
            (&store, "redis_replay", "idem replay (1 call)"),
            (
                &cached,
                "redis_replay_cached",
                "idem replay from the replica's cache (0 calls)",
            ),
        ] {
            let settled = RecordId::new("shop", "charge", &keys.next("replayed"))?;
            begin_then_complete(&**store, &settled, ANSWER).await?;
            let timing = replays(&**store, &settled, callers, total).await?;
            rows.push(Row::new(id, what, callers, &timing));
        }
    }
    println!("{}", table(&rows));
    for (callers, floor, seed) in ratios {
        println!(
            "{callers} callers: idem / the same calls by hand {floor:.2}x; idem / seed 004's guard {seed:.2}x"
        );
    }
    Ok(())
}
