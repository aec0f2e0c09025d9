//! The upgrade of a file of schema 1 or 2 to this schema's tables, in one transaction.

use super::*;

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
