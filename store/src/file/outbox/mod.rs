//! The sender's outbox: intents kept in the store file, next to the records and the
//! application's own tables, moved by idem-core's per-intent ledger transitions.
//!
//! Every call is one write transaction: read the intent, run its transition, write it
//! back with its indexes, commit, and only then answer. [`Outbox::due`] commits the
//! intents it puts in flight before the caller sends them; a crash after that commit
//! leaves them in flight, and [`Outbox::restart`] (call it once when the application
//! starts) queues them again with the same key, which the receiver's dedup makes safe.
//!
//! | table | key | value |
//! |---|---|---|
//! | `idem.intents` | the intent's key (UUIDv7, so creation order) | [`Intent::encode`] |
//! | `idem.intent.due` | `next_attempt_at` (u64 big-endian) ++ key | `()`; queued intents only |
//! | `idem.intent.state` | state byte (position in [`IntentState::ALL`]) ++ key | `()` |
//! | `idem.meta` | `b"intent.rng"` | the [`BackoffRng`] (format byte + postcard) |
//! | `idem.meta` | `b"intent.keys"` | the key generator: format byte 1, a 32-byte seed, an 8-byte counter (big-endian) |
//!
//! A queued intent's `next_attempt_at` is never past its deadline while the deadline
//! guard is on, so the due index alone finds every intent that must be sent or expired.
//!
//! An expired intent (no definitive answer before its deadline) stays in the file until
//! someone who asked the receiver records what happened with [`Outbox::resolve`]
//! (`idem intents resolve`); [`Outbox::forget`] refuses it before that.

use std::convert::Infallible;
use std::sync::Arc;

use idem_core::ledger::{BackoffRng, Poll};
use idem_core::{
    Attempt, Effect, Fingerprint, Intent, IntentState, LedgerConfig, LedgerConfigError,
    LedgerError, Reply, ResolvedAs, Timestamp, encoding,
};
use redb::{ReadableTable, WriteTransaction};

use crate::error::Error;
use crate::file::handle::guard_read;
use crate::file::schema::{META, open_read};
use crate::file::store::{Shared, Store};

#[cfg(feature = "sender-http")]
pub(crate) mod http;
pub(crate) mod sender;
mod tables;

pub(crate) use tables::{
    check as check_intents, count as count_intents, count_by_state as count_intents_by_state,
    for_each as for_each_intent, import as import_intent,
};

use tables::{
    DUE, INTENTS, IntentTables, RNG_KEY, STATES, decode_intent, decode_key, draw_key_random,
    read_intent, read_rng, split_due_key, state_byte,
};

/// What can go wrong with an outbox call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The ledger refused the input: an invalid operation, a key made twice, a key no
    /// intent has, forgetting an intent that is not settled (queued, in flight, expired
    /// and not resolved), resolving one that is not expired, a bad reason. Nothing was
    /// written.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The store failed; see [`Error`].
    #[error(transparent)]
    Store(#[from] Error),
}

/// What [`Outbox::enqueue_with`] can report.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError<E> {
    /// The caller's work returned an error: its writes and the intent were rolled back
    /// together, nothing exists.
    #[error("the work failed and was rolled back with its intent: {0}")]
    Work(E),
    /// The intent could not be created, or the store failed; nothing was committed
    /// (for [`Error::CommitFailed`], the outcome is unknown until the store is reopened).
    #[error(transparent)]
    Outbox(#[from] OutboxError),
}

impl<E> From<Error> for EnqueueError<E> {
    fn from(e: Error) -> EnqueueError<E> {
        EnqueueError::Outbox(OutboxError::Store(e))
    }
}

/// Which intents [`Outbox::intents`] returns. The default returns all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntentFilter {
    /// Only intents in this state.
    pub state: Option<IntentState>,
    /// At most this many.
    pub limit: Option<usize>,
}

/// The sender's intents in this store's file, retried with one [`LedgerConfig`].
///
/// Get it with [`crate::Store::outbox`]; it shares the store's file (it may outlive the
/// `Store`, and live beside it in one struct; the file stays open, and locked, until
/// the last of them is dropped) and is cheap to make. Use the
/// same config every time the file is opened: the deadline of an intent is fixed when
/// it is created, the backoff settings apply to each retry.
///
/// ```
/// use idem_store::outbox::{IntentState, LedgerConfig, Reply};
/// use idem_store::{Fingerprint, Store, Timestamp};
/// use idem_store::redb::TableDefinition;
///
/// const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("terminal.redb"))?;
/// let outbox = store.outbox(LedgerConfig::with_seed(7))?;
/// outbox.restart()?; // once at start-up: requeue what a crash left in flight
///
/// // The sale and the intent that forwards it commit together, or neither does.
/// let payload = br#"{"sale":17,"amount":1250}"#.to_vec();
/// let now = Timestamp(1_700_000_000_000);
/// let (intent, ()) = outbox.enqueue_with(
///     "sale.forward",
///     payload.clone(),
///     Fingerprint::of_bytes(&payload),
///     now,
///     [9; 16], // 16 fresh bytes from the OS in a real terminal
///     |txn, intent| -> Result<(), idem_store::redb::Error> {
///         txn.open_table(SALES)?.insert(intent.key.as_str(), payload.as_slice())?;
///         Ok(())
///     },
/// )?;
///
/// // Due intents are in flight (committed) before they are sent.
/// let attempts = outbox.due(now, 100)?;
/// assert_eq!(attempts[0].key, intent.key);
/// // ... send with the key in the Idempotency-Key header; the server answers 201:
/// let reply = Reply { status: 201, body: b"receipt 17".to_vec(), retry_at: None };
/// outbox.record_reply(&intent.key, reply, now)?;
/// assert_eq!(outbox.intent(&intent.key)?.unwrap().state, IntentState::Completed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Outbox {
    /// The store's file, shared: an outbox outlives the `Store` it came from, so an
    /// application may keep both in one struct.
    shared: Arc<Shared>,
    config: LedgerConfig,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// The outbox of the store `shared` is, with `config` checked.
    pub(crate) fn new(
        shared: Arc<Shared>,
        config: LedgerConfig,
    ) -> Result<Outbox, LedgerConfigError> {
        config.validate()?;
        Ok(Outbox { shared, config })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// Starts a new intent in its own transaction: a fresh key from `now` and `random`
    /// (16 bytes from the OS's secure random source), queued and due at once. Call once
    /// per user action, never for a retry.
    ///
    /// # Errors
    ///
    /// [`OutboxError::Ledger`] for an invalid operation or a repeated key; storage errors.
    pub fn enqueue(
        &self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: [u8; 16],
    ) -> Result<Intent, OutboxError> {
        let work = |_: &WriteTransaction, _: &Intent| Ok::<(), Infallible>(());
        match self.enqueue_with(operation, payload, fingerprint, now, random, work) {
            Ok((intent, ())) => Ok(intent),
            Err(EnqueueError::Outbox(e)) => Err(e),
            Err(EnqueueError::Work(never)) => match never {},
        }
    }

    /// Starts a new intent and runs the caller's `work` in the same write transaction:
    /// the business rows it writes (a sale) and the intent that forwards them commit
    /// together, or neither does. `work` gets the transaction for its own tables (any
    /// name not starting with `idem.`) and the intent, to store its key.
    ///
    /// `work` runs while this process holds the store's write lock: keep it short, do no
    /// network I/O in it, and do not call back into the store from it.
    ///
    /// # Errors
    ///
    /// [`EnqueueError::Work`] with the work's error (nothing committed);
    /// [`EnqueueError::Outbox`] when the intent cannot be created or the store fails.
    pub fn enqueue_with<T, E>(
        &self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: [u8; 16],
        work: impl FnOnce(&WriteTransaction, &Intent) -> Result<T, E>,
    ) -> Result<(Intent, T), EnqueueError<E>> {
        self.enqueue_drawing(operation, payload, fingerprint, now, Some(random), work)
    }

    /// [`Outbox::enqueue`] with the key's random bytes from the store: a generator kept
    /// in the file (a seed drawn once from the operating system, and a counter advanced
    /// in the intent's own transaction), so that no two intents of a file share them,
    /// across restarts and crashes, whatever the clock does. Nothing for the
    /// application to supply.
    ///
    /// # Errors
    ///
    /// As [`Outbox::enqueue`]; [`Error::Random`] when the system gives no seed.
    pub fn submit(
        &self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Intent, OutboxError> {
        let work = |_: &WriteTransaction, _: &Intent| Ok::<(), Infallible>(());
        match self.submit_with(operation, payload, fingerprint, now, work) {
            Ok((intent, ())) => Ok(intent),
            Err(EnqueueError::Outbox(e)) => Err(e),
            Err(EnqueueError::Work(never)) => match never {},
        }
    }

    /// [`Outbox::enqueue_with`] with the key's random bytes from the store, as
    /// [`Outbox::submit`].
    ///
    /// # Errors
    ///
    /// As [`Outbox::enqueue_with`].
    pub fn submit_with<T, E>(
        &self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        work: impl FnOnce(&WriteTransaction, &Intent) -> Result<T, E>,
    ) -> Result<(Intent, T), EnqueueError<E>> {
        self.enqueue_drawing(operation, payload, fingerprint, now, None, work)
    }

    /// [`Outbox::enqueue_in`] with the key's random bytes from the store, drawn in
    /// `txn`, as [`Outbox::submit`].
    ///
    /// # Errors
    ///
    /// As [`Outbox::enqueue_in`].
    pub fn submit_in(
        &self,
        txn: &WriteTransaction,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
    ) -> Result<Intent, OutboxError> {
        let random = draw_key_random(txn)?;
        self.enqueue_in(txn, operation, payload, fingerprint, now, random)
    }

    /// An intent made in its own transaction with `work`: from the caller's random
    /// bytes, or from the store's generator in that transaction.
    fn enqueue_drawing<T, E>(
        &self,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: Option<[u8; 16]>,
        work: impl FnOnce(&WriteTransaction, &Intent) -> Result<T, E>,
    ) -> Result<(Intent, T), EnqueueError<E>> {
        self.shared.writer.ensure_writable("enqueue")?;
        let made = self.shared.writer.transact("enqueue", |txn, _| {
            let random = match random {
                Some(random) => random,
                None => draw_key_random(txn)?,
            };
            let intent = Intent::new(operation, payload, fingerprint, now, random, &self.config)
                .map_err(OutboxError::from)?;
            insert(txn, &intent)?;
            let value = work(txn, &intent).map_err(EnqueueError::Work)?;
            Ok::<_, EnqueueError<E>>(((intent, value), true))
        })?;
        Ok(made)
    }

    /// Starts a new intent inside a write transaction the caller already has, such as
    /// the one [`crate::Store::execute`] hands its work: a receiver that forwards what it just
    /// executed commits the forwarding intent with the settled record.
    ///
    /// # Errors
    ///
    /// [`OutboxError::Ledger`] for an invalid operation or a repeated key (nothing
    /// written); storage errors, after which the transaction may hold part of the
    /// intent: do not commit it (return an error from [`crate::Store::execute`]'s work).
    pub fn enqueue_in(
        &self,
        txn: &WriteTransaction,
        operation: &str,
        payload: Vec<u8>,
        fingerprint: Fingerprint,
        now: Timestamp,
        random: [u8; 16],
    ) -> Result<Intent, OutboxError> {
        let intent = Intent::new(operation, payload, fingerprint, now, random, &self.config)?;
        insert(txn, &intent)?;
        Ok(intent)
    }

    /// Call when `now` reaches [`Outbox::next_wakeup`] (or at any time). Expires the
    /// queued intents at or past their deadline and puts up to `limit` due ones in
    /// flight, oldest `next_attempt_at` first; commits, then returns what to send.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; nothing changed.
    pub fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Attempt>, Error> {
        self.shared.writer.transact("due", |txn, _| {
            let mut attempts = Vec::new();
            let mut changed = false;
            let mut tables = IntentTables::open(txn)?;
            let end = now.as_millis().saturating_add(1).to_be_bytes();
            let mut keys = Vec::new();
            for entry in tables.due.range::<&[u8]>(..&end[..])? {
                if keys.len() >= limit {
                    break;
                }
                let (key, _) = entry?;
                keys.push(decode_key(split_due_key(key.value())?.1)?);
            }
            for key in keys {
                let old = tables.require(&key)?;
                let mut new = old.clone();
                match new.poll(now, &self.config) {
                    Poll::Send(attempt) => attempts.push(attempt),
                    Poll::Expired => {}
                    Poll::Idle => continue,
                }
                tables.put(Some(&old), &new)?;
                changed = true;
            }
            Ok((attempts, changed))
        })
    }

    /// Takes the receiver's reply to `key` into account and commits; see
    /// [`Intent::on_reply`].
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`] when no intent has `key`; storage errors.
    pub fn record_reply(
        &self,
        key: &str,
        reply: Reply,
        now: Timestamp,
    ) -> Result<Effect, OutboxError> {
        self.transition("record_reply", key, |intent, config, rng| {
            intent.on_reply(reply, now, config, rng)
        })
    }

    /// The attempt in flight for `key` failed before any reply (connection lost,
    /// timeout): queue it again after a backoff and commit; see
    /// [`Intent::on_transport_error`].
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`] when no intent has `key`; storage errors.
    pub fn record_transport_error(&self, key: &str, now: Timestamp) -> Result<Effect, OutboxError> {
        self.transition("record_transport_error", key, |intent, config, rng| {
            intent.on_transport_error(now, config, rng)
        })
    }

    /// After a crash: every in-flight intent is queued again with the same key, due at
    /// once. Call once when the application starts, before sending; returns how many
    /// were requeued. Not done on open, because other processes (the `idem` CLI) open
    /// the same file while the application has requests in flight.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; nothing changed.
    pub fn restart(&self) -> Result<usize, Error> {
        self.shared.writer.transact("restart", |txn, _| {
            let mut requeued = 0;
            let mut tables = IntentTables::open(txn)?;
            let prefix = [state_byte(IntentState::InFlight)];
            let mut keys = Vec::new();
            for entry in tables.states.range::<&[u8]>(&prefix[..]..)? {
                let (key, _) = entry?;
                let Some(rest) = key.value().strip_prefix(&prefix[..]) else {
                    break;
                };
                keys.push(decode_key(rest)?);
            }
            for key in keys {
                let old = tables.require(&key)?;
                let mut new = old.clone();
                if new.restart() {
                    tables.put(Some(&old), &new)?;
                    requeued += 1;
                }
            }
            Ok((requeued, requeued > 0))
        })
    }

    /// Removes a settled intent (after the application took its outcome) and returns
    /// it. Queued and in-flight intents cannot be forgotten: their key may have reached
    /// the receiver. An expired intent must be resolved first ([`Outbox::resolve`]): its
    /// effect may or may not have happened.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`], [`LedgerError::NotTerminal`],
    /// [`LedgerError::Unresolved`]; storage errors.
    pub fn forget(&self, key: &str) -> Result<Intent, OutboxError> {
        self.shared.writer.transact("forget", |txn, _| {
            let mut tables = IntentTables::open(txn)?;
            let intent = tables
                .get(key)?
                .ok_or_else(|| LedgerError::UnknownKey { key: key.into() })?;
            intent.check_forget()?;
            tables.remove(&intent)?;
            Ok((intent, true))
        })
    }

    /// Records what happened to the expired intent `key`, as an operator or a checker
    /// found out (asking the receiver, reading a statement), with their reason, and
    /// commits; see [`Intent::resolve`]. Only then may it be forgotten. `resolved_at` is
    /// `now`, or the store's clock floor when the clock is behind it (the floor is read,
    /// not raised). Returns the resolved intent.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownKey`], [`LedgerError::NotExpired`] (not expired, or resolved
    /// already), [`LedgerError::Reason`]; storage errors. Nothing changed.
    pub fn resolve(
        &self,
        key: &str,
        resolved_as: ResolvedAs,
        reason: &str,
        now: Timestamp,
    ) -> Result<Intent, OutboxError> {
        self.shared.writer.transact("resolve", |txn, store_tables| {
            let mut tables = IntentTables::open(txn)?;
            let old = tables
                .get(key)?
                .ok_or_else(|| LedgerError::UnknownKey { key: key.into() })?;
            // Dated at the clock floor at least, which is read here and not raised.
            let now = if self.shared.writer.is_floored() {
                now.max(store_tables.clock_floor()?)
            } else {
                now
            };
            let mut new = old.clone();
            new.resolve(resolved_as, reason, now)?;
            tables.put(Some(&old), &new)?;
            Ok((new, true))
        })
    }

    /// When [`Outbox::due`] next has something to do: the earliest `next_attempt_at` of
    /// a queued intent (possibly in the past: call `due` at once); `None` when nothing
    /// is queued.
    ///
    /// # Errors
    ///
    /// Storage errors.
    pub fn next_wakeup(&self) -> Result<Option<Timestamp>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            let txn = db.begin_read()?;
            let Some(due) = open_read(&txn, DUE)? else {
                return Ok(None);
            };
            match due.first()? {
                Some((key, _)) => Ok(Some(split_due_key(key.value())?.0)),
                None => Ok(None),
            }
        })
    }

    /// The intent with `key`.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn intent(&self, key: &str) -> Result<Option<Intent>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            let txn = db.begin_read()?;
            let Some(intents) = open_read(&txn, INTENTS)? else {
                return Ok(None);
            };
            read_intent(&intents, key)
        })
    }

    /// The intents that match `filter`, oldest first (by key: UUIDv7 keys sort by
    /// creation time), from one consistent snapshot.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn intents(&self, filter: &IntentFilter) -> Result<Vec<Intent>, Error> {
        guard_read(|_| self.intents_guarded(filter))
    }

    fn intents_guarded(&self, filter: &IntentFilter) -> Result<Vec<Intent>, Error> {
        let limit = filter.limit.unwrap_or(usize::MAX);
        let db = self.shared.writer.read();
        let txn = db.begin_read()?;
        let Some(intents) = open_read(&txn, INTENTS)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        match filter.state {
            None => {
                for entry in intents.iter()? {
                    if out.len() >= limit {
                        break;
                    }
                    let (key, bytes) = entry?;
                    out.push(decode_intent(key.value(), bytes.value())?);
                }
            }
            Some(state) => {
                let Some(states) = open_read(&txn, STATES)? else {
                    return Ok(Vec::new());
                };
                let prefix = [state_byte(state)];
                for entry in states.range::<&[u8]>(&prefix[..]..)? {
                    if out.len() >= limit {
                        break;
                    }
                    let (key, _) = entry?;
                    let Some(rest) = key.value().strip_prefix(&prefix[..]) else {
                        break;
                    };
                    let key = decode_key(rest)?;
                    match read_intent(&intents, &key)? {
                        Some(intent) => out.push(intent),
                        None => {
                            return Err(Error::Corrupt {
                                detail: format!(
                                    "intent state index names {key}, which has no intent"
                                ),
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Reads the intent `key`, applies `step` with the persisted backoff generator, and
    /// commits what changed; `operation` names the call for a read-only store's refusal.
    fn transition(
        &self,
        operation: &'static str,
        key: &str,
        step: impl FnOnce(&mut Intent, &LedgerConfig, &mut BackoffRng) -> Effect,
    ) -> Result<Effect, OutboxError> {
        self.shared.writer.transact(operation, |txn, _| {
            let mut tables = IntentTables::open(txn)?;
            let mut meta = txn.open_table(META).map_err(Error::from)?;
            let old = tables
                .get(key)?
                .ok_or_else(|| LedgerError::UnknownKey { key: key.into() })?;
            let rng = read_rng(&meta)?.unwrap_or(BackoffRng::new(self.config.seed));
            let mut new = old.clone();
            let mut next_rng = rng;
            let effect = step(&mut new, &self.config, &mut next_rng);
            let mut changed = false;
            if new != old {
                tables.put(Some(&old), &new)?;
                changed = true;
            }
            if next_rng != rng {
                meta.insert(RNG_KEY, encoding::encode(&next_rng).as_slice())
                    .map_err(Error::from)?;
                changed = true;
            }
            Ok((effect, changed))
        })
    }
}

/// Writes a new intent into `txn`, refusing a key that is taken.
fn insert(txn: &WriteTransaction, intent: &Intent) -> Result<(), OutboxError> {
    let mut tables = IntentTables::open(txn)?;
    if tables.get(&intent.key)?.is_some() {
        return Err(LedgerError::DuplicateKey {
            key: intent.key.clone(),
        }
        .into());
    }
    tables.put(None, intent)?;
    Ok(())
}

impl Store {
    /// The outbox of this store's sender, with the settings its retries follow.
    ///
    /// # Errors
    ///
    /// [`LedgerConfigError`] for settings that cannot work.
    pub fn outbox(&self, config: LedgerConfig) -> Result<Outbox, LedgerConfigError> {
        Outbox::new(Arc::clone(&self.shared), config)
    }
}
