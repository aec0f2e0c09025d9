//! Keeping a store healthy: sweep, stats for alerting, check and compact.

use std::ops::ControlFlow;

use idem_core::protocol::{self, Swept};
use idem_core::{Config, Generation, RecordId, State, Timestamp, Token};
use redb::ReadableTable;
use serde::Serialize;

use crate::error::{Error, MaintainError};
use crate::file::cache::ReplayCache;
use crate::file::handle::guard_read;
use crate::file::outbox::{check_intents, count_intents_by_state};
use crate::file::schema::{
    self as tables, COUNT_KEYS, GENERATION_KEY, INDEX, IndexReader, META, RECORDS, SCHEMA_KEY,
    SCHEMA_VERSION, TOKEN_EXPIRY, TOKEN_INTENTS,
};
use crate::file::writer::Writer;
use crate::seam::report::{IntentCounts, Stats, SweepReport};

/// Records deleted per write transaction by [`crate::Store::sweep`], so a large sweep never
/// holds the write lock for long.
pub(crate) const SWEEP_BATCH: usize = 256;

/// Problems [`Store::check`] lists one by one; beyond this it only counts them.
const MAX_LISTED_PROBLEMS: usize = 100;

/// What [`crate::Store::check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// redb found damage in the file and repaired it (its integrity check returned
    /// false): the file is usable, but something outside redb wrote to it.
    pub redb_repaired: bool,
    /// Records checked.
    pub records: u64,
    /// Intents of the outbox checked.
    pub intents: u64,
    /// Every inconsistency between records, indexes and meta, one sentence each (the
    /// first 100, then a count).
    pub problems: Vec<String>,
}

impl CheckReport {
    /// True when no inconsistency was found.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

struct Problems {
    listed: Vec<String>,
    more: u64,
}

impl Problems {
    fn push(&mut self, problem: String) {
        if self.listed.len() < MAX_LISTED_PROBLEMS {
            self.listed.push(problem);
        } else {
            self.more += 1;
        }
    }

    fn finish(mut self) -> Vec<String> {
        if self.more > 0 {
            self.listed
                .push(format!("... and {} more problems", self.more));
        }
        self.listed
    }
}

/// Sweeps the settled records and tombstones whose time ended at `now`; see
/// [`crate::Store::sweep`].
pub(crate) fn sweep(
    writer: &Writer,
    cache: &ReplayCache,
    config: &Config,
    now: Timestamp,
    limit: usize,
    dry_run: bool,
) -> Result<SweepReport, Error> {
    if dry_run {
        return guard_read(|_| sweep_dry_run(writer, config, now, limit));
    }
    // From here on, no record this sweep may delete is answered from the replay
    // cache (`cache.rs`).
    cache.raise_horizon(now);
    let mut report = SweepReport::default();
    let mut done = 0usize;
    loop {
        let batch = SWEEP_BATCH.min(limit - done);
        let (taken, more, swept_keys) = writer.transact("sweep", |_, tables| {
            let mut swept_keys = Vec::new();
            // A clock behind the floor sweeps as if it were at the floor. A sweep reads
            // the floor but never raises it: a sweep at a clock far ahead would
            // otherwise move the time of every later write.
            let now = tables.effective(now)?;
            cache.raise_horizon(now);
            let keys = tables.expired(now, batch)?;
            let take = keys.len().min(batch);
            for key in &keys[..take] {
                let (expires_at, id_key) = tables::split_timed_key(key)?;
                let record = tables.get(id_key)?;
                let swept = match &record {
                    Some(record) if record.expires_at() == Some(expires_at) => {
                        protocol::sweep(record, now, config)
                    }
                    _ => Swept::Keep,
                };
                match (swept, record) {
                    (Swept::Tombstone(tombstone), Some(record)) => {
                        tables.put(id_key, Some(&record), &tombstone)?;
                        report.tombstoned += 1;
                    }
                    (Swept::Delete, Some(record)) => {
                        tables.delete(id_key, &record)?;
                        report.removed += 1;
                    }
                    (_, other) => {
                        return Err(Error::Corrupt {
                            detail: format!(
                                "expiry index names {} at {expires_at}, but its record is {:?}",
                                tables::describe_key(id_key),
                                other.map(|r| r.state())
                            ),
                        });
                    }
                }
                swept_keys.push(id_key.to_vec());
            }
            Ok(((take, keys.len() > take, swept_keys), take > 0))
        })?;
        cache.remove(swept_keys.iter().map(Vec::as_slice));
        done += taken;
        if !more || done >= limit {
            report.remaining_expired = more;
            return Ok(report);
        }
    }
}

/// What [`sweep`] would delete and turn into tombstones.
fn sweep_dry_run(
    writer: &Writer,
    config: &Config,
    now: Timestamp,
    limit: usize,
) -> Result<SweepReport, Error> {
    let db = writer.read();
    let txn = db.begin_read()?;
    let index = IndexReader::open(&txn)?;
    let floor = index.clock_floor()?;
    let now = if writer.is_floored() {
        now.max(floor)
    } else {
        now
    };
    let records = txn.open_table(RECORDS)?;
    let mut report = SweepReport::default();
    let keys = index.expired(now, limit)?;
    report.remaining_expired = keys.len() > limit;
    for key in keys.iter().take(limit) {
        let (expires_at, id_key) = tables::split_timed_key(key)?;
        let record = tables::read_record(&records, id_key)?;
        match record.map(|record| protocol::sweep(&record, now, config)) {
            Some(Swept::Tombstone(_)) => report.tombstoned += 1,
            Some(Swept::Delete) => report.removed += 1,
            Some(Swept::Keep) | None => {
                return Err(Error::Corrupt {
                    detail: format!(
                        "expiry index names {} at {expires_at}, which is not to be swept",
                        tables::describe_key(id_key)
                    ),
                });
            }
        }
    }
    Ok(report)
}

/// Deletes the tokens whose ttl passed at `now`, oldest first, at most `limit`, in
/// write transactions of at most [`SWEEP_BATCH`]. A used token's record stays (it is
/// swept with the records); only its entry goes, and with it the intent's entry that
/// names it.
pub(crate) fn sweep_tokens(
    writer: &Writer,
    now: Timestamp,
    limit: usize,
) -> Result<SweepReport, Error> {
    let mut report = SweepReport::default();
    loop {
        let removed = usize::try_from(report.removed).unwrap_or(usize::MAX);
        let batch = SWEEP_BATCH.min(limit.saturating_sub(removed));
        let (deleted, more) = writer.transact("sweep_tokens", |txn, tables| {
            let now = tables.effective(now)?;
            let mut expiry = txn.open_table(TOKEN_EXPIRY)?;
            let mut intents = txn.open_table(TOKEN_INTENTS)?;
            let keys = tables::expired_keys(&expiry, now, batch)?;
            let take = keys.len().min(batch);
            for key in &keys[..take] {
                let (_, id_key) = tables::split_timed_key(key)?;
                let Some(entry) = tables.token(id_key)? else {
                    return Err(Error::Corrupt {
                        detail: format!(
                            "token expiry index names {}, which has no entry",
                            tables::describe_key(id_key)
                        ),
                    });
                };
                if let Some(intent_id) = &entry.intent_id {
                    let token_id = tables::decode_id(id_key)?;
                    let intent_key =
                        RecordId::new(token_id.tenant(), token_id.operation(), intent_id)?
                            .to_key_bytes();
                    let names_this = match intents.get(intent_key.as_slice())? {
                        Some(bytes) => bytes.value() == Token::parse(token_id.key())?.encode(),
                        None => false,
                    };
                    if names_this {
                        intents.remove(intent_key.as_slice())?;
                    }
                }
                tables.delete_token(id_key)?;
                expiry.remove(key.as_slice())?;
            }
            Ok(((take, keys.len() > take), take > 0))
        })?;
        report.removed += deleted as u64;
        let removed = usize::try_from(report.removed).unwrap_or(usize::MAX);
        if !more || removed >= limit {
            report.remaining_expired = more;
            return Ok(report);
        }
    }
}

/// Numbers for alerting at `now`; see [`crate::Store::stats`].
pub(crate) fn stats(writer: &Writer, now: Timestamp) -> Result<Stats, MaintainError> {
    let mut stats = guard_read(|_| stats_guarded(writer, now))?;
    stats.file_bytes = writer.size().map_err(MaintainError::FileSize)?;
    Ok(stats)
}

fn stats_guarded(writer: &Writer, now: Timestamp) -> Result<Stats, Error> {
    let db = writer.read();
    let txn = db.begin_read()?;
    let records = txn.open_table(RECORDS)?;
    let index = IndexReader::open(&txn)?;
    let mut counts = [0u64; 5];
    for (i, state) in State::ALL.into_iter().enumerate() {
        counts[i] = index.count(state)?;
    }
    let oldest_pending_age_ms = index
        .first(State::Pending)?
        .map(|created_at| now.millis_since(created_at));
    let mut pending_lease_expired = 0;
    index.visit(State::Pending, |_, id_key| {
        let record = tables::read_record(&records, id_key)?;
        if record
            .and_then(|r| r.lease_until())
            .is_some_and(|lease_until| now >= lease_until)
        {
            pending_lease_expired += 1;
        }
        Ok(ControlFlow::Continue(()))
    })?;
    // An Unknown record's age counts from when it became Unknown (its last update),
    // not from its creation: Unknown records are few, each read.
    let mut unknown_since: Option<Timestamp> = None;
    index.visit(State::Unknown, |_, id_key| {
        if let Some(record) = tables::read_record(&records, id_key)? {
            unknown_since =
                Some(unknown_since.map_or(record.updated_at, |t| t.min(record.updated_at)));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let expired = index.count_expired(now)?;
    Ok(Stats {
        pending: counts[0],
        succeeded: counts[1],
        failed: counts[2],
        unknown: counts[3],
        forgotten: counts[4],
        pending_lease_expired,
        expired,
        oldest_pending_age_ms,
        oldest_unknown_age_ms: unknown_since.map(|t| now.millis_since(t)),
        clock_floor: index.clock_floor()?,
        // Read after the snapshot, outside the guarded read.
        file_bytes: 0,
        generation: index.generation()?,
        intents: {
            let [
                queued,
                in_flight,
                completed,
                failed,
                conflict,
                expired,
                unknown,
            ] = count_intents_by_state(&txn)?;
            IntentCounts {
                queued,
                in_flight,
                completed,
                failed,
                conflict,
                expired,
                unknown,
            }
        },
    })
}

/// The clock floor; see [`crate::Store::clock_floor`].
pub(crate) fn clock_floor(writer: &Writer) -> Result<Timestamp, Error> {
    guard_read(|_| {
        let db = writer.read();
        let txn = db.begin_read()?;
        IndexReader::open(&txn)?.clock_floor()
    })
}

/// The store-wide generation counter: the last generation handed out.
pub(crate) fn generation(writer: &Writer) -> Result<Generation, Error> {
    guard_read(|_| {
        let db = writer.read();
        let txn = db.begin_read()?;
        IndexReader::open(&txn)?.generation()
    })
}

/// Verifies the file; see [`crate::Store::check`].
pub(crate) fn check(writer: &Writer) -> Result<CheckReport, Error> {
    writer.ensure_usable("check")?;
    let mut db = writer.exclusive()?;
    let redb_repaired = match db.writable_mut() {
        Some(writable) => !writable.check_integrity()?,
        None => return Err(Error::ReadOnly { operation: "check" }),
    };
    let txn = db.begin_read()?;
    let records = txn.open_table(RECORDS)?;
    let index = txn.open_table(INDEX)?;
    let meta = txn.open_table(META)?;
    let mut problems = Problems {
        listed: Vec::new(),
        more: 0,
    };
    match tables::read_meta(&meta, SCHEMA_KEY) {
        Ok(Some(SCHEMA_VERSION)) => {}
        Ok(other) => problems.push(format!(
            "meta schema is {other:?}, expected {SCHEMA_VERSION}"
        )),
        Err(e) => problems.push(e.to_string()),
    }
    let counter = match tables::read_meta(&index, GENERATION_KEY) {
        Ok(counter) => counter.unwrap_or(0),
        Err(e) => {
            problems.push(e.to_string());
            u64::MAX
        }
    };
    let mut counts = [0u64; 5];
    let mut total = 0u64;
    for entry in records.iter()? {
        let (key, bytes) = entry?;
        total += 1;
        let id_key = key.value();
        if let Err(e) = tables::decode_id(id_key) {
            problems.push(e.to_string());
        }
        let record = match tables::decode_record(id_key, bytes.value()) {
            Ok(record) => record,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let name = tables::describe_key(id_key);
        if record.generation.0 == 0 || record.generation.0 > counter {
            problems.push(format!(
                "record {name}: generation {} is outside 1..={counter} (the counter)",
                record.generation
            ));
        }
        let state = record.state();
        counts[tables::state_index(state)] += 1;
        if index
            .get(tables::index_key(id_key, &record).as_slice())?
            .is_none()
        {
            problems.push(format!("record {name}: missing from the {state} index"));
        }
    }
    // Every record has its entry (checked above); equal numbers of entries then mean
    // that no entry lacks a record.
    let mut entries = [0u64; 5];
    for entry in index.iter()? {
        let (key, _) = entry?;
        let key = key.value();
        match key
            .first()
            .map(|kind| (*kind, tables::state_of_kind(*kind)))
        {
            Some((tables::KIND_COUNTER, _)) => {}
            _ if key.len() < 9 => problems.push(format!(
                "index key {:?}: {} bytes, expected at least 9",
                String::from_utf8_lossy(key),
                key.len()
            )),
            Some((_, Some(state))) => entries[tables::state_index(state)] += 1,
            _ => problems.push(format!(
                "index key {:?}: kind byte {}, which names no state",
                String::from_utf8_lossy(key),
                key[0]
            )),
        }
    }
    for (i, state) in State::ALL.into_iter().enumerate() {
        if entries[i] != counts[i] {
            problems.push(format!(
                "{state} index holds {} entries for {} {state} records",
                entries[i], counts[i]
            ));
        }
        match tables::read_meta(&index, COUNT_KEYS[i]) {
            Ok(kept) if kept.unwrap_or(0) == counts[i] => {}
            Ok(kept) => problems.push(format!(
                "index count of {state} records is {}, but {} records are {state}",
                kept.unwrap_or(0),
                counts[i]
            )),
            Err(e) => problems.push(e.to_string()),
        }
    }
    let intents = check_intents(&txn, &mut |problem| problems.push(problem))?;
    crate::file::token::steps::check(&txn, &mut |problem| problems.push(problem))?;
    crate::file::entity::steps::check(&txn, &mut |problem| problems.push(problem))?;
    Ok(CheckReport {
        redb_repaired,
        records: total,
        intents,
        problems: problems.finish(),
    })
}

/// Compacts the file; see [`crate::Store::compact`].
pub(crate) fn compact(writer: &Writer) -> Result<bool, MaintainError> {
    writer.ensure_usable("compact")?;
    match writer.exclusive()?.writable_mut() {
        Some(db) => db.compact().map_err(MaintainError::from),
        None => Err(Error::ReadOnly {
            operation: "compact",
        }
        .into()),
    }
}
