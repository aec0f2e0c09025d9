//! Settlements the store could not take yet (docs/design.md §10): the upstream answered,
//! the client got that answer, and the store failed the settle (a full disk, a database
//! that refuses writes). The layer keeps the outcome in memory, within a bound, and
//! stores it once the store takes writes again; meanwhile a request under the key is
//! answered in progress (or waits), never run again and never told the outcome is
//! unknown while the process lives. A process that dies first leaves the claim to its
//! lease, as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::{Generation, RecordId};

/// The most outcome bytes kept at once, 64 MiB: past it a settlement that fails is left
/// to its claim's lease (counted in [`Unsettled::dropped`]).
pub(super) const KEPT_BYTES: usize = 64 << 20;

/// The settlements a layer keeps until the store takes them.
#[derive(Debug, Default)]
pub(super) struct Settling {
    keys: Mutex<Kept>,
    dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct Kept {
    by_key: HashMap<RecordId, (Generation, usize)>,
    bytes: usize,
}

/// The settlements a layer keeps until the store takes them, for metrics and health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unsettled {
    /// Keys whose outcome waits to be stored.
    pub keys: usize,
    /// The bytes of those outcomes.
    pub bytes: usize,
    /// Settlements that failed when the bound was reached, left to their claims'
    /// leases, since the layer was made.
    pub dropped: u64,
}

impl Settling {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the settlement of `id`'s claim `generation`, of `bytes`; false (counted as
    /// dropped) when that would pass [`KEPT_BYTES`].
    pub(super) fn keep(&self, id: &RecordId, generation: Generation, bytes: usize) -> bool {
        let mut kept = self.kept();
        if kept.bytes.saturating_add(bytes) > KEPT_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        kept.bytes += bytes;
        if let Some((_, before)) = kept.by_key.insert(id.clone(), (generation, bytes)) {
            kept.bytes -= before;
        }
        true
    }

    /// The settlement of `id` is stored (or no longer this layer's to store).
    pub(super) fn stored(&self, id: &RecordId) {
        let mut kept = self.kept();
        if let Some((_, bytes)) = kept.by_key.remove(id) {
            kept.bytes -= bytes;
        }
    }

    /// The claim of `id` whose settlement waits to be stored, if there is one.
    pub(super) fn waiting(&self, id: &RecordId) -> Option<Generation> {
        self.kept()
            .by_key
            .get(id)
            .map(|(generation, _)| *generation)
    }

    /// What is kept now.
    pub(super) fn unsettled(&self) -> Unsettled {
        let kept = self.kept();
        Unsettled {
            keys: kept.by_key.len(),
            bytes: kept.bytes,
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}
