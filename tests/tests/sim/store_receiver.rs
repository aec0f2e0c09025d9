//! [`Receiver`] over idem-store: the records and the shop's business table in one redb
//! file, the two-phase provider in a file of its own.
//!
//! A crash drops the [`Store`] without finishing the executions in flight and opens the
//! file again: only what was committed remains. The provider is another system and does
//! not crash with the receiver.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, State, Timestamp, Verdict,
};
use idem_store::redb::{self, Database, ReadableDatabase, ReadableTable, TableDefinition};
use idem_store::{Error, ExecuteError, Executed, ListFilter, Store};

use super::business::{self, Execution};
use super::receiver::{Atomic, Receiver, TWO_PHASE_OP, effect_key};

/// The shop's table in the store file: effect key → [`Execution`] bytes.
const SHOP: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.executions");
/// The provider's table in its own file.
const PROVIDER: TableDefinition<&str, &[u8]> = TableDefinition::new("provider.charges");

/// Why the work of an atomic execution failed.
#[derive(Debug)]
enum Work {
    /// On purpose: the injected fault.
    Failed,
    /// The shop's table could not be read or written.
    Storage(redb::Error),
}

/// The receiver's store file and the provider's file.
#[derive(Debug)]
pub(crate) struct StoreReceiver {
    path: PathBuf,
    config: Config,
    clock_floor: bool,
    store: Option<Store>,
    provider: Database,
}

impl StoreReceiver {
    /// Opens (creating) the store at `path` and the provider at `provider`; the store
    /// keeps its clock floor unless `clock_floor` is false.
    ///
    /// # Panics
    ///
    /// When a file cannot be opened: the simulation's own temporary files.
    #[must_use]
    pub(crate) fn open(
        path: PathBuf,
        provider: PathBuf,
        config: Config,
        clock_floor: bool,
    ) -> StoreReceiver {
        let store = open_store(&path, &config, clock_floor);
        let provider = Database::create(provider).expect("provider file");
        StoreReceiver {
            path,
            config,
            clock_floor,
            store: Some(store),
            provider,
        }
    }

    fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the world never calls a crashed receiver")
    }
}

fn open_store(path: &PathBuf, config: &Config, clock_floor: bool) -> Store {
    let mut builder = Store::builder().config(config.clone());
    if !clock_floor {
        // Test-only (idem-store's `test-unfloored-clock` feature): the scenario that
        // shows what the floor prevents.
        builder = builder.without_clock_floor();
    }
    builder
        .open(path)
        .unwrap_or_else(|e| panic!("receiver store {}: {e}", path.display()))
}

/// True when the store refused the input; panics on a storage failure, which the
/// simulation does not inject.
fn refused<T>(result: Result<T, Error>) -> bool {
    match result {
        Ok(_) => false,
        Err(Error::Refused(_)) => true,
        Err(e) => panic!("receiver store failed: {e}"),
    }
}

fn read_row(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Option<Execution> {
    table
        .get(key)
        .expect("business table read")
        .map(|bytes| Execution::decode(bytes.value()))
}

impl Receiver for StoreReceiver {
    fn execute(
        &mut self,
        id: &RecordId,
        fingerprint: Fingerprint,
        payload: &[u8],
        now: Timestamp,
        fail_work: bool,
    ) -> Atomic {
        let key = effect_key(id);
        let work = |txn: &redb::WriteTransaction| -> Result<_, Work> {
            if fail_work {
                return Err(Work::Failed);
            }
            let mut shop = txn.open_table(SHOP).map_err(|e| Work::Storage(e.into()))?;
            let previous = read_row(&shop, &key);
            let (row, verdict, outcome) = business::perform(previous.as_ref(), &key, payload);
            shop.insert(key.as_str(), row.encode().as_slice())
                .map_err(|e| Work::Storage(e.into()))?;
            Ok((verdict, outcome, row.count))
        };
        match self.store().execute(id, fingerprint, now, work) {
            Ok(Executed::Ran { value, record }) => {
                let (verdict, outcome) = match record.status {
                    idem_core::Status::Settled {
                        verdict, outcome, ..
                    } => (verdict, outcome),
                    other => panic!("execute ran and left {other:?}"),
                };
                Atomic::Ran {
                    run: value,
                    verdict,
                    outcome,
                    generation: record.generation,
                }
            }
            Ok(Executed::NotRun(decision)) => Atomic::NotRun(decision),
            Err(ExecuteError::Work(Work::Failed)) => Atomic::RolledBack,
            Err(ExecuteError::Work(Work::Storage(e))) => panic!("shop table: {e}"),
            Err(ExecuteError::Store(e)) => panic!("receiver store failed: {e}"),
        }
    }

    fn begin(&mut self, id: &RecordId, fingerprint: Fingerprint, now: Timestamp) -> Decision {
        self.store()
            .begin(id, fingerprint, now)
            .unwrap_or_else(|e| panic!("receiver store failed: {e}"))
    }

    fn heartbeat(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool {
        !refused(self.store().heartbeat(id, generation, now))
    }

    fn charge(&mut self, id: &RecordId, payload: &[u8]) -> (u32, Verdict, Outcome) {
        let key = effect_key(id);
        let txn = self.provider.begin_write().expect("provider transaction");
        let (run, verdict, outcome) = {
            let mut charges = txn.open_table(PROVIDER).expect("provider table");
            let previous = read_row(&charges, &key);
            let (row, verdict, outcome) = business::perform(previous.as_ref(), &key, payload);
            charges
                .insert(key.as_str(), row.encode().as_slice())
                .expect("provider write");
            (row.count, verdict, outcome)
        };
        txn.commit().expect("provider commit");
        (run, verdict, outcome)
    }

    fn complete(
        &mut self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> bool {
        !refused(self.store().complete(id, generation, verdict, outcome, now))
    }

    fn mark_unknown(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool {
        !refused(self.store().mark_unknown(id, generation, now))
    }

    fn resolve(&mut self, id: &RecordId, resolution: Resolution, now: Timestamp) -> bool {
        !refused(self.store().resolve(id, resolution, now))
    }

    fn sweep(&mut self, now: Timestamp, limit: usize) -> usize {
        let report = self
            .store()
            .sweep(now, limit, false)
            .unwrap_or_else(|e| panic!("sweep failed: {e}"));
        usize::try_from(report.removed).unwrap_or(usize::MAX)
    }

    fn records(&self, state: Option<State>) -> Vec<(RecordId, Record)> {
        let mut out = Vec::new();
        let filter = ListFilter {
            state,
            ..ListFilter::default()
        };
        self.store()
            .list(&filter, |id, record| {
                out.push((id, record));
                ControlFlow::Continue(())
            })
            .unwrap_or_else(|e| panic!("list failed: {e}"));
        out
    }

    fn execution(&self, id: &RecordId) -> Option<Execution> {
        let key = effect_key(id);
        if id.operation() == TWO_PHASE_OP {
            let txn = self.provider.begin_read().expect("provider read");
            match txn.open_table(PROVIDER) {
                Ok(table) => read_row(&table, &key),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => panic!("provider table: {e}"),
            }
        } else {
            self.store()
                .read(|txn| match txn.open_table(SHOP) {
                    Ok(table) => read_row(&table, &key),
                    Err(redb::TableError::TableDoesNotExist(_)) => None,
                    Err(e) => panic!("shop table: {e}"),
                })
                .expect("store read")
        }
    }

    fn executions(&self) -> BTreeMap<String, Execution> {
        let mut all = BTreeMap::new();
        self.store()
            .read(|txn| {
                if let Ok(table) = txn.open_table(SHOP) {
                    for entry in table.iter().expect("shop scan") {
                        let (k, v) = entry.expect("shop row");
                        all.insert(k.value().to_owned(), Execution::decode(v.value()));
                    }
                }
            })
            .expect("store read");
        let txn = self.provider.begin_read().expect("provider read");
        if let Ok(table) = txn.open_table(PROVIDER) {
            for entry in table.iter().expect("provider scan") {
                let (k, v) = entry.expect("provider row");
                all.insert(k.value().to_owned(), Execution::decode(v.value()));
            }
        }
        all
    }

    fn crash(&mut self) {
        // Dropping the store without finishing: executors in flight are gone, and with
        // them every write they had not committed.
        self.store = None;
    }

    fn restart(&mut self) {
        self.store = Some(open_store(&self.path, &self.config, self.clock_floor));
    }
}
