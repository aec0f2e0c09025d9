//! The store's tables in a write transaction: the one function that writes a record and keeps its index in step, and the counters carried to the commit.

use idem_core::IssuedToken;

use super::index::expired_folded;
use super::*;

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
/// written to the index once, by [`crate::file::writer::Writer::commit`] just before the
/// commit (every commit of a write transaction goes through it), instead of once per
/// input. A group transaction of 64 inputs saves 63 rewrites of each.
///
/// Time never goes backwards for the records: a write uses [`Tables::effective`], the
/// caller's time or the clock floor, whichever is later, and then raises the floor to
/// it with [`Tables::raise_floor`] (docs/design.md §2, "Time").
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
