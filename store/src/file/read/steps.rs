//! Reading records: one record by id, and the records that match a [`ListFilter`],
//! streamed from one snapshot.

use std::ops::ControlFlow;

use idem_core::{Record, RecordId};

use crate::error::Error;
use crate::file::cache::ReplayCache;
use crate::file::handle::{Caller, guard_read};
use crate::file::schema::{self as tables, RECORDS};
use crate::file::writer::Writer;
use crate::seam::filter::ListFilter;

/// The record under `id`, if any, from the latest commit: from the replay cache when it
/// holds the record, else from a read snapshot ([`Writer::records`]; a settled record
/// read there is kept in the cache).
///
/// # Why a cached record is the one the file holds
///
/// The cache holds only settled records, and serves one only while its `expires_at` is
/// above the cache's horizon, the latest `now` any caller of this process passed to a
/// lookup or a sweep (see `cache.rs`). A settled record changes only once it has
/// expired: in this process, a begin or a sweep that could replace or delete it first
/// raises the horizon to its `now`, at or past `expires_at`, so the entry is never
/// served again; resolve, complete, heartbeat, release and mark_unknown never apply to
/// a settled record; an import removes the entries of the keys it wrote, and a read
/// from before the import is not inserted after it (the epoch). So in one process a
/// record served here is the one the latest commit holds.
///
/// With several processes, another one may delete or claim again a record once it has
/// expired by that process's clock, which may be ahead of every clock this process was
/// given. Until this process's own callers reach `expires_at`, a `get` here may still
/// answer the settled record: what it read a moment before the other process's commit,
/// exactly as a begin here replays it (`cache.rs`). Nothing is served past its expiry
/// by this process's clocks, so the cache never extends retention; a caller that needs
/// the file's bytes at this instant with skewed clocks in other processes opens the
/// store with `replay_cache(0)`.
pub(crate) fn get(
    writer: &Writer,
    cache: &ReplayCache,
    id: &RecordId,
) -> Result<Option<Record>, Error> {
    let id_key = id.to_key_bytes();
    if let Some(cached) = cache.live(&id_key) {
        return Ok(Some(Record::clone(&cached)));
    }
    let epoch = cache.epoch();
    let record = guard_read(|_| tables::read_record(&*writer.records()?.records, &id_key))?;
    if let Some(record) = &record {
        // Kept only when settled and not expired by the horizon (the cache decides).
        cache.insert(&id_key, record, epoch);
    }
    Ok(record)
}

/// Visits the records that match `filter`; see [`crate::Store::list`].
pub(crate) fn list(
    writer: &Writer,
    filter: &ListFilter,
    visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
) -> Result<(), Error> {
    filter.validate()?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return Ok(());
    }
    guard_read(|caller| list_guarded(writer, filter, limit, caller, visit))
}

fn list_guarded(
    writer: &Writer,
    filter: &ListFilter,
    limit: usize,
    caller: &mut Caller,
    mut visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
) -> Result<(), Error> {
    let db = writer.read();
    let txn = db.begin_read()?;
    let records = txn.open_table(RECORDS)?;
    let mut seen = 0usize;
    let mut offer = |id_key: &[u8], bytes: &[u8]| -> Result<ControlFlow<()>, Error> {
        let id = tables::decode_id(id_key)?;
        if !filter.matches(&id) {
            return Ok(ControlFlow::Continue(()));
        }
        let record = tables::decode_record(id_key, bytes)?;
        seen += 1;
        let visited = caller.call(|| visit(id, record));
        if visited.is_none_or(|flow| flow.is_break()) || seen >= limit {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    };
    match filter.state {
        Some(state) => {
            // A schema 1 or 2 file read before any writable open is read in its own
            // layout (`IndexReader`).
            let index = tables::IndexReader::open(&txn)?;
            index.visit(state, |_, id_key| {
                let Some(bytes) = records.get(id_key)? else {
                    return Err(Error::Corrupt {
                        detail: format!(
                            "{state} index names {}, which has no record",
                            tables::describe_key(id_key)
                        ),
                    });
                };
                offer(id_key, bytes.value())
            })?;
        }
        None => {
            let prefix = RecordId::prefix(filter.tenant.as_deref(), filter.operation.as_deref());
            for entry in records.range(prefix.as_slice()..)? {
                let (key, bytes) = entry?;
                if !key.value().starts_with(&prefix) {
                    break;
                }
                if offer(key.value(), bytes.value())?.is_break() {
                    break;
                }
            }
        }
    }
    Ok(())
}
