//! The floor under a store's commit: bare redb commits, timed, none of the store's code.
//!
//! What redb itself takes for the commits the store's targets are stated for.
//!
//! A store's commit cannot be faster than a bare commit that writes as little as its
//! layout must: its record into the records table and one entry into the index (the
//! 2-table rows), or, for any layout at all, one entry into one table (the 1-table
//! row). Where such a floor is already below a target's ratio to SQLite, the target is
//! out of reach on redb whatever the store does above it; [`rows`] gives the figures
//! the comparison harness prints beside each target.

use std::path::Path;
use std::time::{Duration, Instant};

use idem_store::redb::{ConcurrencyMode, Database, Durability, TableDefinition};

use crate::measure::{BenchError, Row, Timing};

/// The records table of the bare commits, shaped like the store's.
const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");
/// The index table of the bare commits, shaped like the store's.
const INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("index");

/// Inputs a group commit carries in the group row: the harness's most callers.
pub const GROUP: u32 = 64;

/// How much each floor row does.
#[derive(Debug, Clone, Copy)]
pub struct FloorPlan {
    /// Commits before timing, so that the file has grown past its first pages.
    pub warm_up: u32,
    /// Commits timed in each row that syncs.
    pub synced: u32,
    /// Commits timed in the row without a sync.
    pub unsynced: u32,
}

impl Default for FloorPlan {
    fn default() -> FloorPlan {
        FloorPlan {
            warm_up: 500,
            synced: 500,
            unsynced: 6_000,
        }
    }
}

/// One kind of bare commit.
struct Bare {
    id: &'static str,
    measurement: &'static str,
    mode: ConcurrencyMode,
    durability: Durability,
    tables: usize,
    inputs: u32,
}

/// The bare commits: one entry into one table and into two, in the multi-process mode
/// (redb's two-phase commit, two syncs); two tables in the single-process mode (one
/// sync), with and without the sync; and [`GROUP`] inputs per commit in both modes.
const KINDS: [Bare; 6] = [
    Bare {
        id: "redb_floor_multi_1",
        measurement: "bare redb commit, 1 entry into 1 table, multi-process",
        mode: ConcurrencyMode::MultiWriter,
        durability: Durability::Immediate,
        tables: 1,
        inputs: 1,
    },
    Bare {
        id: "redb_floor_multi_2",
        measurement: "bare redb commit, 1 entry into each of 2 tables, multi-process",
        mode: ConcurrencyMode::MultiWriter,
        durability: Durability::Immediate,
        tables: 2,
        inputs: 1,
    },
    Bare {
        id: "redb_floor_single_2",
        measurement: "bare redb commit, 1 entry into each of 2 tables, single process",
        mode: ConcurrencyMode::ExclusiveWriter,
        durability: Durability::Immediate,
        tables: 2,
        inputs: 1,
    },
    Bare {
        id: "redb_floor_no_fsync_2",
        measurement: "bare redb commit, 1 entry into each of 2 tables, no fsync (None)",
        mode: ConcurrencyMode::ExclusiveWriter,
        durability: Durability::None,
        tables: 2,
        inputs: 1,
    },
    Bare {
        id: "redb_floor_group_multi_2",
        measurement: "bare redb commit, 64 entries into each of 2 tables, multi-process",
        mode: ConcurrencyMode::MultiWriter,
        durability: Durability::Immediate,
        tables: 2,
        inputs: GROUP,
    },
    Bare {
        id: "redb_floor_group_single_2",
        measurement: "bare redb commit, 64 entries into each of 2 tables, single process",
        mode: ConcurrencyMode::ExclusiveWriter,
        durability: Durability::Immediate,
        tables: 2,
        inputs: GROUP,
    },
];

/// Times every kind of bare commit into a new file in `dir`. A row's calls are
/// commits; the group row's rate is in commits, [`GROUP`] inputs each
/// ([`Row::inputs_per_commit`]).
///
/// # Errors
///
/// The first redb or file error.
pub fn rows(dir: &Path, plan: FloorPlan) -> Result<Vec<Row>, BenchError> {
    KINDS.iter().map(|kind| time(dir, kind, plan)).collect()
}

/// Times `kind`'s commits after `plan.warm_up` of them.
fn time(dir: &Path, kind: &Bare, plan: FloorPlan) -> Result<Row, BenchError> {
    let path = dir.join(format!("{}.redb", kind.id));
    let db = Database::builder()
        .set_concurrency_mode(kind.mode)
        .create(&path)?;
    let timed = if matches!(kind.durability, Durability::None) {
        plan.unsynced
    } else {
        plan.synced
    };
    let record = [0x5au8; 150];
    let mut n = 0u64;
    let mut commit = || -> Result<(), BenchError> {
        let mut txn = db.begin_write()?;
        if !matches!(kind.durability, Durability::Immediate) {
            txn.set_durability(kind.durability)?;
        }
        {
            let mut records = txn.open_table(RECORDS)?;
            let mut index = (kind.tables > 1)
                .then(|| txn.open_table(INDEX))
                .transpose()?;
            for _ in 0..kind.inputs {
                n += 1;
                // Keys as the store's: tenant, operation and a key that grows with time;
                // the index entry is the expiry time and the key.
                let key = format!("\x05bench\x05floor{n:014}");
                records.insert(key.as_bytes(), &record[..])?;
                if let Some(index) = index.as_mut() {
                    let entry = [&n.to_be_bytes()[..], key.as_bytes()].concat();
                    index.insert(entry.as_slice(), &[][..])?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    };
    for _ in 0..plan.warm_up {
        commit()?;
    }
    let mut calls = Vec::with_capacity(timed as usize);
    let start = Instant::now();
    for _ in 0..timed {
        let one = Instant::now();
        commit()?;
        calls.push(one.elapsed());
    }
    let total: Duration = start.elapsed();
    drop(db);
    std::fs::remove_file(&path)?;
    let commits = u64::from(timed);
    Ok(
        Row::new(kind.id, kind.measurement, 1, &Timing { total, calls })
            .with_commits(commits * u64::from(kind.inputs), commits),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_bare_commit_is_timed_and_its_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let plan = FloorPlan {
            warm_up: 3,
            synced: 4,
            unsynced: 5,
        };
        let rows = rows(dir.path(), plan).unwrap();
        let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
        assert_eq!(ids, KINDS.iter().map(|k| k.id).collect::<Vec<_>>());
        for row in &rows {
            let expected = if row.id == "redb_floor_no_fsync_2" {
                5
            } else {
                4
            };
            assert_eq!(row.ops, expected, "{}", row.id);
            assert!(row.per_second > 0.0, "{}", row.id);
            let inputs = if row.id.starts_with("redb_floor_group") {
                64.0
            } else {
                1.0
            };
            assert_eq!(row.inputs_per_commit, Some(inputs), "{}", row.id);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
