//! Bare redb commits into one to four tables, their disk calls counted.
//!
//! What the store's commit pays per B-tree it modifies.

use std::fmt::Write as _;
use std::path::Path;

use idem_store::redb::{self, ConcurrencyMode, Database, TableDefinition};
use serde::Serialize;

use super::counting::{Calls, Counting};
use super::{IoPlan, NOW, PAGE, per};
use crate::measure::BenchError;

/// One bare redb commit's disk calls when it inserts one entry into each of `tables`
/// tables, in `mode`: what the store's commit pays per B-tree it modifies.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutRow {
    /// Tables modified per commit.
    pub tables: usize,
    /// The concurrency mode, as redb names it.
    pub mode: String,
    /// Commits counted.
    pub commits: u64,
    /// Their calls.
    pub calls: Calls,
}

/// The table names of [`layout`], shaped like the store's: records, expiry, a state
/// index, meta.
const LAYOUT: [TableDefinition<&[u8], &[u8]>; 4] = [
    TableDefinition::new("records"),
    TableDefinition::new("expiry"),
    TableDefinition::new("state"),
    TableDefinition::new("meta"),
];

/// Commits into bare redb databases in `dir`: for 1 to 4 tables and both kinds of
/// commit, `plan.inputs` commits after `plan.warm_up`, each inserting one entry of the store's
/// sizes (a 150-byte record under a 25-byte key; 33-byte index keys; an 8-byte counter
/// rewritten in place) into each table.
///
/// # Errors
///
/// The first redb or file error.
pub fn layout(dir: &Path, plan: IoPlan) -> Result<Vec<LayoutRow>, BenchError> {
    let IoPlan {
        warm_up,
        inputs: commits,
    } = plan;
    let mut rows = Vec::new();
    for mode in [
        ConcurrencyMode::MultiWriter,
        ConcurrencyMode::ExclusiveWriter,
    ] {
        for tables in 1..=LAYOUT.len() {
            let path = dir.join(format!("layout-{tables}-{mode:?}.redb"));
            let (backend, counter) = Counting::create(&path)?;
            let db = Database::builder()
                .set_concurrency_mode(mode)
                .create_with_backend(backend)?;
            let mut n = 0u64;
            let mut commit = |db: &Database| -> Result<(), redb::Error> {
                n += 1;
                let key = format!("\x05bench\x06layout{n:010}");
                let timed = [&NOW.as_millis().to_be_bytes()[..], key.as_bytes()].concat();
                let txn = db.begin_write()?;
                for (i, table) in LAYOUT.iter().take(tables).enumerate() {
                    let mut table = txn.open_table(*table)?;
                    match i {
                        0 => table.insert(key.as_bytes(), &[0x5a; 150][..])?,
                        3 => table.insert(&b"generation"[..], &n.to_be_bytes()[..])?,
                        _ => table.insert(timed.as_slice(), &[][..])?,
                    };
                }
                txn.commit()?;
                Ok(())
            };
            for _ in 0..warm_up {
                commit(&db)?;
            }
            let before = counter.now();
            for _ in 0..commits {
                commit(&db)?;
            }
            rows.push(LayoutRow {
                tables,
                mode: format!("{mode:?}"),
                commits: u64::from(commits),
                calls: counter.now() - before,
            });
        }
    }
    Ok(rows)
}

/// The layout rows as a table for people.
#[must_use]
pub fn layout_table(rows: &[LayoutRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<62} {:>9} {:>7} {:>6} {:>6}",
        "BARE REDB COMMIT, one entry into each of N tables", "B/commit", "pages", "writes", "syncs"
    );
    for row in rows {
        let c = row.calls;
        let bytes = per(c.bytes_written, row.commits);
        let _ = writeln!(
            out,
            "{:<62} {:>9.0} {:>7.1} {:>6.1} {:>6.2}",
            format!("{} table(s), {}", row.tables, row.mode),
            bytes,
            bytes / PAGE as f64,
            per(c.writes, row.commits),
            per(c.syncs, row.commits),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_commit_into_more_tables_writes_more() {
        let dir = tempfile::tempdir().unwrap();
        let plan = IoPlan {
            warm_up: 50,
            inputs: 20,
        };
        let rows = layout(dir.path(), plan).unwrap();
        assert_eq!(rows.len(), 8);
        for pair in rows.windows(2).filter(|p| p[0].mode == p[1].mode) {
            assert!(
                pair[1].calls.bytes_written > pair[0].calls.bytes_written,
                "{pair:?}"
            );
        }
        assert!(layout_table(&rows).starts_with("BARE REDB COMMIT"));
    }
}
