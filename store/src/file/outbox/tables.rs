//! The outbox's file layout: its tables, the bytes of their keys, and the one type that
//! writes an intent and keeps its indexes in step with it.

use idem_core::ledger::BackoffRng;
use idem_core::{Intent, IntentState, Timestamp, encoding};
use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, WriteTransaction};

use crate::error::Error;
use crate::file::schema::{META, open_read};

/// Intent key → intent bytes.
pub(super) const INTENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idem.intents");
/// `next_attempt_at` ++ key → (), for queued intents.
pub(super) const DUE: TableDefinition<&[u8], ()> = TableDefinition::new("idem.intent.due");
/// State byte ++ key → ().
pub(super) const STATES: TableDefinition<&[u8], ()> = TableDefinition::new("idem.intent.state");
/// Meta key of the backoff jitter's state.
pub(super) const RNG_KEY: &[u8] = b"intent.rng";

/// Meta key of the generator of intent keys' random bytes.
const KEYS_KEY: &[u8] = b"intent.keys";
/// The format of its value: this byte, the 32-byte seed, the 8-byte counter (big-endian).
const KEYS_FORMAT: u8 = 1;

/// The next 16 random bytes of an intent key from the store's generator: SHA-256 of a
/// seed drawn once from the operating system and kept in `idem.meta`, and a counter
/// advanced in `txn`, the transaction that makes the intent, so that no two intents of a
/// file ever share them, across restarts and crashes, whatever the clock does.
pub(super) fn draw_key_random(txn: &WriteTransaction) -> Result<[u8; 16], Error> {
    let mut meta = txn.open_table(META)?;
    let (seed, counter) = match meta.get(KEYS_KEY)? {
        Some(value) => decode_keys(value.value())?,
        None => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| Error::Random(e.into()))?;
            (seed, 0)
        }
    };
    let mut input = [0u8; 40];
    input[..32].copy_from_slice(&seed);
    input[32..].copy_from_slice(&counter.to_be_bytes());
    let digest = idem_core::Fingerprint::of_bytes(&input).0;
    let mut value = Vec::with_capacity(41);
    value.push(KEYS_FORMAT);
    value.extend_from_slice(&seed);
    value.extend_from_slice(&counter.wrapping_add(1).to_be_bytes());
    meta.insert(KEYS_KEY, value.as_slice())?;
    let mut random = [0u8; 16];
    random.copy_from_slice(&digest[..16]);
    Ok(random)
}

fn decode_keys(bytes: &[u8]) -> Result<([u8; 32], u64), Error> {
    let failed = |source| Error::Decode {
        what: "meta intent.keys".into(),
        source,
    };
    let (&format, rest) = bytes
        .split_first()
        .ok_or(failed(encoding::DecodeError::Empty))?;
    if format > KEYS_FORMAT {
        return Err(failed(encoding::DecodeError::NewerFormat {
            found: format,
            supported: KEYS_FORMAT,
        }));
    }
    if format == 0 || rest.len() != 40 {
        return Err(failed(encoding::DecodeError::Malformed {
            what: "the key generator's seed and counter",
        }));
    }
    let (seed, counter) = rest.split_at(32);
    let mut s = [0u8; 32];
    s.copy_from_slice(seed);
    let mut c = [0u8; 8];
    c.copy_from_slice(counter);
    Ok((s, u64::from_be_bytes(c)))
}

/// The persisted backoff generator, if one was stored.
pub(super) fn read_rng(
    meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
) -> Result<Option<BackoffRng>, Error> {
    let Some(bytes) = meta.get(RNG_KEY)? else {
        return Ok(None);
    };
    encoding::decode(bytes.value(), "backoff rng")
        .map(Some)
        .map_err(|source| Error::Decode {
            what: "meta intent.rng".into(),
            source,
        })
}

/// The outbox's tables, opened in one write transaction.
pub(super) struct IntentTables<'txn> {
    pub(super) intents: Table<'txn, &'static [u8], &'static [u8]>,
    pub(super) due: Table<'txn, &'static [u8], ()>,
    pub(super) states: Table<'txn, &'static [u8], ()>,
}

impl<'txn> IntentTables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<IntentTables<'txn>, Error> {
        Ok(IntentTables {
            intents: txn.open_table(INTENTS)?,
            due: txn.open_table(DUE)?,
            states: txn.open_table(STATES)?,
        })
    }

    pub(super) fn get(&self, key: &str) -> Result<Option<Intent>, Error> {
        read_intent(&self.intents, key)
    }

    /// The intent an index named: its absence means the file is corrupt.
    pub(super) fn require(&self, key: &str) -> Result<Intent, Error> {
        self.get(key)?.ok_or_else(|| Error::Corrupt {
            detail: format!("intent index names {key}, which has no intent"),
        })
    }

    /// Stores `new` (replacing `old`) and moves its index entries.
    pub(super) fn put(&mut self, old: Option<&Intent>, new: &Intent) -> Result<(), Error> {
        if let Some(old) = old {
            self.unindex(old)?;
        }
        self.intents
            .insert(new.key.as_bytes(), new.encode().as_slice())?;
        if new.state == IntentState::Queued {
            self.due
                .insert(due_key(new.next_attempt_at, &new.key).as_slice(), ())?;
        }
        self.states
            .insert(state_key(new.state, &new.key).as_slice(), ())?;
        Ok(())
    }

    pub(super) fn remove(&mut self, old: &Intent) -> Result<(), Error> {
        self.unindex(old)?;
        self.intents.remove(old.key.as_bytes())?;
        Ok(())
    }

    fn unindex(&mut self, old: &Intent) -> Result<(), Error> {
        if old.state == IntentState::Queued {
            self.due
                .remove(due_key(old.next_attempt_at, &old.key).as_slice())?;
        }
        self.states
            .remove(state_key(old.state, &old.key).as_slice())?;
        Ok(())
    }
}

pub(super) fn read_intent(
    intents: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &str,
) -> Result<Option<Intent>, Error> {
    match intents.get(key.as_bytes())? {
        Some(bytes) => decode_intent(key.as_bytes(), bytes.value()).map(Some),
        None => Ok(None),
    }
}

pub(super) fn decode_intent(key: &[u8], bytes: &[u8]) -> Result<Intent, Error> {
    let intent = Intent::decode(bytes).map_err(|source| Error::Decode {
        what: format!("intent {}", String::from_utf8_lossy(key)),
        source,
    })?;
    if intent.key.as_bytes() != key {
        return Err(Error::Corrupt {
            detail: format!(
                "intent stored under {} has key {}",
                String::from_utf8_lossy(key),
                intent.key
            ),
        });
    }
    Ok(intent)
}

pub(super) fn decode_key(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::Corrupt {
        detail: format!("intent index key {bytes:?} is not UTF-8"),
    })
}

/// The position of `state` in [`IntentState::ALL`], as one byte.
pub(super) fn state_byte(state: IntentState) -> u8 {
    match state {
        IntentState::Queued => 0,
        IntentState::InFlight => 1,
        IntentState::Completed => 2,
        IntentState::Failed => 3,
        IntentState::Conflict => 4,
        IntentState::Expired => 5,
        IntentState::Unknown => 6,
    }
}

fn state_key(state: IntentState, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(state_byte(state));
    out.extend_from_slice(key.as_bytes());
    out
}

fn due_key(at: Timestamp, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&at.as_millis().to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out
}

pub(super) fn split_due_key(bytes: &[u8]) -> Result<(Timestamp, &[u8]), Error> {
    match bytes.split_first_chunk::<8>() {
        Some((at, key)) => Ok((Timestamp(u64::from_be_bytes(*at)), key)),
        None => Err(Error::Corrupt {
            detail: format!(
                "intent due index key of {} bytes, expected at least 8",
                bytes.len()
            ),
        }),
    }
}

/// Intents per state, in the order of [`IntentState::ALL`]; zeros when no intent was
/// ever written.
pub(crate) fn count_by_state(txn: &ReadTransaction) -> Result<[u64; 7], Error> {
    let mut counts = [0u64; 7];
    let Some(states) = open_read(txn, STATES)? else {
        return Ok(counts);
    };
    for entry in states.iter()? {
        let (key, _) = entry?;
        match key.value().first().map(|&b| usize::from(b)) {
            Some(at) if at < counts.len() => counts[at] += 1,
            _ => {
                return Err(Error::Corrupt {
                    detail: format!("intent state index key {:?} has no state byte", key.value()),
                });
            }
        }
    }
    Ok(counts)
}

/// How many intents the file holds.
pub(crate) fn count(txn: &ReadTransaction) -> Result<u64, Error> {
    match open_read(txn, INTENTS)? {
        Some(intents) => Ok(redb::ReadableTableMetadata::len(&intents)?),
        None => Ok(0),
    }
}

/// Every intent, in key order (UUIDv7 keys: creation order).
pub(crate) fn for_each<E: From<Error>>(
    txn: &ReadTransaction,
    mut visit: impl FnMut(Intent) -> Result<(), E>,
) -> Result<(), E> {
    let Some(intents) = open_read(txn, INTENTS)? else {
        return Ok(());
    };
    for entry in intents.iter().map_err(Error::from)? {
        let (key, bytes) = entry.map_err(Error::from)?;
        visit(decode_intent(key.value(), bytes.value())?)?;
    }
    Ok(())
}

/// Writes an imported intent into `txn`: true when written, false when the same intent
/// is there already; `Err(Ok(message))` when a different intent holds its key.
pub(crate) fn import(
    txn: &WriteTransaction,
    intent: &Intent,
) -> Result<Result<bool, String>, Error> {
    let mut tables = IntentTables::open(txn)?;
    match tables.get(&intent.key)? {
        Some(existing) if existing == *intent => Ok(Ok(false)),
        Some(_) => Ok(Err(format!(
            "intent {}: the store already holds a different intent under this key",
            intent.key
        ))),
        None => {
            tables.put(None, intent)?;
            Ok(Ok(true))
        }
    }
}

/// Checks the outbox's tables: every intent decodes and has exactly its state entry
/// and, when queued, its due entry. Calls `problem` for each inconsistency; returns the
/// number of intents.
pub(crate) fn check(txn: &ReadTransaction, problem: &mut dyn FnMut(String)) -> Result<u64, Error> {
    let Some(intents) = open_read(txn, INTENTS)? else {
        return Ok(0);
    };
    let states = open_read(txn, STATES)?;
    let due = open_read(txn, DUE)?;
    let (mut total, mut queued) = (0u64, 0u64);
    for entry in intents.iter()? {
        let (key, bytes) = entry?;
        total += 1;
        let intent = match decode_intent(key.value(), bytes.value()) {
            Ok(intent) => intent,
            Err(e) => {
                problem(e.to_string());
                continue;
            }
        };
        let indexed = match &states {
            Some(states) => states
                .get(state_key(intent.state, &intent.key).as_slice())?
                .is_some(),
            None => false,
        };
        if !indexed {
            problem(format!(
                "intent {}: missing from the {} index",
                intent.key, intent.state
            ));
        }
        if intent.state == IntentState::Queued {
            queued += 1;
            let listed = match &due {
                Some(due) => due
                    .get(due_key(intent.next_attempt_at, &intent.key).as_slice())?
                    .is_some(),
                None => false,
            };
            if !listed {
                problem(format!(
                    "intent {}: queued, missing from the due index",
                    intent.key
                ));
            }
        }
    }
    // Every intent has its entries (checked above); equal lengths then mean that no
    // entry lacks an intent.
    let len = |table: &Option<redb::ReadOnlyTable<&'static [u8], ()>>| -> Result<u64, Error> {
        Ok(match table {
            Some(table) => redb::ReadableTableMetadata::len(table)?,
            None => 0,
        })
    };
    let (states_len, due_len) = (len(&states)?, len(&due)?);
    if states_len != total {
        problem(format!(
            "intent state index holds {states_len} entries for {total} intents"
        ));
    }
    if due_len != queued {
        problem(format!(
            "intent due index holds {due_len} entries for {queued} queued intents"
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key generator's format 1, byte for byte: a file written today is read by
    /// every later build; a newer format is refused by name, not misread.
    #[test]
    fn the_key_generators_format_1_is_read_as_written() {
        let mut bytes = vec![1u8];
        bytes.extend_from_slice(&[7u8; 32]);
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(decode_keys(&bytes).unwrap(), ([7u8; 32], 258));
        bytes[0] = 2;
        let newer = decode_keys(&bytes).unwrap_err().to_string();
        assert!(newer.contains("intent.keys"), "{newer}");
        assert!(decode_keys(&bytes[..20]).is_err());
        assert!(decode_keys(&[]).is_err());
    }

    #[test]
    fn state_bytes_follow_intent_state_all() {
        for (i, state) in IntentState::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(state_byte(state)), i);
        }
    }

    #[test]
    fn due_keys_sort_by_time_then_key() {
        let a = due_key(Timestamp(5), "b");
        let b = due_key(Timestamp(6), "a");
        let c = due_key(Timestamp(256), "a");
        assert!(a < b && b < c);
        assert_eq!(split_due_key(&c).unwrap(), (Timestamp(256), &b"a"[..]));
        assert!(split_due_key(b"short").is_err());
    }
}
