//! The oracle: what must hold once a run has quiesced.
//!
//! | check | holds when |
//! |---|---|
//! | `at-most-once` | no intent's effect ran more than once |
//! | `intent-finished` | every intent is completed, failed or expired |
//! | `no-conflict` | no intent ended in conflict (the senders never reuse a key) |
//! | `sale-and-intent-together` | each sender's sales and intents name the same keys, exactly those whose sale committed |
//! | `outcome-agrees` | a completed or failed intent holds the outcome of the effect's one run, with the matching verdict |
//! | `record-tells-what-happened` | no record is left Pending or Unknown, and every settled record holds the outcome of the effect's one run |
//! | `no-phantom-effect` | every effect that ran belongs to an intent a sender created |
//! | `replay-equals-first` | every definitive answer for a key equals the first, but a 410 Gone from a tombstone (checked as the run goes) |
//! | `generation-increases` | every claim got a generation above all earlier ones, across crashes (checked as the run goes) |

use std::collections::{BTreeMap, BTreeSet};

use idem_core::{IntentState, Status, Verdict};

use super::history::Violation;
use super::receiver::{Receiver, effect_key, intent_name};
use super::sender::Outbox;
use super::world::World;

/// How the intents of a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Completed: the effect ran and the sender has its outcome.
    pub completed: u64,
    /// Failed definitively (declined): the effect ran and said no.
    pub failed: u64,
    /// Expired after the effect ran (the sender never heard; the receiver's record or
    /// business table says so).
    pub expired_ran: u64,
    /// Expired and the effect never ran.
    pub expired_not_run: u64,
}

/// Runs every final check; violations are added to `history`.
pub(crate) fn check<S: Outbox, R: Receiver>(world: &mut World<S, R>) -> Tally {
    let store = &world.receiver.store;
    let executions = store.executions();
    let records: BTreeMap<String, _> = store
        .records(None)
        .into_iter()
        .map(|(id, record)| (effect_key(&id), record))
        .collect();
    let history = &mut world.history;
    let mut tally = Tally::default();
    let mut known = BTreeSet::new();

    for (name, run) in &executions {
        if run.count > 1 {
            let detail = format!("the effect ran {} times", run.count);
            history.violate("at-most-once", Some(name), detail);
        }
    }

    for node in &world.senders {
        let intents = node.outbox.intents();
        let keys: BTreeSet<String> = intents.iter().map(|i| i.key.clone()).collect();
        let sales: BTreeSet<String> = node.outbox.sales().into_iter().collect();
        if keys != sales || keys != node.created {
            let detail = format!(
                "{}: {} sales, {} intents, {} sales committed; sales without intent {:?}, intents without sale {:?}",
                node.name,
                sales.len(),
                keys.len(),
                node.created.len(),
                sales.difference(&keys).collect::<Vec<_>>(),
                keys.difference(&sales).collect::<Vec<_>>(),
            );
            history.violate("sale-and-intent-together", None, detail);
        }
        for intent in intents {
            let name = intent_name(&node.name, &intent.key);
            let run = executions.get(&name);
            match intent.state {
                IntentState::Queued | IntentState::InFlight => {
                    let detail = format!("still {} after the run quiesced", intent.state);
                    history.violate("intent-finished", Some(&name), detail);
                }
                IntentState::Conflict => {
                    let detail = format!("ended in conflict: {:?}", intent.outcome);
                    history.violate("no-conflict", Some(&name), detail);
                }
                IntentState::Completed | IntentState::Failed => {
                    let expected = if intent.state == IntentState::Completed {
                        Verdict::Succeeded
                    } else {
                        Verdict::Failed
                    };
                    let agrees = run.is_some_and(|run| {
                        run.verdict == expected && intent.outcome.as_ref() == Some(&run.outcome)
                    });
                    if !agrees {
                        let detail = format!(
                            "sender ended {} with {:?}; the business table has {:?}",
                            intent.state, intent.outcome, run
                        );
                        history.violate("outcome-agrees", Some(&name), detail);
                    }
                    if intent.state == IntentState::Completed {
                        tally.completed += 1;
                    } else {
                        tally.failed += 1;
                    }
                }
                IntentState::Expired | IntentState::Unknown => {
                    if run.is_some() {
                        tally.expired_ran += 1;
                    } else {
                        tally.expired_not_run += 1;
                    }
                }
            }
            known.insert(name);
        }
    }

    for (name, record) in &records {
        let run = executions.get(name);
        let tells = match &record.status {
            Status::Pending { .. } | Status::Unknown => false,
            Status::Settled {
                verdict, outcome, ..
            } => run.is_some_and(|run| run.verdict == *verdict && run.outcome == *outcome),
            // A tombstone keeps the verdict, not the outcome.
            Status::Tombstone { verdict, .. } => run.is_some_and(|run| run.verdict == *verdict),
        };
        if !tells {
            let detail = format!(
                "record is {} ({:?}); the business table has {:?}",
                record.state(),
                record.status,
                run
            );
            history.violate("record-tells-what-happened", Some(name), detail);
        }
    }

    for name in executions.keys() {
        if !known.contains(name) {
            history.violate(
                "no-phantom-effect",
                Some(name),
                "an effect ran for an intent no sender has".to_owned(),
            );
        }
    }
    tally
}

/// The keys named by violations, for the failure report's logs.
pub(crate) fn keys_of(violations: &[Violation]) -> Vec<String> {
    let mut keys: Vec<String> = violations.iter().filter_map(|v| v.key.clone()).collect();
    keys.dedup();
    keys
}
