//! A duplicate that waits (docs/design.md §16). A request whose key is claimed by a
//! request still running may wait for that one's outcome ([`super::Settings::wait_in_flight`])
//! instead of being answered 409 at once, and then gets the replay.
//!
//! The waiters of one key on this layer share one watcher: a task that reads the key's
//! record with a growing pause (20 ms to 500 ms), or at once when this layer settles the
//! key itself, and tells every waiter when the record is no longer the running claim. So
//! a flood of duplicates of one key costs the store one reader, not one per waiter, and
//! no waiter holds a database connection while it waits: across replicas the read finds
//! what another replica settled. Each waiter then lets idem-core decide on the record
//! read (a replay, a conflict, unknown, forgotten) without a store call; only when the
//! key is free again (the running request released it) does one waiter at a time call
//! the store's begin, and may claim and run. The watcher stops when its last waiter is
//! gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Generation, Record, RecordId, Status};
use tokio::sync::{Notify, watch};

use crate::Receiver;

/// The first pause between two reads of a watched key.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The longest pause between two reads of a watched key.
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// How a request's wait for the outcome of its key ended: in the extensions of the
/// response of every request that waited, with [`Waited`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitEnded {
    /// The running request settled (or the key moved on): its answer is this one's.
    Settled,
    /// The running request gave its claim back: this one claimed the key and ran.
    Claimed,
    /// Still running when the wait ran out: 409, as without a wait.
    TimedOut,
}

impl WaitEnded {
    /// Lower-case name: `settled`, `claimed`, `timed_out`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            WaitEnded::Settled => "settled",
            WaitEnded::Claimed => "claimed",
            WaitEnded::TimedOut => "timed_out",
        }
    }
}

/// That a request waited for the outcome of its key, how long, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waited {
    /// How the wait ended.
    pub ended: WaitEnded,
    /// How long it lasted.
    pub took: Duration,
}

/// What a watcher last read of its key.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    /// Still the claim it watches (or the first read is yet to come).
    Running,
    /// The record under the key now (none: the claim was released), which is no longer
    /// the claim watched.
    Moved(Option<Record>),
}

/// One watched key: what its watcher read, a wake-up for a settle of this layer, and
/// the right to call the store's begin once the key is free.
#[derive(Debug)]
struct Watch {
    seen: watch::Sender<Seen>,
    settled: Notify,
    begin_taken: AtomicBool,
}

/// The keys waited on through one layer, each with its watcher.
#[derive(Debug, Default)]
pub(super) struct Watches {
    keys: Mutex<HashMap<RecordId, Arc<Watch>>>,
}

/// A waiter's hold on a watched key.
pub(super) struct Waiting {
    watch: Arc<Watch>,
    seen: watch::Receiver<Seen>,
}

impl Waiting {
    /// What the watcher reads once the key is no longer the running claim; `None` when
    /// `deadline` comes first.
    pub(super) async fn moved(&mut self, deadline: tokio::time::Instant) -> Option<Option<Record>> {
        let moved = tokio::time::timeout_at(
            deadline,
            self.seen.wait_for(|seen| matches!(seen, Seen::Moved(_))),
        )
        .await;
        match moved {
            Ok(Ok(seen)) => match &*seen {
                Seen::Moved(record) => Some(record.clone()),
                Seen::Running => None,
            },
            // The watcher stopped without a word (a runtime shutting down): the key as
            // it was.
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// True for the one waiter of this round that may call the store's begin on a key
    /// that is free again; the others wait for the next round.
    pub(super) fn take_begin(&self) -> bool {
        !self.watch.begin_taken.swap(true, Ordering::AcqRel)
    }
}

impl Watches {
    /// Joins the waiters of `id`, whose running claim has `generation` (any claim, when
    /// `None`), starting its watcher when it has none.
    pub(super) fn join<R: Receiver>(
        self: &Arc<Self>,
        store: &Arc<R>,
        id: &RecordId,
        generation: Option<Generation>,
    ) -> Waiting {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(watch) = keys.get(id) {
            return Waiting {
                seen: watch.seen.subscribe(),
                watch: Arc::clone(watch),
            };
        }
        let (sender, seen) = watch::channel(Seen::Running);
        let watch = Arc::new(Watch {
            seen: sender,
            settled: Notify::new(),
            begin_taken: AtomicBool::new(false),
        });
        keys.insert(id.clone(), Arc::clone(&watch));
        drop(keys);
        tokio::spawn(watcher(
            Arc::clone(store),
            Arc::clone(self),
            id.clone(),
            generation,
            Arc::clone(&watch),
        ));
        Waiting { watch, seen }
    }

    /// This layer settled `id`: its watcher, if it has one, reads at once.
    pub(super) fn settled(&self, id: &RecordId) {
        let keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(watch) = keys.get(id) {
            watch.settled.notify_one();
        }
    }

    /// Takes `watch` of `id` out when no waiter holds it, under the lock a waiter joins
    /// under, so that none joins a watch whose watcher has stopped; true when it did.
    fn remove_unwatched(&self, id: &RecordId, watch: &Arc<Watch>) -> bool {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if watch.seen.receiver_count() > 0 {
            return false;
        }
        if keys
            .get(id)
            .is_some_and(|current| Arc::ptr_eq(current, watch))
        {
            keys.remove(id);
        }
        true
    }

    fn remove(&self, id: &RecordId, watch: &Arc<Watch>) {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys
            .get(id)
            .is_some_and(|current| Arc::ptr_eq(current, watch))
        {
            keys.remove(id);
        }
    }
}

/// Reads `id`'s record until it is no longer the claim of `generation` (any claim when
/// `None`), then tells the waiters; stops early when the last waiter is gone. A failed
/// read is tried again at the next pause.
async fn watcher<R: Receiver>(
    store: Arc<R>,
    watches: Arc<Watches>,
    id: RecordId,
    generation: Option<Generation>,
    watch: Arc<Watch>,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        // A settle of this layer, or the pause.
        let _woken = tokio::time::timeout(pause, watch.settled.notified()).await;
        if watches.remove_unwatched(&id, &watch) {
            return;
        }
        match store.get(&id).await {
            Ok(Some(record))
                if matches!(record.status, Status::Pending { .. })
                    && generation.is_none_or(|g| g == record.generation) => {}
            Ok(record) => {
                // Out of the map first: a waiter that comes after this starts a new
                // round on the record as it is now.
                watches.remove(&id, &watch);
                watch.seen.send_replace(Seen::Moved(record));
                return;
            }
            Err(_) => {}
        }
        pause = (pause * 3 / 2).min(LONGEST_PAUSE);
    }
}
