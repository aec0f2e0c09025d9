//! The sender's durable outbox as the simulation sees it: the [`Outbox`] trait, and its
//! in-memory implementation over idem-core's [`Ledger`].
//!
//! A sender keeps a sales table and its intents. A sale and the intent that forwards it
//! are created together or not at all; every method is one committed transaction, and
//! [`Outbox::crash`] keeps exactly what was committed, with in-flight
//! intents queued again.

use std::collections::BTreeMap;

use idem_core::ledger::Effect;
use idem_core::{Attempt, Fingerprint, Intent, Ledger, LedgerConfig, Reply, Timestamp};

/// A sender's storage: sales and the intents that forward them.
pub(crate) trait Outbox {
    /// Records a sale with `payload` and creates its intent in the same transaction.
    /// With `fail_sale` the sale's own write fails and neither exists. Returns the
    /// intent created.
    fn create_sale(
        &mut self,
        operation: &str,
        payload: Vec<u8>,
        now: Timestamp,
        random: [u8; 16],
        fail_sale: bool,
    ) -> Option<Intent>;

    /// Expires what passed its deadline and puts the due intents in flight, durably;
    /// returns what to send.
    fn due(&mut self, now: Timestamp) -> Vec<Attempt>;

    /// Records the receiver's reply for `key`.
    fn on_reply(&mut self, key: &str, reply: Reply, now: Timestamp) -> Effect;

    /// Records that the attempt in flight for `key` got no reply.
    fn on_transport_error(&mut self, key: &str, now: Timestamp) -> Effect;

    /// When [`Outbox::due`] has something to do next.
    fn next_wakeup(&self) -> Option<Timestamp>;

    /// The intent with `key`.
    fn intent(&self, key: &str) -> Option<Intent>;

    /// Every intent.
    fn intents(&self) -> Vec<Intent>;

    /// The intent key of every sale in the sales table.
    fn sales(&self) -> Vec<String>;

    /// Crash: the process dies; everything not committed is lost. No other method is
    /// called until [`Outbox::restart`].
    fn crash(&mut self);

    /// Start again from what was committed: in-flight intents are queued again with
    /// their keys.
    fn restart(&mut self);
}

/// [`Outbox`] over [`Ledger`] and a map of sales.
#[derive(Debug)]
pub(crate) struct MemoryOutbox {
    ledger: Ledger,
    sales: BTreeMap<String, Vec<u8>>,
    // What survives a crash: the ledger as of its last commit (every call commits).
    committed: Option<Vec<u8>>,
}

impl MemoryOutbox {
    /// An empty outbox.
    ///
    /// # Panics
    ///
    /// On a config the ledger refuses: the simulation's own settings.
    #[must_use]
    pub(crate) fn new(config: LedgerConfig) -> MemoryOutbox {
        MemoryOutbox {
            ledger: Ledger::new(config).expect("simulation ledger config"),
            sales: BTreeMap::new(),
            committed: None,
        }
    }
}

impl Outbox for MemoryOutbox {
    fn create_sale(
        &mut self,
        operation: &str,
        payload: Vec<u8>,
        now: Timestamp,
        random: [u8; 16],
        fail_sale: bool,
    ) -> Option<Intent> {
        if fail_sale {
            return None;
        }
        let fingerprint = Fingerprint::of_bytes(&payload);
        let intent = self
            .ledger
            .begin(operation, payload.clone(), fingerprint, now, random)
            .expect("fresh random bytes make a fresh key")
            .clone();
        self.sales.insert(intent.key.clone(), payload);
        Some(intent)
    }

    fn due(&mut self, now: Timestamp) -> Vec<Attempt> {
        self.ledger.due(now)
    }

    fn on_reply(&mut self, key: &str, reply: Reply, now: Timestamp) -> Effect {
        self.ledger
            .on_reply(key, reply, now)
            .expect("replies name keys this sender made")
    }

    fn on_transport_error(&mut self, key: &str, now: Timestamp) -> Effect {
        self.ledger
            .on_transport_error(key, now)
            .expect("timeouts name keys this sender made")
    }

    fn next_wakeup(&self) -> Option<Timestamp> {
        self.ledger.next_wakeup()
    }

    fn intent(&self, key: &str) -> Option<Intent> {
        self.ledger.get(key).cloned()
    }

    fn intents(&self) -> Vec<Intent> {
        self.ledger.iter().cloned().collect()
    }

    fn sales(&self) -> Vec<String> {
        self.sales.keys().cloned().collect()
    }

    fn crash(&mut self) {
        self.committed = Some(self.ledger.snapshot());
    }

    fn restart(&mut self) {
        // Restore applies the restart: in flight → queued, same key.
        let committed = self.committed.take().expect("restart follows a crash");
        self.ledger = Ledger::restore(&committed).expect("own snapshot");
    }
}
