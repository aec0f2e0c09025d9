//! Reading the indexes, in the layout of the file's schema (old schemas included): the expired keys, the oldest entries, the counts.

use super::*;

/// The keys of `index` (a timed index: `time` ++ id bytes) whose time is at or before
/// `now`, oldest first, at most `batch + 1`: one more than a sweep takes, to tell whether
/// expired entries remain.
pub(crate) fn expired_keys(
    index: &impl ReadableTable<&'static [u8], ()>,
    now: Timestamp,
    batch: usize,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut keys = Vec::with_capacity(batch.min(SWEEP_CAPACITY) + 1);
    for entry in index.iter()? {
        let (key, _) = entry?;
        let (expires_at, _) = split_timed_key(key.value())?;
        if expires_at > now || keys.len() > batch {
            break;
        }
        keys.push(key.value().to_vec());
    }
    Ok(keys)
}

/// Visits the entries of `state` in a folded `index`, in key order (oldest first), as
/// (time, id bytes), until `visit` breaks.
fn visit_folded<F>(
    index: &impl ReadableTable<&'static [u8], &'static [u8]>,
    state: State,
    mut visit: F,
) -> Result<(), Error>
where
    F: FnMut(Timestamp, &[u8]) -> Result<ControlFlow<()>, Error>,
{
    let bounds = bounds(state);
    for entry in index.range(&bounds.start[..]..&bounds.end[..])? {
        let (key, _) = entry?;
        let (time, id_key) = split_timed_key(&key.value()[1..])?;
        if visit(time, id_key)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The entries of a folded `index` whose `expires_at` is at or before `now`, oldest
/// first, at most `batch + 1`, each as `expires_at` ++ id bytes: the expiry index is
/// the settled states' ranges, merged.
pub(super) fn expired_folded(
    index: &impl ReadableTable<&'static [u8], &'static [u8]>,
    now: Timestamp,
    batch: usize,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut keys = Vec::new();
    for state in EXPIRING {
        let mut taken = 0;
        visit_folded(index, state, |expires_at, id_key| {
            if expires_at > now || taken > batch {
                return Ok(ControlFlow::Break(()));
            }
            keys.push(timed_key(expires_at, id_key));
            taken += 1;
            Ok(ControlFlow::Continue(()))
        })?;
    }
    keys.sort_unstable();
    keys.truncate(batch.saturating_add(1));
    Ok(keys)
}

/// The most keys an expiry read reserves room for before it finds them.
const SWEEP_CAPACITY: usize = 1024;

/// The layout of a file's indexes, from its schema version.
enum Layout {
    /// Schema 3: [`INDEX`], opened.
    Folded(redb::ReadOnlyTable<&'static [u8], &'static [u8]>),
    /// Schema 1 and 2: [`LEGACY_EXPIRY`], [`LEGACY_STATES`], counters in meta.
    Split,
}

/// Reads the records' indexes and counters in one read transaction, in the layout the
/// file's schema names: a read-only store on a schema 1 or 2 file reads it as it is.
pub(crate) struct IndexReader<'t> {
    txn: &'t ReadTransaction,
    layout: Layout,
    meta: Option<redb::ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

impl<'t> IndexReader<'t> {
    /// The indexes of `txn`'s snapshot.
    pub(crate) fn open(txn: &'t ReadTransaction) -> Result<IndexReader<'t>, Error> {
        let meta = open_read(txn, META)?;
        let schema = match &meta {
            Some(meta) => read_meta(meta, SCHEMA_KEY)?,
            None => None,
        };
        let layout = match (schema, open_read(txn, INDEX)?) {
            // A read-only store stays open while another process may upgrade the file.
            (Some(schema), _) if schema > SCHEMA_VERSION => {
                return Err(Error::NewerSchema {
                    found: schema,
                    supported: SCHEMA_VERSION,
                });
            }
            (Some(schema), Some(index)) if schema >= FOLDED_SCHEMA => Layout::Folded(index),
            (Some(schema), None) if schema >= FOLDED_SCHEMA => {
                return Err(Error::Corrupt {
                    detail: format!("schema {schema} without the table idem.index"),
                });
            }
            _ => Layout::Split,
        };
        Ok(IndexReader { txn, layout, meta })
    }

    fn counter(&self, key: &[u8], legacy_key: &[u8]) -> Result<u64, Error> {
        let value = match (&self.layout, &self.meta) {
            (Layout::Folded(index), _) => read_meta(index, key)?,
            (Layout::Split, Some(meta)) => read_meta(meta, legacy_key)?,
            (Layout::Split, None) => None,
        };
        Ok(value.unwrap_or(0))
    }

    /// The last generation handed out (0 when none was).
    pub(crate) fn generation(&self) -> Result<Generation, Error> {
        self.counter(GENERATION_KEY, LEGACY_GENERATION_KEY)
            .map(Generation)
    }

    /// The clock floor (0 when no write of a record set it).
    pub(crate) fn clock_floor(&self) -> Result<Timestamp, Error> {
        self.counter(CLOCK_FLOOR_KEY, LEGACY_CLOCK_FLOOR_KEY)
            .map(Timestamp)
    }

    /// The number of records in `state`.
    pub(crate) fn count(&self, state: State) -> Result<u64, Error> {
        match &self.layout {
            Layout::Folded(index) => {
                Ok(read_meta(index, COUNT_KEYS[state_index(state)])?.unwrap_or(0))
            }
            // The table's length; a schema 1 file has no tombstone index.
            Layout::Split => match open_read(self.txn, LEGACY_STATES[state_index(state)])? {
                Some(table) => Ok(table.len()?),
                None => Ok(0),
            },
        }
    }

    /// Visits the records in `state`, in the order of their index (Pending and
    /// Unknown by `created_at`; settled records and tombstones by `created_at` in
    /// schemas 1 and 2, by `expires_at` in schema 3), as (time, id bytes), until
    /// `visit` breaks.
    pub(crate) fn visit(
        &self,
        state: State,
        mut visit: impl FnMut(Timestamp, &[u8]) -> Result<ControlFlow<()>, Error>,
    ) -> Result<(), Error> {
        match &self.layout {
            Layout::Folded(index) => visit_folded(index, state, visit),
            Layout::Split => {
                let Some(table) = open_read(self.txn, LEGACY_STATES[state_index(state)])? else {
                    return Ok(());
                };
                visit_legacy(&table, &mut visit)
            }
        }
    }

    /// The time of the first entry of `state`: for Pending and Unknown, the oldest
    /// `created_at`.
    pub(crate) fn first(&self, state: State) -> Result<Option<Timestamp>, Error> {
        let mut first = None;
        self.visit(state, |time, _| {
            first = Some(time);
            Ok(ControlFlow::Break(()))
        })?;
        Ok(first)
    }

    /// The settled records and tombstones whose `expires_at` is at or before `now`,
    /// oldest first, at most `batch + 1`, each as `expires_at` ++ id bytes.
    pub(crate) fn expired(&self, now: Timestamp, batch: usize) -> Result<Vec<Vec<u8>>, Error> {
        match &self.layout {
            Layout::Folded(index) => expired_folded(index, now, batch),
            Layout::Split => match open_read(self.txn, LEGACY_EXPIRY)? {
                Some(expiry) => expired_keys(&expiry, now, batch),
                None => Ok(Vec::new()),
            },
        }
    }

    /// How many settled records and tombstones expired at `now`.
    pub(crate) fn count_expired(&self, now: Timestamp) -> Result<u64, Error> {
        let mut expired = 0;
        let mut count = |expires_at: Timestamp, _: &[u8]| {
            if expires_at > now {
                return Ok(ControlFlow::Break(()));
            }
            expired += 1;
            Ok(ControlFlow::Continue(()))
        };
        match &self.layout {
            Layout::Folded(index) => {
                for state in EXPIRING {
                    visit_folded(index, state, &mut count)?;
                }
            }
            Layout::Split => {
                if let Some(expiry) = open_read(self.txn, LEGACY_EXPIRY)? {
                    visit_legacy(&expiry, &mut count)?;
                }
            }
        }
        Ok(expired)
    }
}

/// Visits a schema 1 or 2 timed index (`time` ++ id bytes → ()) in key order.
fn visit_legacy(
    table: &impl ReadableTable<&'static [u8], ()>,
    visit: &mut impl FnMut(Timestamp, &[u8]) -> Result<ControlFlow<()>, Error>,
) -> Result<(), Error> {
    for entry in table.iter()? {
        let (key, _) = entry?;
        let (time, id_key) = split_timed_key(key.value())?;
        if visit(time, id_key)?.is_break() {
            break;
        }
    }
    Ok(())
}
