//! The claims this replica made and has not let go of yet: what a one-statement
//! heartbeat, complete or mark unknown returns besides what its statement wrote. MariaDB's
//! `UPDATE` returns no row, so the record's fingerprint and creation time, which those
//! inputs never change, come from here; a claim not found here (made by another replica,
//! or dropped when the map was full) takes the two-statement path, a read and a write.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use idem_core::{Fingerprint, Generation, Record, RecordId, Timestamp};

/// How many claims are kept at most. A claim whose caller never let go of it (a
/// library caller that dropped it) stays until the map is full; then the map is emptied,
/// and the claims held then take the two-statement path.
const LIMIT: usize = 65_536;

/// A claim of this replica: its generation, fingerprint and creation time.
#[derive(Debug, Clone, Copy)]
struct Claim {
    generation: Generation,
    fingerprint: Fingerprint,
    created_at: Timestamp,
}

/// The claims of this replica, by key.
#[derive(Debug, Default)]
pub(super) struct Held {
    claims: Mutex<HashMap<RecordId, Claim>>,
}

impl Held {
    /// Keeps the claim `record` of `id` that this replica wrote.
    pub(super) fn keep(&self, id: &RecordId, record: &Record) {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        if claims.len() >= LIMIT && !claims.contains_key(id) {
            claims.clear();
        }
        claims.insert(
            id.clone(),
            Claim {
                generation: record.generation,
                fingerprint: record.fingerprint,
                created_at: record.created_at,
            },
        );
    }

    /// The fingerprint and creation time of this replica's claim of `id` of
    /// `generation`, if it holds that one.
    pub(super) fn of(
        &self,
        id: &RecordId,
        generation: Generation,
    ) -> Option<(Fingerprint, Timestamp)> {
        let claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        claims
            .get(id)
            .filter(|claim| claim.generation == generation)
            .map(|claim| (claim.fingerprint, claim.created_at))
    }

    /// Lets go of the claim of `id` of `generation` (settled, released, marked unknown).
    pub(super) fn forget(&self, id: &RecordId, generation: Generation) {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        if claims
            .get(id)
            .is_some_and(|claim| claim.generation == generation)
        {
            claims.remove(id);
        }
    }
}
