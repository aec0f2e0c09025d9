//! Answers that need no write, given from a read snapshot: a begin on a key that is
//! settled, in progress, in conflict or unknown.
//!
//! A read snapshot holds only committed data, and these decisions write nothing, so
//! answering from it is what the write path would answer had it run at the moment of
//! the snapshot. It never waits for the write lock, and costs no write transaction.
//! Every other decision (a claim, a lease that expired) goes to the write path, where
//! it is made again under the write lock.
//!
//! The snapshot is [`Writer::records`]: in ExclusiveWriter mode one kept until this
//! process's next commit, otherwise a new one.
//!
//! Before the snapshot, the replay cache (`cache.rs`) is asked: a settled record it
//! holds answers the same decision without any redb transaction; a settled record read
//! here is kept in it.

use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Record, Timestamp, Transition, Write};

use crate::error::Error;
use crate::file::cache::ReplayCache;
use crate::file::schema as tables;
use crate::file::writer::Writer;

/// The decision of a begin on `id_key` when it writes nothing, from the replay cache or
/// a read snapshot; `None` when it would write (or the store needs a reopen: the write
/// path reopens it, or says why it cannot).
pub(crate) fn begin(
    writer: &Writer,
    cache: &ReplayCache,
    config: &Config,
    id_key: &[u8],
    fingerprint: Fingerprint,
    now: Timestamp,
) -> Result<Option<Decision>, Error> {
    // A settled outcome in memory is answered also while the store is failed (the
    // disk full): it was committed before the failure.
    if let Some(decision) = cached(cache, config, id_key, fingerprint, now) {
        return Ok(Some(decision));
    }
    if writer.needs_reopen() {
        return Ok(None);
    }
    let epoch = cache.epoch();
    let reading = writer.records()?;
    let Some(current) = tables::read_record(&*reading.records, id_key)? else {
        // Absent: a claim, which writes.
        return Ok(None);
    };
    let decision = decide_without_writing(&current, fingerprint, now, config);
    if decision.is_some() {
        // Kept only when settled (the cache refuses other states).
        cache.insert(id_key, &current, epoch);
    }
    Ok(decision)
}

/// [`begin`] for an input about to join a group commit; while batches follow one
/// another (`batching`, see `Committer::is_batching`) in the multi-process modes, the
/// replay cache alone.
///
/// There a read snapshot is a new redb read transaction per call (a file lock and a
/// read of the file's header, to see other processes' commits). With many callers
/// those took more of the cores than the batches themselves (64 callers on 2 cores:
/// 30,639-36,577 fresh inputs a second with them, 44,648-48,123 without), and for a
/// fresh key, most of a busy store's inputs, they answer nothing. A key the cache does
/// not hold then joins the next batch, whose transaction decides as the write path
/// does (the same core decision, at the clock floor's time), and the caller keeps a
/// settled record in the cache for the next retry. That answer waits as a write does:
/// for the batch before it and its own, each up to the lock timeout for the write lock
/// (so up to twice that when the running batch stalls just after the caller queued),
/// then [`Error::Busy`]; and a failed commit of its batch fails it too. A batch that
/// has run for long (`group::BATCHING_FOR`) is most likely waiting for
/// another process's lock, and callers then use the snapshot again; with no batch
/// running (one caller, the CLI), or inside a batch's own work, the snapshot answers as
/// before, without waiting for any writer. In ExclusiveWriter mode it always does, from
/// the snapshot kept until the next commit, which costs little.
pub(crate) fn before_batch(
    writer: &Writer,
    cache: &ReplayCache,
    config: &Config,
    id_key: &[u8],
    fingerprint: Fingerprint,
    now: Timestamp,
    batching: bool,
) -> Result<Option<Decision>, Error> {
    if writer.keeps_snapshot() || !batching {
        return begin(writer, cache, config, id_key, fingerprint, now);
    }
    Ok(cached(cache, config, id_key, fingerprint, now))
}

/// The decision on `id_key` from the replay cache, when it holds the key.
fn cached(
    cache: &ReplayCache,
    config: &Config,
    id_key: &[u8],
    fingerprint: Fingerprint,
    now: Timestamp,
) -> Option<Decision> {
    // Settled and live at `now` (the cache serves nothing else): Replay or Conflict,
    // which write nothing; see `cache.rs`.
    let record = cache.lookup(id_key, now)?;
    decide_without_writing(&record, fingerprint, now, config)
}

/// The core's begin on `current` when it writes nothing.
fn decide_without_writing(
    current: &Record,
    fingerprint: Fingerprint,
    now: Timestamp,
    config: &Config,
) -> Option<Decision> {
    // The core puts the next generation only into a claim, which writes and so is
    // never answered from here: the record's own generation stands in for it.
    let Transition { decision, write } =
        protocol::begin(Some(current), fingerprint, current.generation, now, config);
    matches!(write, Write::Nothing).then_some(decision)
}
