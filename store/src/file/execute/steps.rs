//! Atomic execute: the claim, the caller's work and the settled record, in one write
//! transaction.
//!
//! [`execute_in`] is the one implementation. [`crate::Store::execute`] runs it in a
//! transaction of its own; group commit runs it in a transaction shared with other
//! callers. Either way the caller commits what it returns only when it returns `Ok`,
//! and rolls the transaction back otherwise: the work may have written before it failed.

use core::convert::Infallible;

use idem_core::protocol::{self, Decision};
use idem_core::{Config, Fingerprint, Outcome, Record, Timestamp, Transition, Verdict, Write};
use redb::WriteTransaction;

use crate::error::{Error, ExecuteError};
use crate::file::cache::ReplayCache;
use crate::file::schema::Tables;
use crate::file::snapshot;
use crate::file::writer::Writer;
use crate::seam::report::Executed;

/// Atomic execute in a transaction of its own, for [`crate::Store::execute`] and
/// [`crate::Store::consume_execute`] (`operation` names which). A key that is settled,
/// in progress, in conflict or unknown is answered from the replay cache or a read
/// snapshot; otherwise [`execute_in`] runs in a write transaction, which commits when
/// it wrote and is rolled back when the work failed or `admit` refused the key.
// The arguments of the store's call, plus its parts and the admission.
#[allow(clippy::too_many_arguments)]
pub(crate) fn alone<T, E, X>(
    writer: &Writer,
    cache: &ReplayCache,
    config: &Config,
    operation: &'static str,
    id_key: &[u8],
    fingerprint: Fingerprint,
    now: Timestamp,
    admit: impl FnOnce(
        &mut Tables<'_>,
        &[u8],
        Option<&Record>,
        Timestamp,
    ) -> Result<Result<(), X>, Error>,
    work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
) -> Result<Result<Executed<T>, X>, ExecuteError<E>> {
    writer.ensure_writable(operation)?;
    let epoch = cache.epoch();
    if let Some(decision) = snapshot::begin(writer, cache, config, id_key, fingerprint, now)? {
        return Ok(Ok(Executed::NotRun(decision)));
    }
    let executed = writer.transact(operation, |txn, tables| {
        let (changed, executed, _) =
            execute_in(txn, tables, id_key, fingerprint, now, config, admit, work)?;
        Ok::<_, ExecuteError<E>>((executed, changed))
    })?;
    if let Ok(Executed::Ran { record, .. }) = &executed {
        cache.insert(id_key, record, epoch);
    }
    Ok(executed)
}

/// What [`execute_in`] did: whether it wrote, what happened (or the admission's
/// refusal), and the record a decision that ran no work was made from.
pub(crate) type ExecutedIn<T, X> = (bool, Result<Executed<T>, X>, Option<Record>);

/// Lets every key in: the admission of an execute that is not a consume.
pub(crate) fn admit_all(
    _: &mut Tables<'_>,
    _: &[u8],
    _: Option<&Record>,
    _: Timestamp,
) -> Result<Result<(), Infallible>, Error> {
    Ok(Ok(()))
}

/// Claims `id_key` in `txn` at `now` (never behind the clock floor) once `admit` lets
/// it in (a token's entry, for a consume; [`admit_all`] otherwise), runs `work` in the
/// same transaction and puts the settled record. Returns whether anything was written,
/// what happened, and, when the work did not run, the record the decision was made from
/// (for the replay cache).
///
/// When the key cannot be claimed (replay, in progress, conflict, unknown), the work
/// does not run; the begin's own write, if any (a lease that ran out turning Unknown),
/// is applied. No Pending record is ever written on this path: the claim and the
/// settled record are one put.
///
/// The store's tables (`tables`) are opened as this function needs them, before and
/// after the work. The work opens its own, under names other than `idem.*` (the
/// outbox's [`crate::Outbox::enqueue_in`] opens the outbox's): redb refuses to open one
/// table twice in a transaction, and the store's own tables are the store's to write.
///
/// # Errors
///
/// [`ExecuteError::Work`] with the work's error; [`ExecuteError::Store`] for storage
/// errors or a refused outcome. After an error the transaction may hold the work's
/// writes: the caller must not commit it.
// The arguments of `alone`, with the transaction and its tables for the store's parts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_in<T, E, X>(
    txn: &WriteTransaction,
    tables: &mut Tables<'_>,
    id_key: &[u8],
    fingerprint: Fingerprint,
    now: Timestamp,
    config: &Config,
    admit: impl FnOnce(
        &mut Tables<'_>,
        &[u8],
        Option<&Record>,
        Timestamp,
    ) -> Result<Result<(), X>, Error>,
    work: impl FnOnce(&WriteTransaction) -> Result<(Verdict, Outcome, T), E>,
) -> Result<ExecutedIn<T, X>, ExecuteError<E>> {
    let current = tables.get(id_key)?;
    let now = tables.effective(now)?;
    if let Err(refused) = admit(tables, id_key, current.as_ref(), now)? {
        return Ok((false, Err(refused), None));
    }
    let next = tables.next_generation()?;
    let Transition { decision, write } =
        protocol::begin(current.as_ref(), fingerprint, next, now, config);
    let pending = match (decision, write) {
        (Decision::Claimed { .. }, Write::Put(pending)) => pending,
        (decision, write) => {
            let changed = tables.apply(id_key, current.as_ref(), &write)?;
            if changed {
                tables.raise_floor(now)?;
            }
            return Ok((changed, Ok(Executed::NotRun(decision)), current));
        }
    };
    let (verdict, outcome, value) = work(txn).map_err(ExecuteError::Work)?;
    let settled = protocol::complete(
        Some(&pending),
        pending.generation,
        verdict,
        outcome,
        now,
        config,
    )
    .map_err(|refusal| ExecuteError::Store(refusal.into()))?;
    tables.raise_generation(pending.generation)?;
    tables.raise_floor(now)?;
    tables.put(id_key, current.as_ref(), &settled)?;
    Ok((
        true,
        Ok(Executed::Ran {
            value,
            record: settled,
        }),
        None,
    ))
}
