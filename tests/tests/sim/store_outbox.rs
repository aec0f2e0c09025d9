//! [`Outbox`] over idem-store: each sender's sales table and intents in its own redb
//! file, and the [`Durable`] backend that makes these senders and a
//! [`StoreReceiver`] in a temporary directory.
//!
//! A crash drops the [`Store`]: only what was committed remains. A restart opens the
//! file again and calls [`idem_store::outbox::Outbox::restart`], as an application does when
//! it starts.

use std::path::{Path, PathBuf};

use idem_core::ledger::Effect;
use idem_core::{Attempt, Fingerprint, Intent, LedgerConfig, Reply, Timestamp};
use idem_store::Store;
use idem_store::outbox::EnqueueError;
use idem_store::outbox::IntentFilter;
use idem_store::redb::{self, ReadableTable, TableDefinition};

use super::sender::Outbox;
use super::store_receiver::StoreReceiver;
use super::{Backend, SimConfig};

/// The sender's own table: intent key → sale payload.
const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");

/// Why a sale did not commit.
#[derive(Debug)]
enum SaleError {
    /// On purpose: the injected fault, after the intent was written.
    Failed,
    /// The sales table could not be written.
    Storage(redb::Error),
}

/// One sender's store file.
#[derive(Debug)]
pub(crate) struct StoreOutbox {
    path: PathBuf,
    config: LedgerConfig,
    store: Option<Store>,
}

impl StoreOutbox {
    /// Opens (creating) the sender's file at `path`.
    ///
    /// # Panics
    ///
    /// When the file cannot be opened: the simulation's own temporary file.
    #[must_use]
    pub(crate) fn open(path: PathBuf, config: LedgerConfig) -> StoreOutbox {
        let mut outbox = StoreOutbox {
            path,
            config,
            store: None,
        };
        outbox.restart();
        outbox
    }

    fn outbox(&self) -> idem_store::outbox::Outbox {
        self.store
            .as_ref()
            .expect("the world never calls a crashed sender")
            .outbox(self.config.clone())
            .expect("simulation ledger config")
    }
}

fn fail<T>(what: &str, e: impl std::fmt::Display) -> T {
    panic!("sender outbox {what} failed: {e}")
}

impl Outbox for StoreOutbox {
    fn create_sale(
        &mut self,
        operation: &str,
        payload: Vec<u8>,
        now: Timestamp,
        random: [u8; 16],
        fail_sale: bool,
    ) -> Option<Intent> {
        let fingerprint = Fingerprint::of_bytes(&payload);
        let sale = payload.clone();
        let created = self.outbox().enqueue_with(
            operation,
            payload,
            fingerprint,
            now,
            random,
            |txn, intent| {
                let mut sales = txn
                    .open_table(SALES)
                    .map_err(|e| SaleError::Storage(e.into()))?;
                sales
                    .insert(intent.key.as_str(), sale.as_slice())
                    .map_err(|e| SaleError::Storage(e.into()))?;
                // The sale's last write fails: everything above rolls back with it.
                if fail_sale {
                    return Err(SaleError::Failed);
                }
                Ok(())
            },
        );
        match created {
            Ok((intent, ())) => Some(intent),
            Err(EnqueueError::Work(SaleError::Failed)) => None,
            Err(EnqueueError::Work(SaleError::Storage(e))) => fail("sales table", e),
            Err(EnqueueError::Outbox(e)) => fail("enqueue", e),
        }
    }

    fn due(&mut self, now: Timestamp) -> Vec<Attempt> {
        self.outbox()
            .due(now, usize::MAX)
            .unwrap_or_else(|e| fail("due", e))
    }

    fn on_reply(&mut self, key: &str, reply: Reply, now: Timestamp) -> Effect {
        self.outbox()
            .record_reply(key, reply, now)
            .unwrap_or_else(|e| fail("record_reply", e))
    }

    fn on_transport_error(&mut self, key: &str, now: Timestamp) -> Effect {
        self.outbox()
            .record_transport_error(key, now)
            .unwrap_or_else(|e| fail("record_transport_error", e))
    }

    fn next_wakeup(&self) -> Option<Timestamp> {
        self.outbox()
            .next_wakeup()
            .unwrap_or_else(|e| fail("next_wakeup", e))
    }

    fn intent(&self, key: &str) -> Option<Intent> {
        self.outbox()
            .intent(key)
            .unwrap_or_else(|e| fail("intent", e))
    }

    fn intents(&self) -> Vec<Intent> {
        self.outbox()
            .intents(&IntentFilter::default())
            .unwrap_or_else(|e| fail("intents", e))
    }

    fn sales(&self) -> Vec<String> {
        let store = self.store.as_ref().expect("sender is up");
        store
            .read(|txn| match txn.open_table(SALES) {
                Ok(sales) => sales
                    .iter()
                    .expect("sales scan")
                    .map(|entry| entry.expect("sales row").0.value().to_owned())
                    .collect(),
                Err(redb::TableError::TableDoesNotExist(_)) => Vec::new(),
                Err(e) => fail("sales table", e),
            })
            .unwrap_or_else(|e| fail("read", e))
    }

    fn crash(&mut self) {
        self.store = None;
    }

    fn restart(&mut self) {
        let store = Store::open(&self.path)
            .unwrap_or_else(|e| panic!("sender store {}: {e}", self.path.display()));
        self.store = Some(store);
        self.outbox()
            .restart()
            .unwrap_or_else(|e| fail("restart", e));
    }
}

/// Every sender and the receiver on idem-store, in files under one temporary
/// directory that is removed when the backend is dropped.
#[derive(Debug)]
pub(crate) struct Durable {
    dir: tempfile::TempDir,
}

impl Durable {
    /// A fresh directory under `base` (the system's temporary directory when `None`).
    ///
    /// # Panics
    ///
    /// When the directory cannot be made.
    #[must_use]
    pub(crate) fn new(base: Option<&Path>) -> Durable {
        let dir = match base {
            Some(base) => tempfile::tempdir_in(base),
            None => tempfile::tempdir(),
        };
        Durable {
            dir: dir.expect("temporary directory for the simulation"),
        }
    }
}

impl Backend for Durable {
    type Sender = StoreOutbox;
    type Receiver = StoreReceiver;

    fn sender(&mut self, index: usize, config: LedgerConfig) -> StoreOutbox {
        StoreOutbox::open(self.dir.path().join(format!("sender-{index}.redb")), config)
    }

    fn receiver(&mut self, config: &SimConfig) -> StoreReceiver {
        StoreReceiver::open(
            self.dir.path().join("receiver.redb"),
            self.dir.path().join("provider.redb"),
            config.receiver.clone(),
            config.clock_floor,
        )
    }
}
