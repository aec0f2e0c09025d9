//! The SQLite baseline: the receiver protocol as a service would write it without idem.
//!
//! Only built with the `sqlite` feature.
//!
//! One table keyed by `(tenant, operation, key)`, with an index by expiry for sweeps and
//! one by state for stats (idem keeps the same two kinds of index), and a store-wide
//! generation counter in a meta table. WAL journal, `synchronous` FULL (every commit
//! fsyncs the log: durable) or NORMAL (the log is fsynced only at checkpoints: a power
//! loss may drop the last commits). The begin is `INSERT ... ON CONFLICT DO NOTHING`
//! inside a transaction, then the update; complete is an update guarded by state and
//! generation. Every statement is prepared once and cached.
//!
//! The comparison itself is `cargo bench -p idem-bench --bench compare --features sqlite`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// How SQLite makes a commit durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// `synchronous = FULL`: every commit fsyncs the WAL.
    Full,
    /// `synchronous = NORMAL`: commits are not fsynced; a power loss can lose them.
    Normal,
}

impl Synchronous {
    /// The pragma's value.
    #[must_use]
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant       TEXT    NOT NULL,
    operation    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    state        TEXT    NOT NULL,
    generation   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    lease_until  INTEGER,
    completed_at INTEGER,
    expires_at   INTEGER,
    code         INTEGER,
    outcome      BLOB,
    PRIMARY KEY (tenant, operation, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_keys_by_expiry
    ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idempotency_keys_by_state
    ON idempotency_keys (state, created_at);
CREATE TABLE IF NOT EXISTS idempotency_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO idempotency_meta VALUES ('generation', 0);
";

const CLAIM: &str = "
INSERT INTO idempotency_keys
    (tenant, operation, key, fingerprint, state, generation, created_at, updated_at, lease_until)
VALUES (?1, ?2, ?3, ?4, 'pending',
        (SELECT value + 1 FROM idempotency_meta WHERE name = 'generation'), ?5, ?5, ?6)
ON CONFLICT DO NOTHING";

const RAISE_GENERATION: &str =
    "UPDATE idempotency_meta SET value = value + 1 WHERE name = 'generation' RETURNING value";

const SETTLE: &str = "
UPDATE idempotency_keys
SET state = 'succeeded', updated_at = ?4, completed_at = ?4, expires_at = ?5,
    code = ?6, outcome = ?7, lease_until = NULL
WHERE tenant = ?1 AND operation = ?2 AND key = ?3 AND state = 'pending' AND generation = ?8";

const LOOKUP: &str = "
SELECT fingerprint, state, generation, lease_until, expires_at, code, outcome
FROM idempotency_keys WHERE tenant = ?1 AND operation = ?2 AND key = ?3";

const SWEEP: &str = "
DELETE FROM idempotency_keys WHERE (tenant, operation, key) IN (
    SELECT tenant, operation, key FROM idempotency_keys
    WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)";

/// What a begin decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// This call claimed the key with this generation; the Pending row is committed.
    Claimed(i64),
    /// The key was there: the stored row, for the caller to replay or refuse.
    Existing(Stored),
}

/// A row as a replay reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The fingerprint of the request that claimed it.
    pub fingerprint: Vec<u8>,
    /// `pending`, `succeeded`, ...
    pub state: String,
    /// The claim's generation.
    pub generation: i64,
    /// The outcome code, once settled.
    pub code: Option<i64>,
    /// The outcome bytes, once settled.
    pub outcome: Option<Vec<u8>>,
}

/// One request's identity and input.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The operation.
    pub operation: &'a str,
    /// The idempotency key.
    pub key: &'a str,
    /// SHA-256 of the request.
    pub fingerprint: &'a [u8; 32],
    /// The time, ms since the epoch.
    pub now: i64,
}

/// The receiver protocol on one SQLite connection (one per thread).
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    lease_ms: i64,
    retention_ms: i64,
}

impl SqliteStore {
    /// Opens (or creates) the database at `path` in WAL mode with `synchronous`.
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn open(path: &Path, synchronous: Synchronous) -> rusqlite::Result<SqliteStore> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(30))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", synchronous.pragma())?;
        conn.execute_batch(SCHEMA)?;
        Ok(SqliteStore {
            conn,
            lease_ms: 30_000,
            retention_ms: 86_400_000,
        })
    }

    /// Claims the key in one transaction, or reads what is there.
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn begin(&mut self, request: &Request<'_>) -> rusqlite::Result<Begun> {
        let txn = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let begun = claim_or_read(&txn, request, self.lease_ms)?;
        txn.commit()?;
        Ok(begun)
    }

    /// Settles a claimed key in one transaction. False when the row is not Pending
    /// with `generation` (stale).
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn complete(
        &mut self,
        request: &Request<'_>,
        generation: i64,
        code: i64,
        outcome: &[u8],
    ) -> rusqlite::Result<bool> {
        let txn = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let settled = settle(&txn, request, generation, code, outcome, self.retention_ms)?;
        txn.commit()?;
        Ok(settled)
    }

    /// The atomic path: claim and settle in one transaction. False when the key was
    /// already there (nothing runs).
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn execute(
        &mut self,
        request: &Request<'_>,
        code: i64,
        outcome: &[u8],
    ) -> rusqlite::Result<bool> {
        let txn = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ran = match claim_or_read(&txn, request, self.lease_ms)? {
            Begun::Claimed(generation) => {
                settle(&txn, request, generation, code, outcome, self.retention_ms)?
            }
            Begun::Existing(_) => false,
        };
        txn.commit()?;
        Ok(ran)
    }

    /// Settled rows for `count` keys `{prefix}{n:08}`, `per_transaction` at a time, as
    /// fast as SQLite takes them (for the size, lookup and sweep figures).
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn fill(
        &mut self,
        request: &Request<'_>,
        count: u32,
        per_transaction: u32,
        outcome: &[u8],
    ) -> rusqlite::Result<()> {
        let mut n = 0;
        while n < count {
            let txn = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            for _ in 0..per_transaction.min(count - n) {
                let key = format!("{}{n:08}", request.key);
                let one = Request {
                    key: &key,
                    ..*request
                };
                if let Begun::Claimed(generation) = claim_or_read(&txn, &one, self.lease_ms)? {
                    settle(&txn, &one, generation, 200, outcome, self.retention_ms)?;
                }
                n += 1;
            }
            txn.commit()?;
        }
        Ok(())
    }

    /// Reads a key's row, as a replay does.
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn lookup(&self, request: &Request<'_>) -> rusqlite::Result<Option<Stored>> {
        read(&self.conn, request)
    }

    /// Deletes every row expired at `now`, `batch` per transaction, oldest first.
    /// Returns the rows deleted.
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn sweep(&mut self, now: i64, batch: usize) -> rusqlite::Result<u64> {
        let mut removed = 0u64;
        loop {
            let txn = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let deleted = txn
                .prepare_cached(SWEEP)?
                .execute(params![now, i64::try_from(batch).unwrap_or(i64::MAX)])?;
            txn.commit()?;
            removed += deleted as u64;
            if deleted < batch {
                return Ok(removed);
            }
        }
    }

    /// Checkpoints the WAL into the main file and truncates it, so the file size is
    /// the data's.
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn checkpoint(&self) -> rusqlite::Result<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
    }

    /// Turns automatic checkpoints off (`wal_autocheckpoint = 0`), so that the WAL only
    /// grows: its growth over some commits is what they wrote to it ([`wal_bytes`]).
    ///
    /// # Errors
    ///
    /// SQLite's.
    pub fn without_checkpoints(&self) -> rusqlite::Result<()> {
        self.conn.pragma_update(None, "wal_autocheckpoint", 0)
    }

    /// The retention a settled row gets.
    #[must_use]
    pub fn retention_ms(&self) -> i64 {
        self.retention_ms
    }
}

/// The size of the WAL of the database at `path` (its `-wal` file), 0 when there is none.
///
/// # Errors
///
/// Reading the file's size.
pub fn wal_bytes(path: &Path) -> std::io::Result<u64> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::metadata(wal) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

fn claim_or_read(
    conn: &Connection,
    request: &Request<'_>,
    lease_ms: i64,
) -> rusqlite::Result<Begun> {
    let inserted = conn.prepare_cached(CLAIM)?.execute(params![
        request.tenant,
        request.operation,
        request.key,
        &request.fingerprint[..],
        request.now,
        request.now + lease_ms,
    ])?;
    if inserted == 1 {
        let generation: i64 = conn
            .prepare_cached(RAISE_GENERATION)?
            .query_row([], |row| row.get(0))?;
        return Ok(Begun::Claimed(generation));
    }
    match read(conn, request)? {
        Some(stored) => Ok(Begun::Existing(stored)),
        None => Err(rusqlite::Error::QueryReturnedNoRows),
    }
}

fn settle(
    conn: &Connection,
    request: &Request<'_>,
    generation: i64,
    code: i64,
    outcome: &[u8],
    retention_ms: i64,
) -> rusqlite::Result<bool> {
    let updated = conn.prepare_cached(SETTLE)?.execute(params![
        request.tenant,
        request.operation,
        request.key,
        request.now,
        request.now + retention_ms,
        code,
        outcome,
        generation,
    ])?;
    Ok(updated == 1)
}

fn read(conn: &Connection, request: &Request<'_>) -> rusqlite::Result<Option<Stored>> {
    conn.prepare_cached(LOOKUP)?
        .query_row(
            params![request.tenant, request.operation, request.key],
            |row| {
                Ok(Stored {
                    fingerprint: row.get(0)?,
                    state: row.get(1)?,
                    generation: row.get(2)?,
                    code: row.get(5)?,
                    outcome: row.get(6)?,
                })
            },
        )
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_follows_the_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = SqliteStore::open(&dir.path().join("b.sqlite"), Synchronous::Full).unwrap();
        let fp = [7u8; 32];
        let request = Request {
            tenant: "t",
            operation: "o",
            key: "k",
            fingerprint: &fp,
            now: 1_000,
        };
        let Begun::Claimed(generation) = db.begin(&request).unwrap() else {
            panic!("fresh key")
        };
        assert_eq!(generation, 1);
        assert!(matches!(db.begin(&request).unwrap(), Begun::Existing(s) if s.state == "pending"));
        assert!(!db.complete(&request, 2, 200, b"late").unwrap(), "stale");
        assert!(db.complete(&request, 1, 200, b"ok").unwrap());
        let stored = db.lookup(&request).unwrap().unwrap();
        assert_eq!(
            (stored.code, stored.outcome.as_deref()),
            (Some(200), Some(&b"ok"[..]))
        );
        let other = Request {
            key: "k2",
            ..request
        };
        assert!(db.execute(&other, 201, b"done").unwrap());
        assert!(!db.execute(&other, 201, b"done").unwrap(), "runs once");
        assert_eq!(db.lookup(&other).unwrap().unwrap().generation, 2);
        db.fill(
            &Request {
                key: "f-",
                ..request
            },
            10,
            4,
            b"x",
        )
        .unwrap();
        let expired = request.now + db.retention_ms() + 1;
        assert_eq!(db.sweep(expired, 3).unwrap(), 12);
        assert!(db.lookup(&request).unwrap().is_none());
    }
}
