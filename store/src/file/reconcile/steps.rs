//! Reconciliation (docs/design.md §11): claims whose executor went silent turned Unknown, and
//! Unknown records settled by a checker that can tell what happened.
//!
//! The checker runs outside any transaction (it may ask a payment provider or read a
//! log); each answer is then applied in a transaction of its own, and only to the
//! record the checker saw: when the record changed meanwhile (someone else resolved it,
//! and perhaps a new claim of the key went Unknown again), the answer is not applied.

use idem_core::protocol::{self, Resolution};
use idem_core::{Generation, State, Write};

use crate::file::group::Step;

/// The claim `generation` turns Unknown if its lease has run out at the step's time;
/// true when it did.
pub(crate) fn abandon(generation: Generation) -> impl Step<bool> {
    move |_, current, _, now| match current {
        Some(record)
            if record.generation == generation
                && record
                    .lease_until()
                    .is_some_and(|lease_until| now >= lease_until) =>
        {
            let unknown = protocol::mark_unknown(current, generation, now)?;
            Ok((Write::Put(unknown), true))
        }
        _ => Ok((Write::Nothing, false)),
    }
}

/// The Unknown record of `generation` settles by `check`; `None` when the record is no
/// longer that Unknown one (nothing written), else the settled record, if any.
pub(crate) fn settle(
    generation: Generation,
    resolution: Resolution,
) -> impl Step<Option<Option<idem_core::Record>>> {
    move |_, current, config, now| match current {
        Some(record) if record.generation == generation && record.state() == State::Unknown => Ok(
            match protocol::resolve(current, resolution.clone(), now, config)? {
                Some(settled) => (Write::Put(settled.clone()), Some(Some(settled))),
                None => (Write::Delete, Some(None)),
            },
        ),
        _ => Ok((Write::Nothing, None)),
    }
}
