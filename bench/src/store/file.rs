//! A file filled with settled records: its size, lookups, compaction and sweep.

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use idem_core::protocol::Decision;
use idem_core::{Fingerprint, Outcome, RecordId};
use idem_store::Store;
use idem_store::redb::ConcurrencyMode;
use serde::Serialize;

use super::writes::grouped;
use super::{NOW, Plan};
use crate::measure::{BenchError, KeySequence, Row, Timing, measure};

/// Figures of a file holding [`Plan::records`] settled records.
#[derive(Debug, Clone, Serialize)]
pub struct FileFigures {
    /// Records written.
    pub records: u64,
    /// Records written per second while filling (group commit, the plan's most callers).
    pub fill_per_second: f64,
    /// Size of the file after the fill.
    pub file_bytes: u64,
    /// `file_bytes` per record.
    pub bytes_per_record: f64,
    /// Bytes per record after [`Store::compact`].
    pub compacted_bytes_per_record: f64,
    /// Time to sweep every record once all expired (each leaves its tombstone, the
    /// default), in milliseconds.
    pub sweep_ms: f64,
    /// Records swept per second.
    pub sweep_per_second: f64,
}

/// The two lines printed under the table: size and fill rate, then the sweep.
impl fmt::Display for FileFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "file after {} records: {} bytes, {:.0} bytes per record ({:.0} after compact); filled at {:.0} records/s",
            self.records,
            self.file_bytes,
            self.bytes_per_record,
            self.compacted_bytes_per_record,
            self.fill_per_second
        )?;
        write!(
            f,
            "sweep of {} expired records: {:.0} ms ({:.0} records/s)",
            self.records, self.sweep_ms, self.sweep_per_second
        )
    }
}

/// Fills a file with `plan.records` settled records, measures its size, the lookups
/// in both concurrency modes, compaction and the sweep of every record.
pub(super) fn file_figures(
    dir: &Path,
    plan: &Plan,
    callers: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<(FileFigures, Vec<Row>), BenchError> {
    let path = dir.join("records.redb");
    let store = Store::open(&path)?;
    let outcome = Outcome::new(200, vec![b'x'; 64]);
    let records = plan.records.max(1);
    let id = |n: u32| RecordId::new("bench", "record", &format!("sale-{n:08}"));
    progress(&format!(
        "{records} records, execute_grouped at {callers} callers"
    ));
    let per_caller = records.div_ceil(callers);
    let sequence = KeySequence::default();
    let fill = measure(callers, per_caller, |_, _| {
        match u32::try_from(sequence.take()) {
            Ok(k) if k < records => grouped(&store, &id(k)?, &outcome),
            _ => Ok(()),
        }
    })?;
    let written = store.stats(NOW)?.records();
    let file_bytes = fs::metadata(&path)?.len();

    // Lookups of existing keys in a scattered order.
    let ids: Vec<RecordId> = (0..plan.lookups.max(1))
        .map(|n| id(n.wrapping_mul(7_919) % records))
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    progress("replay lookups");
    // Reopened with a replay cache that holds every looked-up key, so that the second
    // pass measures answers from memory and the first the reads from the file.
    drop(store);
    let store = Store::builder().replay_cache(ids.len()).open(&path)?;
    rows.extend(lookups(&store, &ids, "")?);
    drop(store);
    let exclusive = Store::builder()
        .concurrency(ConcurrencyMode::ExclusiveWriter)
        .replay_cache(ids.len())
        .open(&path)?;
    rows.extend(lookups(&exclusive, &ids, ", single process")?);
    drop(exclusive);
    // The same gets with the replay cache off: each reads the file.
    for (mode, id, name) in [
        (
            ConcurrencyMode::MultiWriter,
            "get_uncached",
            "get of a settled key, replay cache off",
        ),
        (
            ConcurrencyMode::ExclusiveWriter,
            "get_uncached_exclusive",
            "get of a settled key, replay cache off, single process",
        ),
    ] {
        let store = Store::builder()
            .concurrency(mode)
            .replay_cache(0)
            .open(&path)?;
        rows.push(Row::new(id, name, 1, &gets(&store, &ids)?));
    }

    let mut store = Store::open(&path)?;
    progress("compact");
    store.compact()?;
    let compacted = fs::metadata(&path)?.len();
    progress("sweep");
    let after = NOW.plus_millis(
        store
            .config()
            .success_retention_ms
            .max(store.config().failure_retention_ms)
            + 1,
    );
    let start = Instant::now();
    let swept = store.sweep(after, usize::MAX, false)?;
    let sweep = start.elapsed();
    // With the default settings each settled record leaves its tombstone.
    let taken = swept.removed + swept.tombstoned;
    if taken != written || swept.remaining_expired {
        return Err(format!("swept {taken} of {written} records").into());
    }
    let per_record = |bytes: u64| bytes as f64 / written.max(1) as f64;
    Ok((
        FileFigures {
            records: written,
            fill_per_second: written as f64 / fill.total.as_secs_f64().max(1e-9),
            file_bytes,
            bytes_per_record: per_record(file_bytes),
            compacted_bytes_per_record: per_record(compacted),
            sweep_ms: sweep.as_secs_f64() * 1e3,
            sweep_per_second: written as f64 / sweep.as_secs_f64().max(1e-9),
        },
        rows,
    ))
}

/// A begin that replays each id twice (the first from the file, which fills the replay
/// cache, the second from memory), and a get of each (which the cache, filled, serves),
/// on one caller. The store's replay cache must hold every id.
fn lookups(store: &Store, ids: &[RecordId], mode: &str) -> Result<[Row; 3], BenchError> {
    let count = u32::try_from(ids.len())?;
    let distinct = ids.iter().collect::<HashSet<_>>().len();
    let fingerprints: Vec<Fingerprint> = ids
        .iter()
        .map(|id| Fingerprint::of_bytes(id.key().as_bytes()))
        .collect();
    let replay = || {
        measure(1, count, |_, n| {
            let id = &ids[n as usize];
            match store.begin(id, fingerprints[n as usize], NOW)? {
                Decision::Replay { .. } => Ok(()),
                other => Err(format!("{id}: expected a replay, got {other:?}").into()),
            }
        })
    };
    let first = replay()?;
    let begin = replay()?;
    let get = gets(store, ids)?;
    let single = !mode.is_empty();
    Ok([
        Row::new(
            if single {
                "replay_begin_first_exclusive"
            } else {
                "replay_begin_first"
            },
            &format!("replay: first begin on a settled key, from the file{mode}"),
            1,
            &first,
        ),
        Row::new(
            if single {
                "replay_begin_exclusive"
            } else {
                "replay_begin"
            },
            &format!("replay: begin on a settled key, cached ({distinct} keys){mode}"),
            1,
            &begin,
        ),
        Row::new(
            if single { "get_exclusive" } else { "get" },
            &format!("get of a settled key{mode}"),
            1,
            &get,
        ),
    ])
}

/// A get of each id, on one caller.
fn gets(store: &Store, ids: &[RecordId]) -> Result<Timing, BenchError> {
    measure(1, u32::try_from(ids.len())?, |_, n| {
        let id = &ids[n as usize];
        match store.get(id)? {
            Some(record) => {
                black_box(record);
                Ok(())
            }
            None => Err(format!("{id} is missing").into()),
        }
    })
}
