//! The file layout: which redb tables hold what, the bytes of their keys, and the one
//! function that writes a record and keeps every index in step with it.
//!
//! | table | key | value |
//! |---|---|---|
//! | `idem.records` | [`RecordId::to_key_bytes`] | [`Record::encode`] (format byte + postcard) |
//! | `idem.expiry` | `expires_at` (u64 big-endian) ++ id bytes | `()`; settled records and tombstones only |
//! | `idem.state.pending`, `.succeeded`, `.failed`, `.unknown`, `.forgotten` | `created_at` (u64 big-endian) ++ id bytes | `()` |
//! | `idem.meta` | `b"schema"`, `b"generation"`, `b"clock_floor"` | u64 big-endian |
//! | `idem.tokens` | [`RecordId::to_key_bytes`] of `(tenant, operation, token)` | [`IssuedToken::encode`] |
//! | `idem.token.expiry` | `expires_at` (u64 big-endian) ++ token id bytes | `()` |
//! | `idem.token.intents` | [`RecordId::to_key_bytes`] of `(tenant, operation, intent id)` | [`idem_core::Token::encode`] |
//!
//! A token's use is an ordinary record in `idem.records` under the same id bytes as its
//! entry in `idem.tokens` (see `token.rs`).
//!
//! Every key and value is our own byte string: the file never depends on redb's
//! encodings of composite types, which have changed between redb majors. Big-endian
//! numbers make the ordered tables sort by time, so sweep reads the expiry index oldest
//! first and stats find the oldest Pending or Unknown record with one lookup.
//!
//! The state tables are indexes by state: their `len()` is the count of records in that
//! state (redb keeps table lengths), and their first entry is the oldest one.

use std::cell::Cell;

use idem_core::{Generation, IssuedToken, Record, RecordId, State, Timestamp, Write};
use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};

use crate::error::Error;

/// The schema version this build writes. A file with a newer one is refused.
///
/// Schema 2 added tombstones: records of format 2 and the `idem.state.forgotten` index.
/// A schema 1 file is read as it is and upgraded by the first writable open, which
/// creates the index and records schema 2 in one transaction; from then on builds that
/// read only schema 1 refuse the file instead of misreading a tombstone.
pub(crate) const SCHEMA_VERSION: u64 = 2;

/// The oldest schema version this build reads.
pub(crate) const OLDEST_SCHEMA: u64 = 1;

/// Record id bytes → record bytes.
pub(crate) const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.records");
/// `expires_at` ++ id bytes → (), for every settled record.
pub(crate) const EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("idem.expiry");
/// Token id bytes → issued-token bytes.
pub(crate) const TOKENS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.tokens");
/// `expires_at` ++ token id bytes → (), for every issued token.
pub(crate) const TOKEN_EXPIRY: TableDefinition<&[u8], ()> =
    TableDefinition::new("idem.token.expiry");
/// Intent id bytes (tenant, operation, intent id) → the token issued for it.
pub(crate) const TOKEN_INTENTS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("idem.token.intents");
/// Schema version and generation counter.
pub(crate) const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.meta");
/// One index per state, in the order of [`State::ALL`]: `created_at` ++ id bytes → ().
/// Schema 1 files have no `idem.state.forgotten` until a writable open upgrades them.
pub(crate) const STATES: [TableDefinition<&[u8], ()>; 5] = [
    TableDefinition::new("idem.state.pending"),
    TableDefinition::new("idem.state.succeeded"),
    TableDefinition::new("idem.state.failed"),
    TableDefinition::new("idem.state.unknown"),
    TableDefinition::new("idem.state.forgotten"),
];

/// Meta key of the schema version.
pub(crate) const SCHEMA_KEY: &[u8] = b"schema";
/// Meta key of the store-wide generation counter (the last generation handed out).
pub(crate) const GENERATION_KEY: &[u8] = b"generation";
/// Meta key of the clock floor: the latest time a write of a record used, in ms. Files
/// written before it existed have none, which reads as 0.
pub(crate) const CLOCK_FLOOR_KEY: &[u8] = b"clock_floor";

/// The position of `state` in [`STATES`].
pub(crate) fn state_index(state: State) -> usize {
    match state {
        State::Pending => 0,
        State::Succeeded => 1,
        State::Failed => 2,
        State::Unknown => 3,
        State::Forgotten => 4,
    }
}

/// `time` big-endian, then the id bytes: a key of the expiry and state indexes.
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
    let mut keys = Vec::with_capacity(batch + 1);
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

/// Decodes a u64 stored in the meta table.
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

/// Reads a u64 from any readable meta table.
pub(crate) fn read_meta(
    meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &[u8],
) -> Result<Option<u64>, Error> {
    match meta.get(key)? {
        Some(bytes) => decode_u64(&String::from_utf8_lossy(key), bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// The store's tables in one write transaction, each opened the first time it is used.
///
/// Caller code that gets the same transaction while these are open (the work of an
/// atomic execute) may open any other table, but not these: redb refuses to open one
/// table twice in a transaction.
///
/// Opening a table costs a lookup in redb's table of tables, and closing it another at
/// the commit, so a table is opened only when an input needs it: an execute of a fresh
/// key touches the records, the expiry index, one state index and meta, not the other
/// three state indexes nor the tokens. A group transaction opens each once for all its
/// inputs.
///
/// The generation counter and the clock floor live in [`Counters`]: read from meta once
/// per transaction, raised in memory, and written to meta once, by
/// [`crate::writer::Writer::commit`] just before the commit (every commit of a write
/// transaction goes through it), instead of once per input. The committed bytes are the
/// same; a group transaction of 64 inputs saves 63 rewrites of each.
///
/// Time never goes backwards for the records: a write uses [`Tables::effective`], the
/// caller's time or the clock floor, whichever is later, and then raises the floor to
/// it with [`Tables::raise_floor`] (DESIGN §2, "Time").
pub(crate) struct Tables<'txn> {
    txn: &'txn WriteTransaction,
    counters: &'txn Counters,
    records: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    expiry: Option<Table<'txn, &'static [u8], ()>>,
    states: [Option<Table<'txn, &'static [u8], ()>>; 5],
    meta: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    tokens: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    // False only where a test shows what the floor prevents.
    floored: bool,
}

/// The generation counter and the clock floor of one write transaction, as this
/// transaction sees them: each read from meta the first time it is needed, raised here,
/// and put into meta by [`Counters::write`] when raised. See [`Tables`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    generation: Cell<Option<Generation>>,
    floor: Cell<Option<Timestamp>>,
    generation_raised: Cell<bool>,
    floor_raised: Cell<bool>,
}

impl Counters {
    /// Puts the raised counter and floor into meta in `txn`: called just before the
    /// commit, with the transaction's [`Tables`] closed.
    pub(crate) fn write(&self, txn: &WriteTransaction) -> Result<(), Error> {
        if !self.generation_raised.get() && !self.floor_raised.get() {
            return Ok(());
        }
        let mut meta = txn.open_table(META)?;
        if let (true, Some(generation)) = (self.generation_raised.get(), self.generation.get()) {
            meta.insert(GENERATION_KEY, &generation.0.to_be_bytes()[..])?;
        }
        if let (true, Some(floor)) = (self.floor_raised.get(), self.floor.get()) {
            meta.insert(CLOCK_FLOOR_KEY, &floor.as_millis().to_be_bytes()[..])?;
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
    /// ([`Counters::write`]); initializing a file raises neither.
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        counters: &'txn Counters,
    ) -> Result<Tables<'txn>, Error> {
        let mut tables = Tables::open_floored(txn, counters, true);
        tables.records()?;
        tables.expiry()?;
        for state in State::ALL {
            tables.state(state)?;
        }
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
            expiry: None,
            states: [None, None, None, None, None],
            meta: None,
            tokens: None,
            floored,
        }
    }

    fn records(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.records, self.txn, RECORDS)
    }

    /// The expiry index, for sweep.
    pub(crate) fn expiry(&mut self) -> Result<&mut Table<'txn, &'static [u8], ()>, Error> {
        opened(&mut self.expiry, self.txn, EXPIRY)
    }

    fn state(&mut self, state: State) -> Result<&mut Table<'txn, &'static [u8], ()>, Error> {
        let i = state_index(state);
        opened(&mut self.states[i], self.txn, STATES[i])
    }

    fn meta(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.meta, self.txn, META)
    }

    fn tokens(&mut self) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, Error> {
        opened(&mut self.tokens, self.txn, TOKENS)
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
        let generation = Generation(read_meta(self.meta()?, GENERATION_KEY)?.unwrap_or(0));
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
        let floor = Timestamp(read_meta(self.meta()?, CLOCK_FLOOR_KEY)?.unwrap_or(0));
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

    /// Stores `new` under `id_key` (replacing `old`) and moves its index entries.
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
        if let Some(expires_at) = new.expires_at() {
            self.expiry()?
                .insert(timed_key(expires_at, id_key).as_slice(), ())?;
        }
        self.state(new.state())?
            .insert(timed_key(new.created_at, id_key).as_slice(), ())?;
        Ok(())
    }

    /// Removes the record `old` under `id_key` with its index entries.
    pub(crate) fn delete(&mut self, id_key: &[u8], old: &Record) -> Result<(), Error> {
        self.unindex(id_key, old)?;
        self.records()?.remove(id_key)?;
        Ok(())
    }

    fn unindex(&mut self, id_key: &[u8], old: &Record) -> Result<(), Error> {
        if let Some(expires_at) = old.expires_at() {
            self.expiry()?
                .remove(timed_key(expires_at, id_key).as_slice())?;
        }
        self.state(old.state())?
            .remove(timed_key(old.created_at, id_key).as_slice())?;
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
        assert_eq!(
            timed_key(Timestamp(0x0102_0304_0506), &id.to_key_bytes()),
            b"\x00\x00\x01\x02\x03\x04\x05\x06\x04shop\x06creditk-1"
        );
        let names: Vec<&str> = [
            RECORDS.name(),
            EXPIRY.name(),
            META.name(),
            TOKENS.name(),
            TOKEN_EXPIRY.name(),
            TOKEN_INTENTS.name(),
        ]
        .into_iter()
        .chain(STATES.iter().map(|t| t.name()))
        .collect();
        assert_eq!(
            names,
            [
                "idem.records",
                "idem.expiry",
                "idem.meta",
                "idem.tokens",
                "idem.token.expiry",
                "idem.token.intents",
                "idem.state.pending",
                "idem.state.succeeded",
                "idem.state.failed",
                "idem.state.unknown",
                "idem.state.forgotten"
            ]
        );
        assert_eq!(
            (SCHEMA_KEY, GENERATION_KEY, CLOCK_FLOOR_KEY),
            (&b"schema"[..], &b"generation"[..], &b"clock_floor"[..])
        );
    }

    #[test]
    fn state_indexes_follow_state_all() {
        for (i, state) in State::ALL.into_iter().enumerate() {
            assert_eq!(state_index(state), i);
            assert!(STATES[i].name().ends_with(state.name()));
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
