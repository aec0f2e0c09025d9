//! A seeded, single-threaded workload over the whole store (atomic execute with the
//! caller's tables, its grouped form, begin/complete/release/mark-unknown/resolve, the
//! outbox's enqueue/due/reply, sweep, compact, import), one store call per step, and
//! [`contents`]: every table of the file, byte for byte, to compare states with.
//!
//! Each step makes at most one commit that changes what the tables hold (compaction
//! commits several, and changes none), so a power cut during step `k` must leave the
//! contents after step `k - 1` or after step `k`: nothing that was answered is lost,
//! nothing half-done is visible.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, LedgerConfig, Outcome, RecordId, Reply, Timestamp, Verdict};
use idem_store::outbox::OutboxError;
use idem_store::redb::backends::InMemoryBackend;
use idem_store::redb::{
    ConcurrencyMode, ReadTransaction, ReadableTable, TableDefinition, TableHandle, WriteTransaction,
};
use idem_store::{Error, ExecuteError, ImportError, MaintainError, Store};

use super::{Rng, add_credit, fp, id};

/// The sales table of the outbox steps: intent key → payload.
pub const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("test.sales");

/// Every table of a store, by name: its entries as bytes, in key order.
pub type Contents = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

/// A start time far from zero, so the clock floor and retentions are ordinary numbers.
pub const START: u64 = 1_700_000_000_000;

/// Short retentions, so sweeps find expired records within a run; a long lease, so a
/// claim never runs out while a run lasts.
pub fn config() -> Config {
    Config {
        lease_ms: 3_600_000,
        success_retention_ms: 20_000,
        failure_retention_ms: 20_000,
        ..Config::default()
    }
}

/// The outbox's settings.
pub fn ledger() -> LedgerConfig {
    LedgerConfig::with_seed(11)
}

/// Reads every table of the store.
pub fn contents(store: &Store) -> Contents {
    store.read(read_all).unwrap()
}

fn read_all(txn: &ReadTransaction) -> Contents {
    let mut all = Contents::new();
    for handle in txn.list_tables().unwrap() {
        let name = handle.name().to_string();
        let entries = dump::<&[u8], &[u8]>(txn, &name, |k, v| (k.to_vec(), v.to_vec()))
            .or_else(|| dump::<&[u8], ()>(txn, &name, |k, ()| (k.to_vec(), Vec::new())))
            .or_else(|| {
                dump::<&str, u64>(txn, &name, |k, v| {
                    (k.as_bytes().to_vec(), v.to_be_bytes().to_vec())
                })
            })
            .or_else(|| dump::<&str, &[u8]>(txn, &name, |k, v| (k.as_bytes().to_vec(), v.to_vec())))
            .unwrap_or_else(|| panic!("table {name} has a type the dump does not know"));
        all.insert(name, entries);
    }
    all
}

fn dump<K: idem_store::redb::Key + 'static, V: idem_store::redb::Value + 'static>(
    txn: &ReadTransaction,
    name: &str,
    bytes: impl Fn(K::SelfType<'_>, V::SelfType<'_>) -> (Vec<u8>, Vec<u8>),
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let table = txn.open_table(TableDefinition::<K, V>::new(name)).ok()?;
    Some(
        table
            .iter()
            .unwrap()
            .map(|entry| {
                let (k, v) = entry.unwrap();
                bytes(k.value(), v.value())
            })
            .collect(),
    )
}

/// The store's generation counter as held in `contents`.
pub fn generation_in(contents: &Contents) -> u64 {
    contents
        .get("idem.index")
        .and_then(|index| index.iter().find(|(k, _)| k == b"\x05generation"))
        .map_or(0, |(_, v)| {
            u64::from_be_bytes(v.as_slice().try_into().unwrap())
        })
}

/// Opens the store on `disk` as every test of the workload does.
pub fn open(
    backend: impl idem_store::redb::StorageBackend,
    mode: ConcurrencyMode,
) -> Result<Store, idem_store::OpenError> {
    Store::builder()
        .config(config())
        .concurrency(mode)
        .open_on_backend(backend)
}

/// A store call that failed, and whether it failed because the store needs a reopen.
#[derive(Debug)]
pub struct Failed {
    pub step: &'static str,
    pub message: String,
    pub needs_reopen: bool,
}

fn failed(step: &'static str, e: &dyn std::error::Error, needs_reopen: bool) -> Failed {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    Failed {
        step,
        message,
        needs_reopen,
    }
}

fn store_failed(step: &'static str, e: &Error) -> Failed {
    failed(step, e, matches!(e, Error::NeedsReopen))
}

/// The workload: a store and what the steps so far left to act on.
pub struct Workload {
    pub store: Store,
    rng: Rng,
    now: u64,
    next_key: u64,
    credited: Vec<String>,
    claims: Vec<(RecordId, Generation)>,
    unknown: Vec<RecordId>,
    in_flight: Vec<String>,
    imports: VecDeque<Vec<u8>>,
}

impl Workload {
    /// A workload on `store` whose choices follow `seed`.
    pub fn new(store: Store, seed: u64) -> Workload {
        let mut rng = Rng::new(seed);
        let imports = (0..4).map(|n| export_of(n, rng.next_u64())).collect();
        Workload {
            store,
            rng,
            now: START,
            next_key: 0,
            credited: Vec::new(),
            claims: Vec::new(),
            unknown: Vec::new(),
            in_flight: Vec::new(),
            imports,
        }
    }

    /// The time of the latest step.
    pub fn now(&self) -> Timestamp {
        Timestamp(self.now)
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next_key += 1;
        format!("{prefix}-{:05}", self.next_key)
    }

    /// Runs one step: a store call. `Ok` with the step's name when the store answered
    /// (a refusal by design, such as work that fails, is an answer); `Err` when the
    /// store failed.
    pub fn step(&mut self) -> Result<&'static str, Failed> {
        self.now += 1 + self.rng.below(3_000);
        let now = Timestamp(self.now);
        match self.rng.below(100) {
            0..=19 => self.execute(now),
            20..=29 => self.execute_grouped(now),
            30..=36 => self.execute_and_forward(now),
            37..=48 => self.begin(now),
            49..=62 => self.settle(now),
            63..=66 => self.resolve(now),
            67..=74 => self.enqueue(now),
            75..=79 => self.due(now),
            80..=85 => self.reply(now),
            86..=91 => self.sweep(now),
            92..=95 => self.compact(),
            _ => self.import(),
        }
    }

    /// A new key, or now and then a retry of one credited before (replayed); one new key
    /// in ten fails after its writes (rolled back).
    fn pick_credit(&mut self) -> (String, bool) {
        if !self.credited.is_empty() && self.rng.below(5) == 0 {
            let k = self.rng.below(self.credited.len() as u64) as usize;
            return (self.credited[k].clone(), false);
        }
        let key = self.fresh("credit");
        let fail = self.rng.below(10) == 0;
        if !fail {
            self.credited.push(key.clone());
        }
        (key, fail)
    }

    fn execute(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let (key, fail) = self.pick_credit();
        let ran = self
            .store
            .execute(&id("shop", "credit", &key), fp(&key), now, |txn| {
                credit(txn, &key, fail)
            });
        answered("execute", ran)
    }

    fn execute_grouped(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let (key, fail) = self.pick_credit();
        let owned = key.clone();
        let ran =
            self.store
                .execute_grouped(&id("shop", "credit", &key), fp(&key), now, move |txn| {
                    credit(txn, &owned, fail)
                });
        answered("execute_grouped", ran)
    }

    /// Atomic execute whose work also starts an outbox intent that forwards the sale.
    fn execute_and_forward(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let key = self.fresh("forward");
        let random = self.random();
        let outbox = self.store.outbox(ledger()).unwrap();
        let ran = self
            .store
            .execute(&id("shop", "forward", &key), fp(&key), now, |txn| {
                let storage = |e: &dyn std::fmt::Display| WorkError::Storage(e.to_string());
                add_credit(txn, &key).map_err(|e| storage(&e))?;
                let payload = key.clone().into_bytes();
                let intent = outbox
                    .enqueue_in(txn, "sale.forward", payload.clone(), fp(&key), now, random)
                    .map_err(|e| storage(&e))?;
                let mut sales = txn.open_table(SALES).map_err(|e| storage(&e))?;
                sales
                    .insert(intent.key.as_str(), payload.as_slice())
                    .map_err(|e| storage(&e))?;
                Ok((Verdict::Succeeded, Outcome::new(201, intent.key), ()))
            });
        answered("execute_and_forward", ran)
    }

    fn begin(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let key = self.fresh("charge");
        let record_id = id("shop", "charge", &key);
        match self.store.begin(&record_id, fp(&key), now) {
            Ok(Decision::Claimed { generation, .. }) => {
                self.claims.push((record_id, generation));
                Ok("begin")
            }
            Ok(other) => panic!("a fresh key was not claimed: {other:?}"),
            Err(e) => Err(store_failed("begin", &e)),
        }
    }

    /// Settles a claim: complete (succeeded or failed), release, or mark unknown.
    fn settle(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        if self.claims.is_empty() {
            return self.begin(now);
        }
        let k = self.rng.below(self.claims.len() as u64) as usize;
        let (record_id, generation) = self.claims.swap_remove(k);
        let body = format!("receipt {}", record_id.key());
        let (name, result) = match self.rng.below(10) {
            0..=5 => (
                "complete",
                self.store
                    .complete(
                        &record_id,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(200, body),
                        now,
                    )
                    .map(drop),
            ),
            6 => (
                "complete_failed",
                self.store
                    .complete(
                        &record_id,
                        generation,
                        Verdict::Failed,
                        Outcome::new(402, body),
                        now,
                    )
                    .map(drop),
            ),
            7 => ("release", self.store.release(&record_id, generation, now)),
            _ => {
                let marked = self
                    .store
                    .mark_unknown(&record_id, generation, now)
                    .map(drop);
                if marked.is_ok() {
                    self.unknown.push(record_id);
                }
                ("mark_unknown", marked)
            }
        };
        result.map(|()| name).map_err(|e| store_failed(name, &e))
    }

    fn resolve(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        if self.unknown.is_empty() {
            return self.settle(now);
        }
        let record_id = self.unknown.remove(0);
        let resolution = match self.rng.below(3) {
            0 => Resolution::Succeeded(Outcome::new(200, "checked")),
            1 => Resolution::Failed(Outcome::new(402, "declined")),
            _ => Resolution::NotExecuted,
        };
        match self.store.resolve(&record_id, resolution, now) {
            Ok(_) => Ok("resolve"),
            Err(e) => Err(store_failed("resolve", &e)),
        }
    }

    fn random(&mut self) -> [u8; 16] {
        let mut random = [0; 16];
        random[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        random[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        random
    }

    /// A sale and the intent that forwards it, in one transaction.
    fn enqueue(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let sale = self.fresh("sale");
        let random = self.random();
        let outbox = self.store.outbox(ledger()).unwrap();
        let payload = sale.clone().into_bytes();
        let enqueued = outbox.enqueue_with(
            "sale.forward",
            payload.clone(),
            fp(&sale),
            now,
            random,
            |txn, intent| -> Result<(), idem_store::redb::Error> {
                txn.open_table(SALES)?
                    .insert(intent.key.as_str(), payload.as_slice())?;
                Ok(())
            },
        );
        match enqueued {
            Ok(_) => Ok("enqueue"),
            Err(e) => {
                let reopen = matches!(
                    e,
                    idem_store::outbox::EnqueueError::Outbox(OutboxError::Store(
                        Error::NeedsReopen
                    ))
                );
                Err(failed("enqueue", &e, reopen))
            }
        }
    }

    fn due(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        let outbox = self.store.outbox(ledger()).unwrap();
        match outbox.due(now, 3) {
            Ok(attempts) => {
                self.in_flight.extend(attempts.into_iter().map(|a| a.key));
                Ok("due")
            }
            Err(e) => Err(store_failed("due", &e)),
        }
    }

    /// The receiver's answer to one intent in flight: created, a conflict, a server
    /// error (retried later), or no answer at all.
    fn reply(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        if self.in_flight.is_empty() {
            return self.due(now);
        }
        let key = self.in_flight.remove(0);
        let outbox = self.store.outbox(ledger()).unwrap();
        let status = [201, 201, 201, 409, 500, 0][self.rng.below(6) as usize];
        let answered = if status == 0 {
            outbox.record_transport_error(&key, now)
        } else {
            let reply = Reply {
                status,
                body: format!("reply {status}").into_bytes(),
                retry_at: None,
            };
            outbox.record_reply(&key, reply, now)
        };
        match answered {
            Ok(_) => Ok("reply"),
            Err(OutboxError::Store(e)) => Err(store_failed("reply", &e)),
            Err(e) => panic!("reply to {key}: {e}"),
        }
    }

    fn sweep(&mut self, now: Timestamp) -> Result<&'static str, Failed> {
        // At most one batch: one commit.
        match self.store.sweep(now, 20, false) {
            Ok(_) => Ok("sweep"),
            Err(e) => Err(store_failed("sweep", &e)),
        }
    }

    fn compact(&mut self) -> Result<&'static str, Failed> {
        match self.store.compact() {
            Ok(_) => Ok("compact"),
            Err(MaintainError::Store(e)) => Err(store_failed("compact", &e)),
            Err(e) => Err(failed("compact", &e, false)),
        }
    }

    fn import(&mut self) -> Result<&'static str, Failed> {
        let Some(lines) = self.imports.pop_front() else {
            return self.compact();
        };
        match self.store.import(lines.as_slice()) {
            Ok(_) => Ok("import"),
            Err(ImportError::Store(e)) => Err(store_failed("import", &e)),
            Err(e) => panic!("a valid export was refused: {e}"),
        }
    }
}

/// Why the work of a credit failed.
#[derive(Debug)]
pub enum WorkError {
    /// By design, after its writes: the answer is a rollback.
    Declined,
    /// The business tables could not be written (the storage failed).
    Storage(String),
}

/// Credits `key` in the business tables; with `fail`, fails after the writes.
pub fn credit(
    txn: &WriteTransaction,
    key: &str,
    fail: bool,
) -> Result<(Verdict, Outcome, ()), WorkError> {
    add_credit(txn, key).map_err(WorkError::Storage)?;
    if fail {
        return Err(WorkError::Declined);
    }
    Ok((
        Verdict::Succeeded,
        Outcome::new(200, format!("credited {key}")),
        (),
    ))
}

fn answered<T>(
    step: &'static str,
    ran: Result<T, ExecuteError<WorkError>>,
) -> Result<&'static str, Failed> {
    match ran {
        Ok(_) | Err(ExecuteError::Work(WorkError::Declined)) => Ok(step),
        Err(ExecuteError::Work(WorkError::Storage(message))) => Err(Failed {
            step,
            message,
            needs_reopen: false,
        }),
        Err(ExecuteError::Store(e)) => Err(store_failed(step, &e)),
    }
}

/// An export of a small store (settled, failed and pending records) made in memory, for
/// the import steps: batch `n`, times and generations from `seed`.
fn export_of(n: u64, seed: u64) -> Vec<u8> {
    let source = Store::builder()
        .config(config())
        .open_on_backend(InMemoryBackend::new())
        .unwrap();
    let mut rng = Rng::new(seed);
    let at = Timestamp(START - 1_000_000 + rng.below(1_000));
    for i in 0..3 {
        let key = format!("import-{n}-{i}");
        let verdict = if i == 2 {
            Verdict::Failed
        } else {
            Verdict::Succeeded
        };
        let _ = source
            .execute(&id("shop", "imported", &key), fp(&key), at, |_| {
                Ok::<_, Infallible>((verdict, Outcome::new(200, key.clone()), ()))
            })
            .unwrap();
    }
    let pending = format!("import-{n}-pending");
    source
        .begin(&id("shop", "imported", &pending), fp(&pending), at)
        .unwrap();
    let mut out = Vec::new();
    source.export(&mut out).unwrap();
    out
}
