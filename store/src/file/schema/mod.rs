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

mod index;
mod upgrade;
mod write;

pub(crate) use index::{IndexReader, expired_keys};
pub(crate) use upgrade::upgrade;
pub(crate) use write::{Counters, Known, Tables};

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
