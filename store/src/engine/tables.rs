//! The file layout: which redb tables hold what, the bytes of their keys, and the one
//! function that writes a record and keeps its index in step with it.
//!
//! Schema 3, written by this build:
//!
//! | table | key | value |
//! |---|---|---|
//! | `idem.records` | [`RecordId::to_key_bytes`] | [`Record::encode`] (format byte + postcard) |
//! | `idem.index` | see below | see below |
//! | `idem.meta` | `b"schema"` (and the outbox's `b"intent.rng"`) | u64 big-endian, bytes |
//! | `idem.tokens` | [`RecordId::to_key_bytes`] of `(tenant, operation, token)` | [`IssuedToken::encode`] |
//! | `idem.token.expiry` | `expires_at` (u64 big-endian) ++ token id bytes | `()` |
//! | `idem.token.intents` | [`RecordId::to_key_bytes`] of `(tenant, operation, intent id)` | [`idem_core::Token::encode`] |
//!
//! `idem.index` holds every index of the records and their counters, each kind under
//! its own first byte, so that a kind is one contiguous key range:
//!
//! | kind byte | rest of the key | value | what |
//! |---|---|---|---|
//! | `0x01` | `created_at` (u64 BE) ++ id bytes | empty | Unknown records |
//! | `0x02` | `expires_at` (u64 BE) ++ id bytes | empty | tombstones (Forgotten) |
//! | `0x03` | `expires_at` ++ id bytes | empty | Failed records |
//! | `0x04` | `expires_at` ++ id bytes | empty | Succeeded records |
//! | `0x05` | `b"generation"`, `b"clock_floor"`, `b"count."` ++ state name | u64 BE | the counters |
//! | `0x06` | `created_at` ++ id bytes | empty | Pending records |
//!
//! A record has exactly one entry ([`index_key`]). The settled states and tombstones
//! are keyed by `expires_at`, so together they are the expiry index: sweep reads the
//! three ranges up to `now` and merges them ([`IndexReader::expired`],
//! [`Tables::expired`]). Pending and Unknown records never expire and are keyed by
//! `created_at`, so the first Pending entry is the oldest.
//!
//! Why one table: redb copies every B-tree a commit modifies from the changed leaf up
//! to its root, and the table of tables once more for each, so the pages a commit
//! writes (and its fsync flushes) grow with the number of tables, and of leaves, it
//! touches. Schema 2 kept an expiry table, five state tables and the counters in
//! `idem.meta`: an execute of a fresh key modified four B-trees (records, expiry, a
//! state table, meta) and five leaves. In schema 3 it modifies two B-trees,
//! `idem.records` and `idem.index`, and in the index most often one leaf: a settling
//! commit appends its entry at the end of the Succeeded range (its `expires_at` is the
//! latest yet, for one retention), which is where the counters sit, and the few
//! Pending entries, inserted by a begin and removed by its complete, follow them. So
//! the kind bytes are ordered to put the hot keys side by side: the counters between
//! the newest Succeeded entries and the Pending ones. A split of that leaf falls among
//! its older Succeeded entries (the counters and a few Pending entries are a small
//! part of a leaf), so the appends and the counters stay in one leaf; many Pending
//! records at once spread their range over more leaves, as any index would.
//!
//! Counts by state: schema 2 answered them with the state tables' lengths, which redb
//! keeps. One table's length no longer tells them apart, so the index keeps a count
//! per state (`count.<state>`), moved by [`Tables::put`] and [`Tables::delete`] in
//! memory ([`Counters`]) and written at the commit with the generation counter, in the
//! same transaction as the records they count. [`crate::Store::stats`] reads them and
//! never scans; [`crate::Store::check`] counts the records and compares.
//!
//! Every key and value is our own byte string: the file never depends on redb's
//! encodings of composite types, which have changed between redb majors. Big-endian
//! numbers make each range sort by time.
//!
//! ## Older schemas
//!
//! Schema 1 and 2 files (the layout of [`LEGACY_EXPIRY`], [`LEGACY_STATES`] and the
//! counters in `idem.meta` under [`LEGACY_GENERATION_KEY`] and
//! [`LEGACY_CLOCK_FLOOR_KEY`]) are upgraded by the first writable open, in one
//! transaction ([`upgrade`]): the index is rebuilt from the records, the counters move,
//! the old tables are deleted, and schema 3 is recorded. A crash before its commit
//! leaves the old file as it was.
//!
//! A read-only open never writes, so it reads an old file in its own layout: every
//! read of the indexes goes through [`IndexReader`], which reads the schema in its
//! read transaction and takes the layout it names ([`Layout`]). Choosing per read
//! transaction, not per open, keeps a read-only store that was opened on a schema 2
//! file correct after another process's writable open upgrades it. Writes only ever
//! see schema 3: a writable open upgrades before anything else. As with every upgrade,
//! the processes that write one file run builds of one schema: an older build refuses
//! an upgraded file at its open. Reading the old layout costs a small enum and the old
//! table definitions; converting in memory at each read-only open would cost a scan of
//! every record instead.

use std::cell::Cell;
use std::ops::ControlFlow;

use idem_core::{Generation, IssuedToken, Record, RecordId, State, Timestamp, Write};
use redb::{
    ReadTransaction, ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction,
};

use crate::error::Error;

/// The schema version this build writes. A file with a newer one is refused.
///
/// Schema 2 added tombstones: records of format 2 and the `idem.state.forgotten` index.
/// Schema 3 folded the expiry and state indexes and the counters into `idem.index`
/// (see the module's documentation). Schema 4 has the tables of schema 3, and a store
/// file of schema 4 may have a journal beside it (`<file>-journal`, see `journal.rs`)
/// holding commits not yet written into the file, which a build that knows no journal
/// would miss. A file of an older schema is read as it is and upgraded by the first
/// writable open, in one transaction (from schema 3, only the version changes); from
/// then on builds that read only older schemas refuse the file instead of misreading
/// it.
pub(crate) const SCHEMA_VERSION: u64 = 4;

/// The oldest schema version this build reads.
pub(crate) const OLDEST_SCHEMA: u64 = 1;

/// The first schema whose indexes are folded into [`INDEX`].
const FOLDED_SCHEMA: u64 = 3;

/// Record id bytes → record bytes.
pub(crate) const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.records");
/// The records' indexes and counters, each kind under its first byte; see the module.
pub(crate) const INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.index");
/// Token id bytes → issued-token bytes.
pub(crate) const TOKENS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.tokens");
/// `expires_at` ++ token id bytes → (), for every issued token.
pub(crate) const TOKEN_EXPIRY: TableDefinition<&[u8], ()> =
    TableDefinition::new("idem.token.expiry");
/// Intent id bytes (tenant, operation, intent id) → the token issued for it.
pub(crate) const TOKEN_INTENTS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("idem.token.intents");
/// Schema version (and the outbox's generator state).
pub(crate) const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");

/// Schema 1 and 2: `expires_at` ++ id bytes → (), for every settled record.
pub(crate) const LEGACY_EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("idem.expiry");
/// Schema 1 and 2: one index per state, in the order of [`State::ALL`]: `created_at` ++
/// id bytes → (). Schema 1 files have no `idem.state.forgotten`.
pub(crate) const LEGACY_STATES: [TableDefinition<&[u8], ()>; 5] = [
    TableDefinition::new("idem.state.pending"),
    TableDefinition::new("idem.state.succeeded"),
    TableDefinition::new("idem.state.failed"),
    TableDefinition::new("idem.state.unknown"),
    TableDefinition::new("idem.state.forgotten"),
];
/// Schema 1 and 2: meta key of the generation counter.
pub(crate) const LEGACY_GENERATION_KEY: &[u8] = b"generation";
/// Schema 1 and 2: meta key of the clock floor (absent in the oldest files: 0).
pub(crate) const LEGACY_CLOCK_FLOOR_KEY: &[u8] = b"clock_floor";

/// Meta key of the schema version.
pub(crate) const SCHEMA_KEY: &[u8] = b"schema";

/// Kind byte of the Unknown records' entries in [`INDEX`] (by `created_at`).
pub(crate) const KIND_UNKNOWN: u8 = 0x01;
/// Kind byte of the tombstones' entries (by `expires_at`).
pub(crate) const KIND_FORGOTTEN: u8 = 0x02;
/// Kind byte of the Failed records' entries (by `expires_at`).
pub(crate) const KIND_FAILED: u8 = 0x03;
/// Kind byte of the Succeeded records' entries (by `expires_at`).
pub(crate) const KIND_SUCCEEDED: u8 = 0x04;
/// Kind byte of the counters.
pub(crate) const KIND_COUNTER: u8 = 0x05;
/// Kind byte of the Pending records' entries (by `created_at`).
pub(crate) const KIND_PENDING: u8 = 0x06;

/// Index key of the store-wide generation counter (the last generation handed out).
pub(crate) const GENERATION_KEY: &[u8] = b"\x05generation";
/// Index key of the clock floor: the latest time a write of a record used, in ms.
pub(crate) const CLOCK_FLOOR_KEY: &[u8] = b"\x05clock_floor";
/// Index keys of the number of records in each state, in the order of [`State::ALL`].
pub(crate) const COUNT_KEYS: [&[u8]; 5] = [
    b"\x05count.pending",
    b"\x05count.succeeded",
    b"\x05count.failed",
    b"\x05count.unknown",
    b"\x05count.forgotten",
];

/// The states whose entries are keyed by `expires_at`: together, the expiry index.
pub(crate) const EXPIRING: [State; 3] = [State::Forgotten, State::Failed, State::Succeeded];

/// The position of `state` in [`State::ALL`].
pub(crate) fn state_index(state: State) -> usize {
    match state {
        State::Pending => 0,
        State::Succeeded => 1,
        State::Failed => 2,
        State::Unknown => 3,
        State::Forgotten => 4,
    }
}

/// The kind byte of `state`'s entries in [`INDEX`].
pub(crate) fn kind(state: State) -> u8 {
    match state {
        State::Pending => KIND_PENDING,
        State::Succeeded => KIND_SUCCEEDED,
        State::Failed => KIND_FAILED,
        State::Unknown => KIND_UNKNOWN,
        State::Forgotten => KIND_FORGOTTEN,
    }
}

/// The state whose entries have the kind byte `kind`, if any.
pub(crate) fn state_of_kind(kind_byte: u8) -> Option<State> {
    State::ALL.into_iter().find(|s| kind(*s) == kind_byte)
}

/// The key of `record`'s entry in [`INDEX`]: its state's kind byte, then its
/// `expires_at` (settled records and tombstones) or `created_at` (Pending and Unknown)
/// big-endian, then the id bytes.
pub(crate) fn index_key(id_key: &[u8], record: &Record) -> Vec<u8> {
    let time = record.expires_at().unwrap_or(record.created_at);
    let mut out = Vec::with_capacity(9 + id_key.len());
    out.push(kind(record.state()));
    out.extend_from_slice(&time.as_millis().to_be_bytes());
    out.extend_from_slice(id_key);
    out
}

/// The key range of `state`'s entries in [`INDEX`].
fn bounds(state: State) -> std::ops::Range<[u8; 1]> {
    [kind(state)]..[kind(state) + 1]
}

/// `time` big-endian, then the id bytes: a key of the token expiry index, and of the
/// old schemas' expiry and state indexes.
pub(crate) fn timed_key(time: Timestamp, id_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + id_key.len());
    out.extend_from_slice(&time.as_millis().to_be_bytes());
    out.extend_from_slice(id_key);
    out
}

/// Splits a key made by [`timed_key`].
pub(crate) fn split_timed_key(key: &[u8]) -> Result<(Timestamp, &[u8]), Error> {
    match key.split_first_chunk::<8>() {
        Some((time, id)) => Ok((Timestamp(u64::from_be_bytes(*time)), id)),
        None => Err(Error::Corrupt {
            detail: format!("index key of {} bytes, expected at least 8", key.len()),
        }),
    }
}

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
fn expired_folded(
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

/// Decodes a u64 stored in the meta table or among the index's counters.
pub(crate) fn decode_u64(name: &str, bytes: &[u8]) -> Result<u64, Error> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| Error::Corrupt {
        detail: format!("meta {name}: {} bytes, expected 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(array))
}

/// Decodes record bytes read from the file, naming the record in the error.
pub(crate) fn decode_record(id_key: &[u8], bytes: &[u8]) -> Result<Record, Error> {
    Record::decode(bytes).map_err(|source| Error::Decode {
        what: format!("record {}", describe_key(id_key)),
        source,
    })
}

/// Decodes record id bytes read from the file.
pub(crate) fn decode_id(id_key: &[u8]) -> Result<RecordId, Error> {
    RecordId::from_key_bytes(id_key).map_err(|source| Error::Decode {
        what: format!("record id {}", describe_key(id_key)),
        source,
    })
}

/// A readable name for id bytes, valid or not.
pub(crate) fn describe_key(id_key: &[u8]) -> String {
    match RecordId::from_key_bytes(id_key) {
        Ok(id) => id.to_string(),
        Err(_) => format!("{:?}", String::from_utf8_lossy(id_key)),
    }
}

/// Opens a table for reading; `None` when no write created it yet (a table added after
/// the file was written, read before a writable open).
pub(crate) fn open_read<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &redb::ReadTransaction,
    table: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>, Error> {
    match txn.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reads and decodes the record under `id_key` from any readable records table.
pub(crate) fn read_record(
    records: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id_key: &[u8],
) -> Result<Option<Record>, Error> {
    match records.get(id_key)? {
        Some(bytes) => decode_record(id_key, bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// Reads and decodes the issued token under `id_key` from any readable tokens table.
pub(crate) fn read_token(
    tokens: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id_key: &[u8],
) -> Result<Option<IssuedToken>, Error> {
    match tokens.get(id_key)? {
        Some(bytes) => IssuedToken::decode(bytes.value())
            .map(Some)
            .map_err(|source| Error::Decode {
                what: format!("issued token {}", describe_key(id_key)),
                source,
            }),
        None => Ok(None),
    }
}

/// Reads a u64 from any readable meta table, or from the index's counters.
pub(crate) fn read_meta(
    meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &[u8],
) -> Result<Option<u64>, Error> {
    match meta.get(key)? {
        Some(bytes) => decode_u64(
            String::from_utf8_lossy(key).trim_start_matches('\0'),
            bytes.value(),
        )
        .map(Some),
        None => Ok(None),
    }
}

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

/// Rewrites the indexes of a file of schema `from` in this schema's layout, in `txn`
/// (the writable open's, which records the schema after this); nothing from schema 3
/// on, whose tables are this schema's. From schema 1 or 2: builds [`INDEX`] from the
/// records, moves the counters out of meta, counts the records by state, and deletes
/// the old tables. The records themselves are not rewritten.
///
/// A record whose bytes do not decode is kept as it is, without an index entry and
/// uncounted: it does not stop the file from opening, and `check` names it, as it did
/// before the upgrade.
pub(crate) fn upgrade(txn: &WriteTransaction, from: u64) -> Result<(), Error> {
    if from >= FOLDED_SCHEMA {
        // The tables are already this schema's.
        return Ok(());
    }
    let mut index = txn.open_table(INDEX)?;
    let mut counts = [0u64; 5];
    {
        let records = txn.open_table(RECORDS)?;
        for entry in records.iter()? {
            let (key, bytes) = entry?;
            let id_key = key.value();
            let Ok(record) = decode_record(id_key, bytes.value()) else {
                continue;
            };
            counts[state_index(record.state())] += 1;
            index.insert(index_key(id_key, &record).as_slice(), &[][..])?;
        }
    }
    {
        let mut meta = txn.open_table(META)?;
        for (legacy, key) in [
            (LEGACY_GENERATION_KEY, GENERATION_KEY),
            (LEGACY_CLOCK_FLOOR_KEY, CLOCK_FLOOR_KEY),
        ] {
            let value = read_meta(&meta, legacy)?.unwrap_or(0);
            index.insert(key, &value.to_be_bytes()[..])?;
            meta.remove(legacy)?;
        }
    }
    for (key, count) in COUNT_KEYS.iter().zip(counts) {
        index.insert(*key, &count.to_be_bytes()[..])?;
    }
    drop(index);
    txn.delete_table(LEGACY_EXPIRY)?;
    for table in LEGACY_STATES {
        txn.delete_table(table)?;
    }
    Ok(())
}

/// The store's tables in one write transaction, each opened the first time it is used.
///
/// Caller code that gets the same transaction while these are open (the work of an
/// atomic execute) may open any other table, but not these: redb refuses to open one
/// table twice in a transaction.
///
/// Opening a table costs a lookup in redb's table of tables, and closing it another at
/// the commit, so a table is opened only when an input needs it: an execute of a fresh
/// key touches the records and the index, not the tokens. A group transaction opens
/// each once for all its inputs.
///
/// The generation counter, the clock floor and the counts by state live in
/// [`Counters`]: each read from the index once per transaction, moved in memory, and
/// written to the index once, by [`crate::engine::writer::Writer::commit`] just before the
/// commit (every commit of a write transaction goes through it), instead of once per
/// input. A group transaction of 64 inputs saves 63 rewrites of each.
///
/// Time never goes backwards for the records: a write uses [`Tables::effective`], the
/// caller's time or the clock floor, whichever is later, and then raises the floor to
/// it with [`Tables::raise_floor`] (DESIGN §2, "Time").
pub(crate) struct Tables<'txn> {
    txn: &'txn WriteTransaction,
    counters: &'txn Counters,
    records: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    index: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    meta: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    tokens: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    // False only where a test shows what the floor prevents.
    floored: bool,
}

/// The generation counter, the clock floor and the counts by state of one write
/// transaction, as this transaction sees them: the counter and floor read from the
/// index the first time they are needed and raised here, the counts kept as changes,
/// and all put into the index by [`Counters::write`]. See [`Tables`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    generation: Cell<Option<Generation>>,
    floor: Cell<Option<Timestamp>>,
    generation_raised: Cell<bool>,
    floor_raised: Cell<bool>,
    // Records entered minus records left, per state, in this transaction.
    counts: [Cell<i64>; 5],
}

/// The generation counter and clock floor of the latest commit, each when known: what a
/// process that alone writes the file carries from one transaction to the next
/// ([`Counters::seeded`]), so that a transaction does not read them again.
pub(crate) type Known = (Option<Generation>, Option<Timestamp>);

impl Counters {
    /// Counters whose generation counter and clock floor start at `known` (as if read
    /// from the index), for a transaction of a process that alone writes the file: no
    /// other commit can have changed them since the one they come from.
    pub(crate) fn seeded(known: Known) -> Counters {
        let counters = Counters::default();
        counters.generation.set(known.0);
        counters.floor.set(known.1);
        counters
    }

    /// The generation counter and clock floor as this transaction's commit leaves them,
    /// where it read or raised them; the rest from `before`, which it left alone.
    pub(crate) fn known_after(&self, before: Known) -> Known {
        (
            self.generation.get().or(before.0),
            self.floor.get().or(before.1),
        )
    }

    fn count(&self, state: State, by: i64) {
        let cell = &self.counts[state_index(state)];
        cell.set(cell.get() + by);
    }

    /// Puts the raised counter and floor and the changed counts into the index in
    /// `txn`: called just before the commit, with the transaction's [`Tables`] closed.
    pub(crate) fn write(&self, txn: &WriteTransaction) -> Result<(), Error> {
        if !self.changed() {
            return Ok(());
        }
        self.write_into(&mut txn.open_table(INDEX)?)
    }

    /// Whether anything is left for [`Counters::write`] to put.
    fn changed(&self) -> bool {
        self.generation_raised.get()
            || self.floor_raised.get()
            || self.counts.iter().any(|c| c.get() != 0)
    }

    /// [`Counters::write`] into `index`, already open; what it wrote is not written again.
    fn write_into(&self, index: &mut Table<'_, &'static [u8], &'static [u8]>) -> Result<(), Error> {
        if let (true, Some(generation)) = (self.generation_raised.get(), self.generation.get()) {
            index.insert(GENERATION_KEY, &generation.0.to_be_bytes()[..])?;
        }
        if let (true, Some(floor)) = (self.floor_raised.get(), self.floor.get()) {
            index.insert(CLOCK_FLOOR_KEY, &floor.as_millis().to_be_bytes()[..])?;
        }
        for (key, change) in COUNT_KEYS.iter().zip(&self.counts) {
            if change.get() == 0 {
                continue;
            }
            let old = read_meta(&*index, key)?.unwrap_or(0);
            let new = old
                .checked_add_signed(change.get())
                .ok_or_else(|| Error::Corrupt {
                    detail: format!(
                        "index {}: {old} records changed by {}",
                        String::from_utf8_lossy(&key[1..]),
                        change.get()
                    ),
                })?;
            index.insert(*key, &new.to_be_bytes()[..])?;
            change.set(0);
        }
        self.generation_raised.set(false);
        self.floor_raised.set(false);
        Ok(())
    }
}

/// `slot`'s table, opened in `txn` (created when absent) on first use.
fn opened<'s, 'txn, K, V>(
    slot: &'s mut Option<Table<'txn, K, V>>,
    txn: &'txn WriteTransaction,
    definition: TableDefinition<K, V>,
) -> Result<&'s mut Table<'txn, K, V>, Error>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    if slot.is_none() {
        *slot = Some(txn.open_table(definition)?);
    }
    Ok(slot.as_mut().expect("opened just above"))
}

impl<'txn> Tables<'txn> {
    /// Opens (creating when absent) every table of the store, with the clock floor on:
    /// what initializing a file needs, so that every table exists for the readers.
    /// The counters go to `counters`, which this transaction's commit must write
    /// ([`Counters::write`]); initializing a file raises none.
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        counters: &'txn Counters,
    ) -> Result<Tables<'txn>, Error> {
        let mut tables = Tables::open_floored(txn, counters, true);
        tables.records()?;
        tables.index()?;
        tables.meta()?;
        tables.tokens()?;
        Ok(tables)
    }

    /// The tables of `txn`, none opened yet, with the counters in `counters` (which
    /// the commit writes) and the clock floor on or (for a test) off.
    pub(crate) fn open_floored(
        txn: &'txn WriteTransaction,
        counters: &'txn Counters,
        floored: bool,
    ) -> Tables<'txn> {
        Tables {
            txn,
            counters,
            records: None,
            index: None,
            meta: None,
            tokens: None,
            floored,
        }
    }

    fn records(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.records, self.txn, RECORDS)
    }

    fn index(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.index, self.txn, INDEX)
    }

    /// Puts what the counters hold so far into the index while it is open, so that the
    /// commit's [`Counters::write`] need not open it again (it writes only what changes
    /// after this). For the end of a transaction's work on the store's tables.
    pub(crate) fn write_counters(&mut self) -> Result<(), Error> {
        if !self.counters.changed() {
            return Ok(());
        }
        let counters = self.counters;
        counters.write_into(self.index()?)
    }

    fn meta(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.meta, self.txn, META)
    }

    fn tokens(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.tokens, self.txn, TOKENS)
    }

    /// The settled records and tombstones whose `expires_at` is at or before `now`
    /// (the entries of the [`EXPIRING`] states), oldest first, at most `batch + 1` (one more than a sweep takes, to tell whether expired entries
    /// remain), each as `expires_at` ++ id bytes ([`split_timed_key`] splits it).
    pub(crate) fn expired(&mut self, now: Timestamp, batch: usize) -> Result<Vec<Vec<u8>>, Error> {
        expired_folded(self.index()?, now, batch)
    }

    /// The record under `id_key`.
    pub(crate) fn get(&mut self, id_key: &[u8]) -> Result<Option<Record>, Error> {
        read_record(self.records()?, id_key)
    }

    /// The last generation handed out (0 when none was).
    pub(crate) fn generation(&mut self) -> Result<Generation, Error> {
        if let Some(generation) = self.counters.generation.get() {
            return Ok(generation);
        }
        let generation = Generation(read_meta(self.index()?, GENERATION_KEY)?.unwrap_or(0));
        self.counters.generation.set(Some(generation));
        Ok(generation)
    }

    /// The generation a claim gets now: the counter plus one.
    pub(crate) fn next_generation(&mut self) -> Result<Generation, Error> {
        let current = self.generation()?;
        current
            .0
            .checked_add(1)
            .map(Generation)
            .ok_or(Error::GenerationsExhausted)
    }

    /// Raises the counter to `generation`; never lowers it.
    pub(crate) fn raise_generation(&mut self, generation: Generation) -> Result<(), Error> {
        if generation > self.generation()? {
            self.counters.generation.set(Some(generation));
            self.counters.generation_raised.set(true);
        }
        Ok(())
    }

    /// The clock floor: the latest time a write of a record used (0 when none did).
    pub(crate) fn clock_floor(&mut self) -> Result<Timestamp, Error> {
        if let Some(floor) = self.counters.floor.get() {
            return Ok(floor);
        }
        let floor = Timestamp(read_meta(self.index()?, CLOCK_FLOOR_KEY)?.unwrap_or(0));
        self.counters.floor.set(Some(floor));
        Ok(floor)
    }

    /// The time a write at the caller's `now` uses: `now`, or the clock floor when the
    /// clock is behind it.
    pub(crate) fn effective(&mut self, now: Timestamp) -> Result<Timestamp, Error> {
        if !self.floored {
            return Ok(now);
        }
        Ok(now.max(self.clock_floor()?))
    }

    /// Raises the clock floor to `at`, the time a write just used; never lowers it.
    pub(crate) fn raise_floor(&mut self, at: Timestamp) -> Result<(), Error> {
        if self.floored && at > self.clock_floor()? {
            self.counters.floor.set(Some(at));
            self.counters.floor_raised.set(true);
        }
        Ok(())
    }

    /// The schema version recorded in the file, if any.
    pub(crate) fn schema(&mut self) -> Result<Option<u64>, Error> {
        read_meta(self.meta()?, SCHEMA_KEY)
    }

    /// Records the schema version of this build.
    pub(crate) fn set_schema(&mut self) -> Result<(), Error> {
        self.meta()?
            .insert(SCHEMA_KEY, &SCHEMA_VERSION.to_be_bytes()[..])?;
        Ok(())
    }

    /// True when the records table holds nothing.
    pub(crate) fn is_empty(&mut self) -> Result<bool, Error> {
        Ok(self.records()?.is_empty()?)
    }

    /// Applies a core [`Write`] to the record under `id_key`, whose value in this
    /// transaction is `old`. Returns true when something changed.
    pub(crate) fn apply(
        &mut self,
        id_key: &[u8],
        old: Option<&Record>,
        write: &Write,
    ) -> Result<bool, Error> {
        match write {
            Write::Nothing => Ok(false),
            Write::Put(new) => {
                self.put(id_key, old, new)?;
                Ok(true)
            }
            Write::Delete => match old {
                Some(old) => {
                    self.delete(id_key, old)?;
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// Stores `new` under `id_key` (replacing `old`) and moves its index entries and
    /// counts.
    pub(crate) fn put(
        &mut self,
        id_key: &[u8],
        old: Option<&Record>,
        new: &Record,
    ) -> Result<(), Error> {
        if let Some(old) = old {
            self.unindex(id_key, old)?;
        }
        self.records()?.insert(id_key, new.encode().as_slice())?;
        self.index()?
            .insert(index_key(id_key, new).as_slice(), &[][..])?;
        self.counters.count(new.state(), 1);
        Ok(())
    }

    /// Removes the record `old` under `id_key` with its index entries.
    pub(crate) fn delete(&mut self, id_key: &[u8], old: &Record) -> Result<(), Error> {
        self.unindex(id_key, old)?;
        self.records()?.remove(id_key)?;
        Ok(())
    }

    fn unindex(&mut self, id_key: &[u8], old: &Record) -> Result<(), Error> {
        self.index()?.remove(index_key(id_key, old).as_slice())?;
        self.counters.count(old.state(), -1);
        Ok(())
    }

    /// The issued token under `id_key`, if any.
    pub(crate) fn token(&mut self, id_key: &[u8]) -> Result<Option<IssuedToken>, Error> {
        read_token(self.tokens()?, id_key)
    }

    /// Stores an issued token's entry (its expiry index is the caller's).
    pub(crate) fn put_token(&mut self, id_key: &[u8], entry: &IssuedToken) -> Result<(), Error> {
        self.tokens()?.insert(id_key, entry.encode().as_slice())?;
        Ok(())
    }

    /// Removes an issued token's entry.
    pub(crate) fn delete_token(&mut self, id_key: &[u8]) -> Result<(), Error> {
        self.tokens()?.remove(id_key)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableHandle;

    #[test]
    fn timed_keys_sort_by_time_then_id() {
        let a = timed_key(Timestamp(5), b"\x01a\x01bz");
        let b = timed_key(Timestamp(6), b"\x01a\x01ba");
        let c = timed_key(Timestamp(256), b"\x01a\x01ba");
        assert!(a < b && b < c);
        assert_eq!(
            split_timed_key(&c).unwrap(),
            (Timestamp(256), &b"\x01a\x01ba"[..])
        );
        assert!(split_timed_key(b"short").is_err());
    }

    /// Golden bytes: the index keys are part of the file format.
    #[test]
    fn index_key_bytes_are_frozen() {
        let id = RecordId::new("shop", "credit", "k-1").unwrap();
        let id_key = id.to_key_bytes();
        assert_eq!(
            timed_key(Timestamp(0x0102_0304_0506), &id_key),
            b"\x00\x00\x01\x02\x03\x04\x05\x06\x04shop\x06creditk-1"
        );
        let kinds: Vec<u8> = State::ALL.into_iter().map(kind).collect();
        assert_eq!(kinds, [6, 4, 3, 1, 2]);
        let at = |time| Timestamp(time);
        let pending = Record {
            fingerprint: idem_core::Fingerprint::of_bytes(b"x"),
            generation: Generation(1),
            created_at: at(7),
            updated_at: at(7),
            status: idem_core::Status::Pending {
                lease_until: at(0x0102_0304_0506),
            },
        };
        assert_eq!(
            index_key(&id_key, &pending),
            b"\x06\x00\x00\x00\x00\x00\x00\x00\x07\x04shop\x06creditk-1"
        );
        let settled = Record {
            status: idem_core::Status::Settled {
                verdict: idem_core::Verdict::Succeeded,
                outcome: idem_core::Outcome::new(200, "ok"),
                completed_at: at(8),
                expires_at: at(0x0102_0304_0506),
            },
            ..pending.clone()
        };
        assert_eq!(
            index_key(&id_key, &settled),
            b"\x04\x00\x00\x01\x02\x03\x04\x05\x06\x04shop\x06creditk-1"
        );
        let names: Vec<&str> = [
            RECORDS.name(),
            INDEX.name(),
            META.name(),
            TOKENS.name(),
            TOKEN_EXPIRY.name(),
            TOKEN_INTENTS.name(),
            LEGACY_EXPIRY.name(),
        ]
        .into_iter()
        .chain(LEGACY_STATES.iter().map(|t| t.name()))
        .collect();
        assert_eq!(
            names,
            [
                "idem.records",
                "idem.index",
                "idem.meta",
                "idem.tokens",
                "idem.token.expiry",
                "idem.token.intents",
                "idem.expiry",
                "idem.state.pending",
                "idem.state.succeeded",
                "idem.state.failed",
                "idem.state.unknown",
                "idem.state.forgotten"
            ]
        );
        assert_eq!(
            (
                SCHEMA_KEY,
                LEGACY_GENERATION_KEY,
                LEGACY_CLOCK_FLOOR_KEY,
                GENERATION_KEY,
                CLOCK_FLOOR_KEY
            ),
            (
                &b"schema"[..],
                &b"generation"[..],
                &b"clock_floor"[..],
                &b"\x05generation"[..],
                &b"\x05clock_floor"[..]
            )
        );
        assert_eq!(
            COUNT_KEYS,
            [
                &b"\x05count.pending"[..],
                b"\x05count.succeeded",
                b"\x05count.failed",
                b"\x05count.unknown",
                b"\x05count.forgotten"
            ]
        );
    }

    /// The counters sort between the Succeeded entries, appended at their end by every
    /// settling commit, and the Pending ones: so the leaf a commit modifies for the
    /// counters is the one it modifies for its entry.
    #[test]
    fn the_counters_sit_between_the_succeeded_and_the_pending_entries() {
        let id_key = RecordId::new("t", "o", "k").unwrap().to_key_bytes();
        let latest_succeeded = [kind(State::Succeeded)]
            .into_iter()
            .chain([0xff; 8])
            .chain(id_key.iter().copied())
            .collect::<Vec<u8>>();
        let first_pending = [kind(State::Pending), 0, 0, 0, 0, 0, 0, 0, 0].to_vec();
        for key in COUNT_KEYS.iter().chain([&GENERATION_KEY, &CLOCK_FLOOR_KEY]) {
            assert!(latest_succeeded.as_slice() < *key && *key < first_pending.as_slice());
            assert_eq!(state_of_kind(key[0]), None);
        }
        for state in State::ALL {
            assert_eq!(state_of_kind(kind(state)), Some(state));
            assert_eq!(bounds(state).end[0], kind(state) + 1);
        }
    }

    #[test]
    fn state_indexes_follow_state_all() {
        for (i, state) in State::ALL.into_iter().enumerate() {
            assert_eq!(state_index(state), i);
            assert!(LEGACY_STATES[i].name().ends_with(state.name()));
            assert!(COUNT_KEYS[i].ends_with(state.name().as_bytes()));
        }
    }

    #[test]
    fn meta_numbers_are_eight_big_endian_bytes() {
        assert_eq!(decode_u64("x", &[0, 0, 0, 0, 0, 0, 1, 2]).unwrap(), 258);
        let err = decode_u64("generation", &[1, 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "store file is corrupt: meta generation: 2 bytes, expected 8"
        );
    }
}
