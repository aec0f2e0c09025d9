//! An in-memory receiver: the protocol applied to a `BTreeMap`, for tests, simulations
//! and service workers that keep no file.
//!
//! It is the smallest correct driver of [`crate::protocol`]: each call reads the record,
//! runs the transition and applies its write before answering, exactly as a durable
//! store does inside one transaction. It holds the store-wide generation counter.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::protocol::{self, Decision, Refusal, Resolution, Write};
use crate::{
    Config, DecodeError, Fingerprint, Generation, Outcome, Record, RecordId, Timestamp, Verdict,
};

/// Records by id, plus the generation counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReceiver {
    config: Config,
    generation: Generation,
    records: BTreeMap<RecordId, Record>,
}

impl MemoryReceiver {
    /// An empty receiver with `config`.
    #[must_use]
    pub fn new(config: Config) -> MemoryReceiver {
        MemoryReceiver {
            config,
            generation: Generation(0),
            records: BTreeMap::new(),
        }
    }

    /// The settings in force.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The last generation handed out (0 before the first claim).
    #[must_use]
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The record under `id`, if any.
    #[must_use]
    pub fn get(&self, id: &RecordId) -> Option<&Record> {
        self.records.get(id)
    }

    /// Every record, ordered by id.
    pub fn iter(&self) -> impl Iterator<Item = (&RecordId, &Record)> {
        self.records.iter()
    }

    /// A request with `fingerprint` arrives for `id`; see [`protocol::begin`].
    pub fn begin(&mut self, id: &RecordId, fingerprint: Fingerprint, now: Timestamp) -> Decision {
        let next = self.generation.next();
        let t = protocol::begin(self.records.get(id), fingerprint, next, now, &self.config);
        if matches!(t.decision, Decision::Claimed { .. }) {
            self.generation = next;
        }
        self.apply(id, t.write);
        t.decision
    }

    /// See [`protocol::heartbeat`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn heartbeat(
        &mut self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let write = protocol::heartbeat(self.records.get(id), generation, now, &self.config)?;
        self.apply(id, write);
        Ok(())
    }

    /// See [`protocol::complete`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn complete(
        &mut self,
        id: &RecordId,
        generation: Generation,
        verdict: Verdict,
        outcome: Outcome,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let write = protocol::complete(
            self.records.get(id),
            generation,
            verdict,
            outcome,
            now,
            &self.config,
        )?;
        self.apply(id, write);
        Ok(())
    }

    /// See [`protocol::release`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn release(&mut self, id: &RecordId, generation: Generation) -> Result<(), Refusal> {
        let write = protocol::release(self.records.get(id), generation)?;
        self.apply(id, write);
        Ok(())
    }

    /// See [`protocol::mark_unknown`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn mark_unknown(
        &mut self,
        id: &RecordId,
        generation: Generation,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let write = protocol::mark_unknown(self.records.get(id), generation, now)?;
        self.apply(id, write);
        Ok(())
    }

    /// See [`protocol::resolve`].
    ///
    /// # Errors
    ///
    /// The [`Refusal`]; nothing changes.
    pub fn resolve(
        &mut self,
        id: &RecordId,
        resolution: Resolution,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        let write = protocol::resolve(self.records.get(id), resolution, now, &self.config)?;
        self.apply(id, write);
        Ok(())
    }

    /// Deletes up to `limit` settled records past their expiry, oldest expiry first, and
    /// returns their ids. Pending and Unknown records are never swept.
    pub fn sweep(&mut self, now: Timestamp, limit: usize) -> Vec<RecordId> {
        let mut expired: Vec<(Timestamp, RecordId)> = self
            .records
            .iter()
            .filter(|(_, r)| protocol::sweepable(r, now))
            .filter_map(|(id, r)| Some((r.expires_at()?, id.clone())))
            .collect();
        expired.sort();
        expired.truncate(limit);
        expired
            .into_iter()
            .map(|(_, id)| {
                self.records.remove(&id);
                id
            })
            .collect()
    }

    /// The persisted bytes of the whole receiver.
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        crate::encoding::encode(self)
    }

    /// A receiver from bytes made by [`MemoryReceiver::snapshot`].
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for bytes that do not decode or hold an invalid id.
    pub fn restore(bytes: &[u8]) -> Result<MemoryReceiver, DecodeError> {
        let receiver: MemoryReceiver = crate::encoding::decode(bytes, "receiver snapshot")?;
        if receiver.records.keys().any(|id| id.validate().is_err())
            || receiver
                .records
                .values()
                .any(|r| r.generation > receiver.generation)
        {
            return Err(DecodeError::Invalid {
                what: "receiver snapshot",
            });
        }
        Ok(receiver)
    }

    fn apply(&mut self, id: &RecordId, write: Write) {
        match write {
            Write::Nothing => {}
            Write::Put(record) => {
                self.records.insert(id.clone(), record);
            }
            Write::Delete => {
                self.records.remove(id);
            }
        }
    }
}
