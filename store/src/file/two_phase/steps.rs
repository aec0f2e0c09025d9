//! The two-phase inputs (begin, heartbeat, complete, release, mark unknown, resolve) as
//! the steps group commit runs: each reads the record, asks the core, and returns the
//! write to apply with the answer.
//!
//! Each step gets the time to use from group commit: the caller's, or the clock floor
//! when the caller's clock is behind it.
//!
//! A step may run more than once (group commit runs a batch again without an input
//! that failed after writing), so each takes everything from its arguments and
//! captures, and does nothing outside the transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::protocol::{self, Decision, Resolution};
use idem_core::{Fingerprint, Generation, Outcome, Record, Terms, Transition, Verdict, Write};

use crate::file::group::Step;
use crate::file::room::Room;

/// `step` under a caller's `terms`: the settings it runs with, with the terms' lease
/// and retention where they give them ([`idem_core::Config::with_terms`]).
pub(crate) fn under<R>(terms: Terms, mut step: impl Step<R>) -> impl Step<R> {
    move |tables, current, config: &idem_core::Config, now| {
        if terms == Terms::default() {
            step(tables, current, config, now)
        } else {
            step(tables, current, &config.with_terms(&terms), now)
        }
    }
}

/// A request with `fingerprint` arrives: claim, or answer.
pub(crate) fn begin(fingerprint: Fingerprint) -> impl Step<Decision> {
    move |tables, current, config, now| {
        let next = tables.next_generation()?;
        let Transition { decision, write } =
            protocol::begin(current, fingerprint, next, now, config);
        if let Decision::Claimed { generation, .. } = decision {
            tables.raise_generation(generation)?;
        }
        Ok((write, decision))
    }
}

/// [`begin`], also returning the settled record a decision that writes nothing was made
/// from, for the replay cache (which keeps nothing else).
pub(crate) fn begin_reading(fingerprint: Fingerprint) -> impl Step<(Decision, Option<Record>)> {
    let mut begin = begin(fingerprint);
    move |tables, current: Option<&Record>, config, now| {
        let (write, decision) = begin(tables, current, config, now)?;
        let read = match write {
            Write::Nothing => current
                .filter(|record| record.expires_at().is_some())
                .cloned(),
            _ => None,
        };
        Ok((write, (decision, read)))
    }
}

/// [`begin_reading`], noting in `tried` the generation of a claim it decides (the
/// last run's, as group commit may run a step again): what a commit that fails leaves
/// in doubt. Nothing else leaves the transaction.
///
/// A claim is refused ([`crate::Error::NoRoom`]) while the filesystem's free space is
/// below `room`'s reserve; every other answer is given as ever.
pub(crate) fn begin_noting(
    fingerprint: Fingerprint,
    tried: Arc<AtomicU64>,
    room: Option<Arc<Room>>,
) -> impl Step<(Decision, Option<Record>)> {
    let mut begin = begin_reading(fingerprint);
    move |tables, current: Option<&Record>, config, now| {
        let ran = begin(tables, current, config, now)?;
        let claimed = match &ran.1.0 {
            Decision::Claimed { generation, .. } => generation.0,
            _ => 0,
        };
        if claimed != 0
            && let Some(room) = &room
        {
            room.for_claim()?;
        }
        tried.store(claimed, Ordering::Relaxed);
        Ok(ran)
    }
}

/// The executor holding `generation` extends its lease.
pub(crate) fn heartbeat(generation: Generation) -> impl Step<Record> {
    move |_, current, config, now| {
        let record = protocol::heartbeat(current, generation, now, config)?;
        Ok((Write::Put(record.clone()), record))
    }
}

/// The executor holding `generation` settles the key.
pub(crate) fn complete(
    generation: Generation,
    verdict: Verdict,
    outcome: Outcome,
) -> impl Step<Record> {
    move |_, current, config, now| {
        let record =
            protocol::complete(current, generation, verdict, outcome.clone(), now, config)?;
        Ok((Write::Put(record.clone()), record))
    }
}

/// The executor holding `generation` did nothing: delete the record.
pub(crate) fn release(generation: Generation) -> impl Step<()> {
    move |_, current, _, _| {
        let protocol::Delete = protocol::release(current, generation)?;
        Ok((Write::Delete, ()))
    }
}

/// The executor holding `generation` cannot tell whether its effect happened.
pub(crate) fn mark_unknown(generation: Generation) -> impl Step<Record> {
    move |_, current, _, now| {
        let record = protocol::mark_unknown(current, generation, now)?;
        Ok((Write::Put(record.clone()), record))
    }
}

/// A reconciler settles an Unknown record (`None`: deleted, not executed).
pub(crate) fn resolve(resolution: Resolution) -> impl Step<Option<Record>> {
    move |_, current, config, now| {
        Ok(
            match protocol::resolve(current, resolution.clone(), now, config)? {
                Some(record) => (Write::Put(record.clone()), Some(record)),
                None => (Write::Delete, None),
            },
        )
    }
}
