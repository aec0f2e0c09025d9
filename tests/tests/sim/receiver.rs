//! The receiver's storage as the simulation sees it: the [`Receiver`] trait, and its
//! in-memory implementation over idem-core's [`MemoryReceiver`].
//!
//! A receiver keeps idem's records and two business tables: the shop's own table,
//! written by the atomic path in the same transaction as the settled record, and an
//! external provider's, written by the two-phase path between begin and complete.
//! Every method is one committed transaction; [`Receiver::crash`] keeps
//! exactly what was committed.

use std::collections::BTreeMap;

use idem_core::memory::MemoryReceiver;
use idem_core::protocol::{Decision, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, Outcome, Record, RecordId, State, Timestamp, Verdict,
};

use super::business::{self, Execution};

/// The operation executed with the store's atomic execute.
pub(crate) const ATOMIC_OP: &str = "sale.forward";
/// The operation executed on the two-phase path, against an external provider.
pub(crate) const TWO_PHASE_OP: &str = "card.charge";

/// The business table row name of the intent behind `id`: `tenant/key`.
#[must_use]
pub(crate) fn effect_key(id: &RecordId) -> String {
    intent_name(id.tenant(), id.key())
}

/// The name of the intent `key` of the sender `tenant`, in logs and business tables.
#[must_use]
pub(crate) fn intent_name(tenant: &str, key: &str) -> String {
    format!("{tenant}/{key}")
}

/// What the atomic path did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Atomic {
    /// Claimed, ran the effect and settled, in one transaction.
    Ran {
        /// Which run of the effect this was (1 the first time).
        run: u32,
        /// The verdict committed.
        verdict: Verdict,
        /// The outcome committed.
        outcome: Outcome,
        /// The generation of the claim (the record's, as committed).
        generation: Generation,
    },
    /// Did not run; the protocol's answer.
    NotRun(Decision),
    /// The work failed and everything rolled back: nothing happened.
    RolledBack,
}

/// A receiver's storage: idem's records plus the business tables.
pub(crate) trait Receiver {
    /// Atomic execute of an [`ATOMIC_OP`] request: claim, run the effect, settle, in one
    /// transaction. With `fail_work` the work returns an error and nothing commits.
    fn execute(
        &mut self,
        id: &RecordId,
        fingerprint: Fingerprint,
        payload: &[u8],
        now: Timestamp,
        fail_work: bool,
    ) -> Atomic;

    /// Two-phase begin: commits a Pending claim on [`Decision::Claimed`].
    fn begin(&mut self, id: &RecordId, fingerprint: Fingerprint, now: Timestamp) -> Decision;

    /// Extends the lease of `generation`; false when it is no longer the current claim.
    fn heartbeat(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool;

    /// The external effect of the two-phase path: the provider runs it once more, in its
    /// own transaction, and answers with the run number, verdict and outcome.
    fn charge(&mut self, id: &RecordId, payload: &[u8]) -> (u32, Verdict, Outcome);

    /// Settles the claim of `generation`; false when refused.
    fn complete(
        &mut self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> bool;

    /// Turns the claim of `generation` Unknown; false when refused.
    fn mark_unknown(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool;

    /// Resolves an Unknown record; false when refused.
    fn resolve(&mut self, id: &RecordId, resolution: Resolution, now: Timestamp) -> bool;

    /// Deletes up to `limit` expired settled records; returns how many.
    fn sweep(&mut self, now: Timestamp, limit: usize) -> usize;

    /// The records in `state`, or every record.
    fn records(&self, state: Option<State>) -> Vec<(RecordId, Record)>;

    /// The business row of the intent behind `id`, in the table its operation writes.
    fn execution(&self, id: &RecordId) -> Option<Execution>;

    /// Every business row of both tables, by effect key.
    fn executions(&self) -> BTreeMap<String, Execution>;

    /// Crash: the process dies with its executors; everything not committed is lost.
    /// No other method is called until [`Receiver::restart`].
    fn crash(&mut self);

    /// Start again from what was committed.
    fn restart(&mut self);
}

/// [`Receiver`] over [`MemoryReceiver`] and two maps.
#[derive(Debug)]
pub(crate) struct MemoryStore {
    records: MemoryReceiver,
    shop: BTreeMap<String, Execution>,
    provider: BTreeMap<String, Execution>,
    // What survives a crash: the records as of the last commit (every call commits).
    committed: Option<Vec<u8>>,
}

impl MemoryStore {
    /// An empty receiver with `config`.
    #[must_use]
    pub(crate) fn new(config: Config) -> MemoryStore {
        MemoryStore {
            records: MemoryReceiver::new(config),
            shop: BTreeMap::new(),
            provider: BTreeMap::new(),
            committed: None,
        }
    }
}

impl Receiver for MemoryStore {
    fn execute(
        &mut self,
        id: &RecordId,
        fingerprint: Fingerprint,
        payload: &[u8],
        now: Timestamp,
        fail_work: bool,
    ) -> Atomic {
        // Claim, run and settle back to back: no other input runs in between, which is
        // what one transaction gives the durable store.
        let before = fail_work.then(|| self.records.snapshot());
        // A simulation makes a few thousand claims: the counter never reaches its end.
        let decision = self
            .records
            .begin(id, fingerprint, now)
            .expect("generations left");
        match decision {
            Decision::Claimed { generation, .. } => {
                if let Some(before) = before {
                    self.records = MemoryReceiver::restore(&before).expect("own snapshot");
                    return Atomic::RolledBack;
                }
                let key = effect_key(id);
                let (row, verdict, outcome) = business::perform(self.shop.get(&key), &key, payload);
                self.records
                    .complete(id, generation, verdict, outcome.clone(), now)
                    .expect("the claim just made completes");
                let run = row.count;
                self.shop.insert(key, row);
                Atomic::Ran {
                    run,
                    verdict,
                    outcome,
                    generation,
                }
            }
            decision => Atomic::NotRun(decision),
        }
    }

    fn begin(&mut self, id: &RecordId, fingerprint: Fingerprint, now: Timestamp) -> Decision {
        self.records
            .begin(id, fingerprint, now)
            .expect("a simulation's claims never exhaust the counter")
    }

    fn heartbeat(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool {
        self.records.heartbeat(id, generation, now).is_ok()
    }

    fn charge(&mut self, id: &RecordId, payload: &[u8]) -> (u32, Verdict, Outcome) {
        let key = effect_key(id);
        let (row, verdict, outcome) = business::perform(self.provider.get(&key), &key, payload);
        let run = row.count;
        self.provider.insert(key, row);
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
        self.records
            .complete(id, generation, verdict, outcome, now)
            .is_ok()
    }

    fn mark_unknown(&mut self, id: &RecordId, generation: Generation, now: Timestamp) -> bool {
        self.records.mark_unknown(id, generation, now).is_ok()
    }

    fn resolve(&mut self, id: &RecordId, resolution: Resolution, now: Timestamp) -> bool {
        self.records.resolve(id, resolution, now).is_ok()
    }

    fn sweep(&mut self, now: Timestamp, limit: usize) -> usize {
        self.records.sweep(now, limit).len()
    }

    fn records(&self, state: Option<State>) -> Vec<(RecordId, Record)> {
        self.records
            .iter()
            .filter(|(_, r)| state.is_none_or(|s| r.state() == s))
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect()
    }

    fn execution(&self, id: &RecordId) -> Option<Execution> {
        let table = if id.operation() == TWO_PHASE_OP {
            &self.provider
        } else {
            &self.shop
        };
        table.get(&effect_key(id)).cloned()
    }

    fn executions(&self) -> BTreeMap<String, Execution> {
        let mut all = self.shop.clone();
        all.extend(self.provider.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }

    fn crash(&mut self) {
        self.committed = Some(self.records.snapshot());
    }

    fn restart(&mut self) {
        let committed = self.committed.take().expect("restart follows a crash");
        self.records = MemoryReceiver::restore(&committed).expect("own snapshot");
    }
}
