//! Model-based property test: random inputs over a few keys, held against a small
//! reference model, with the invariants of the protocol asserted after each step.

use std::collections::BTreeMap;

use idem_core::memory::MemoryReceiver;
use idem_core::protocol::{Decision, Refusal, Resolution};
use idem_core::{
    Config, Fingerprint, Generation, LeaseExpiry, Outcome, RecordId, State, Timestamp, Verdict,
};
use proptest::prelude::*;

const LEASE: u64 = 100;
const RETENTION: u64 = 1_000;

/// The reference model of one key: what a reader of the protocol table expects.
#[derive(Debug, Clone, PartialEq)]
enum Model {
    Absent,
    Pending {
        generation: u64,
        fp: u8,
        lease_until: u64,
    },
    Settled {
        generation: u64,
        fp: u8,
        verdict: Verdict,
        outcome: Outcome,
        expires_at: u64,
    },
    Unknown {
        generation: u64,
        fp: u8,
    },
    /// What sweep leaves of a settled record, until `expires_at`.
    Tombstone {
        generation: u64,
        fp: u8,
        verdict: Verdict,
        expires_at: u64,
    },
}

/// The key as `begin` sees it at `now` with tombstones kept `tomb` ms: a settled record
/// past its retention is its tombstone (or absent when tombstones are off or over), and a
/// tombstone past its time is absent.
fn seen_at(m: &Model, now: u64, tomb: u64) -> Model {
    match *m {
        Model::Settled {
            generation,
            fp,
            verdict,
            expires_at,
            ..
        } if now >= expires_at => {
            if tomb > 0 && now < expires_at + tomb {
                Model::Tombstone {
                    generation,
                    fp,
                    verdict,
                    expires_at: expires_at + tomb,
                }
            } else {
                Model::Absent
            }
        }
        Model::Tombstone { expires_at, .. } if now >= expires_at => Model::Absent,
        ref other => other.clone(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Begin {
        key: usize,
        fp: u8,
    },
    Heartbeat {
        key: usize,
        stale: bool,
    },
    Complete {
        key: usize,
        stale: bool,
        failed: bool,
        body: u8,
    },
    Release {
        key: usize,
        stale: bool,
    },
    MarkUnknown {
        key: usize,
        stale: bool,
    },
    Resolve {
        key: usize,
        how: u8,
        body: u8,
    },
    Sweep {
        limit: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..3usize;
    prop_oneof![
        // Steps that land exactly on lease and retention ends as often as past them.
        prop::sample::select(vec![0u64, 1, 50, 99, 100, 250, 500, 1_000]).prop_map(Op::Advance),
        (key.clone(), 0..2u8).prop_map(|(key, fp)| Op::Begin { key, fp }),
        (key.clone(), any::<bool>()).prop_map(|(key, stale)| Op::Heartbeat { key, stale }),
        (key.clone(), any::<bool>(), any::<bool>(), any::<u8>()).prop_map(
            |(key, stale, failed, body)| Op::Complete {
                key,
                stale,
                failed,
                body
            }
        ),
        (key.clone(), any::<bool>()).prop_map(|(key, stale)| Op::Release { key, stale }),
        (key.clone(), any::<bool>()).prop_map(|(key, stale)| Op::MarkUnknown { key, stale }),
        (key, 0..3u8, any::<u8>()).prop_map(|(key, how, body)| Op::Resolve { key, how, body }),
        (0..3usize).prop_map(|limit| Op::Sweep { limit }),
    ]
}

fn ids() -> Vec<RecordId> {
    // Two tenants share key "k": they must never meet.
    vec![
        RecordId::new("tenant-a", "credit", "k").unwrap(),
        RecordId::new("tenant-b", "credit", "k").unwrap(),
        RecordId::new("tenant-a", "credit", "other").unwrap(),
    ]
}

fn fingerprint(fp: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[fp])
}

fn model_generation(m: &Model) -> Option<u64> {
    match *m {
        Model::Absent => None,
        Model::Pending { generation, .. }
        | Model::Settled { generation, .. }
        | Model::Unknown { generation, .. }
        | Model::Tombstone { generation, .. } => Some(generation),
    }
}

fn run(ops: Vec<Op>, takeover: bool, tomb: u64) -> Result<(), TestCaseError> {
    let config = Config {
        lease_ms: LEASE,
        success_retention_ms: RETENTION,
        failure_retention_ms: RETENTION / 2,
        on_lease_expiry: if takeover {
            LeaseExpiry::Takeover
        } else {
            LeaseExpiry::Unknown
        },
        tombstone_retention_ms: tomb,
        ..Config::default()
    };
    let ids = ids();
    let mut real = MemoryReceiver::new(config);
    let mut model = vec![Model::Absent; ids.len()];
    let mut now = 1_000u64;
    let mut last_generation = 0u64;
    // Invariant 2: the first outcome of each (key, generation), which every replay repeats.
    let mut first_outcome: BTreeMap<(usize, u64), Outcome> = BTreeMap::new();

    for op in ops {
        let t = Timestamp(now);
        match op {
            Op::Advance(ms) => now += ms,
            Op::Begin { key, fp } => {
                let decision = real
                    .begin(&ids[key], fingerprint(fp), t)
                    .expect("the model's counter stays far from the end");
                let m = &mut model[key];
                let expected_kind = match seen_at(m, now, tomb) {
                    Model::Absent => "claimed",
                    Model::Pending { fp: f, .. }
                    | Model::Settled { fp: f, .. }
                    | Model::Unknown { fp: f, .. }
                    | Model::Tombstone { fp: f, .. }
                        if f != fp =>
                    {
                        "conflict"
                    }
                    // Invariant 7: a retry of a forgotten request never executes.
                    Model::Tombstone { .. } => "forgotten",
                    Model::Pending { lease_until, .. } if now < lease_until => "in_progress",
                    Model::Pending { .. } if takeover => "claimed",
                    Model::Pending { generation, fp, .. } => {
                        *m = Model::Unknown { generation, fp };
                        "unknown"
                    }
                    Model::Settled { .. } => "replay",
                    Model::Unknown { .. } => "unknown",
                };
                match decision {
                    Decision::Claimed {
                        generation,
                        lease_until,
                    } => {
                        prop_assert_eq!(expected_kind, "claimed");
                        // Invariant 5: generations strictly increase.
                        prop_assert!(generation.0 > last_generation);
                        last_generation = generation.0;
                        prop_assert_eq!(lease_until, Timestamp(now + LEASE));
                        *m = Model::Pending {
                            generation: generation.0,
                            fp,
                            lease_until: now + LEASE,
                        };
                    }
                    Decision::InProgress {
                        generation,
                        lease_until,
                    } => {
                        prop_assert_eq!(expected_kind, "in_progress");
                        prop_assert_eq!(Some(generation.0), model_generation(m));
                        prop_assert!(lease_until.0 > now);
                    }
                    Decision::Replay {
                        verdict, outcome, ..
                    } => {
                        prop_assert_eq!(expected_kind, "replay");
                        let Model::Settled {
                            generation,
                            verdict: v,
                            outcome: o,
                            ..
                        } = m
                        else {
                            unreachable!()
                        };
                        prop_assert_eq!((verdict, &outcome), (*v, &*o));
                        // Invariant 2: a replay carries the first completion's bytes.
                        prop_assert_eq!(Some(&outcome), first_outcome.get(&(key, *generation)));
                    }
                    Decision::Conflict {
                        stored_fingerprint, ..
                    } => {
                        // Invariant 3: another fingerprint under a live key is a conflict.
                        prop_assert_eq!(expected_kind, "conflict");
                        prop_assert_ne!(stored_fingerprint, fingerprint(fp));
                    }
                    Decision::NeedsReconciliation { generation } => {
                        prop_assert_eq!(expected_kind, "unknown");
                        prop_assert_eq!(Some(generation.0), model_generation(m));
                    }
                    Decision::Forgotten {
                        generation,
                        verdict,
                        ..
                    } => {
                        prop_assert_eq!(expected_kind, "forgotten");
                        let Model::Tombstone {
                            generation: g,
                            verdict: v,
                            ..
                        } = seen_at(m, now, tomb)
                        else {
                            unreachable!()
                        };
                        prop_assert_eq!((generation.0, verdict), (g, v));
                    }
                }
            }
            Op::Heartbeat { key, stale }
            | Op::Release { key, stale }
            | Op::MarkUnknown { key, stale }
            | Op::Complete { key, stale, .. } => {
                let m = model[key].clone();
                let held = match m {
                    Model::Pending { generation, .. } => Some(generation),
                    _ => None,
                };
                let given = match (model_generation(&m), stale) {
                    (Some(g), false) => g,
                    (Some(g), true) => g.saturating_sub(1),
                    (None, _) => last_generation,
                };
                let generation_given = Generation(given);
                let result = match &op {
                    Op::Heartbeat { .. } => real.heartbeat(&ids[key], generation_given, t),
                    Op::Release { .. } => real.release(&ids[key], generation_given),
                    Op::MarkUnknown { .. } => real.mark_unknown(&ids[key], generation_given, t),
                    Op::Complete { failed, body, .. } => {
                        let verdict = if *failed {
                            Verdict::Failed
                        } else {
                            Verdict::Succeeded
                        };
                        real.complete(
                            &ids[key],
                            generation_given,
                            verdict,
                            Outcome::new(i32::from(*body), [*body]),
                            t,
                        )
                    }
                    _ => unreachable!(),
                };
                if held == Some(given) {
                    prop_assert_eq!(result, Ok(()));
                    let Model::Pending { fp, .. } = m else {
                        unreachable!()
                    };
                    model[key] = match op {
                        Op::Heartbeat { .. } => Model::Pending {
                            generation: given,
                            fp,
                            lease_until: now + LEASE,
                        },
                        Op::Release { .. } => Model::Absent,
                        Op::MarkUnknown { .. } => Model::Unknown {
                            generation: given,
                            fp,
                        },
                        Op::Complete { failed, body, .. } => {
                            let verdict = if failed {
                                Verdict::Failed
                            } else {
                                Verdict::Succeeded
                            };
                            let retention = if failed { RETENTION / 2 } else { RETENTION };
                            let outcome = Outcome::new(i32::from(body), [body]);
                            // Invariant 1: one completion per generation.
                            prop_assert!(
                                first_outcome
                                    .insert((key, given), outcome.clone())
                                    .is_none()
                            );
                            Model::Settled {
                                generation: given,
                                fp,
                                verdict,
                                outcome,
                                expires_at: now + retention,
                            }
                        }
                        _ => unreachable!(),
                    };
                } else if m == Model::Absent {
                    prop_assert_eq!(result, Err(Refusal::NotFound));
                } else {
                    prop_assert!(matches!(result, Err(Refusal::Stale { .. })), "{result:?}");
                }
            }
            Op::Resolve { key, how, body } => {
                let outcome = Outcome::new(7, [body]);
                let resolution = match how {
                    0 => Resolution::Succeeded(outcome.clone()),
                    1 => Resolution::Failed(outcome.clone()),
                    _ => Resolution::NotExecuted,
                };
                let result = real.resolve(&ids[key], resolution, t);
                match model[key].clone() {
                    Model::Unknown { generation, fp } => {
                        prop_assert_eq!(result, Ok(()));
                        model[key] = match how {
                            0 | 1 => {
                                prop_assert!(
                                    first_outcome
                                        .insert((key, generation), outcome.clone())
                                        .is_none()
                                );
                                let (verdict, retention) = if how == 0 {
                                    (Verdict::Succeeded, RETENTION)
                                } else {
                                    (Verdict::Failed, RETENTION / 2)
                                };
                                Model::Settled {
                                    generation,
                                    fp,
                                    verdict,
                                    outcome,
                                    expires_at: now + retention,
                                }
                            }
                            _ => Model::Absent,
                        };
                    }
                    Model::Absent => prop_assert_eq!(result, Err(Refusal::NotFound)),
                    _ => prop_assert!(
                        matches!(result, Err(Refusal::WrongState { .. })),
                        "{:?}",
                        result
                    ),
                }
            }
            Op::Sweep { limit } => {
                let swept = real.sweep(t, limit);
                prop_assert!(swept.len() <= limit);
                let expired: Vec<usize> = (0..ids.len())
                    .filter(|&k| {
                        matches!(
                            model[k],
                            Model::Settled { expires_at, .. } | Model::Tombstone { expires_at, .. }
                                if now >= expires_at
                        )
                    })
                    .collect();
                prop_assert_eq!(swept.len(), expired.len().min(limit));
                for id in swept {
                    let key = ids.iter().position(|i| *i == id).unwrap();
                    // Invariant 4: only settled records and tombstones past expiry are
                    // ever swept; a settled one leaves its tombstone.
                    prop_assert!(expired.contains(&key));
                    model[key] = seen_at(&model[key], now, tomb);
                }
            }
        }
        // The real records match the model after every step.
        for (key, id) in ids.iter().enumerate() {
            let record = real.get(id);
            match (&model[key], record) {
                (Model::Absent, None) => {}
                (
                    Model::Pending {
                        generation,
                        lease_until,
                        ..
                    },
                    Some(r),
                ) => {
                    prop_assert_eq!((r.state(), r.generation.0), (State::Pending, *generation));
                    prop_assert_eq!(r.lease_until(), Some(Timestamp(*lease_until)));
                }
                (
                    Model::Settled {
                        generation,
                        verdict,
                        outcome,
                        expires_at,
                        ..
                    },
                    Some(r),
                ) => {
                    let state = if *verdict == Verdict::Succeeded {
                        State::Succeeded
                    } else {
                        State::Failed
                    };
                    prop_assert_eq!((r.state(), r.generation.0), (state, *generation));
                    prop_assert_eq!(r.expires_at(), Some(Timestamp(*expires_at)));
                    // Invariant 1: a settled outcome never changes until it expires.
                    let idem_core::Status::Settled {
                        outcome: stored, ..
                    } = &r.status
                    else {
                        unreachable!()
                    };
                    prop_assert_eq!(stored, outcome);
                }
                (Model::Unknown { generation, .. }, Some(r)) => {
                    prop_assert_eq!((r.state(), r.generation.0), (State::Unknown, *generation));
                }
                (
                    Model::Tombstone {
                        generation,
                        verdict,
                        expires_at,
                        ..
                    },
                    Some(r),
                ) => {
                    prop_assert_eq!((r.state(), r.generation.0), (State::Forgotten, *generation));
                    prop_assert_eq!(r.expires_at(), Some(Timestamp(*expires_at)));
                    let idem_core::Status::Tombstone { verdict: kept, .. } = r.status else {
                        unreachable!()
                    };
                    prop_assert_eq!(kept, *verdict);
                }
                (m, r) => prop_assert!(false, "model {m:?} but record {r:?}"),
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn protocol_matches_the_model_with_unknown_on_expiry(
        ops in proptest::collection::vec(op(), 1..120),
        tomb in prop::sample::select(vec![0u64, 700]),
    ) {
        run(ops, false, tomb)?;
    }

    #[test]
    fn protocol_matches_the_model_with_takeover(
        ops in proptest::collection::vec(op(), 1..120),
        tomb in prop::sample::select(vec![0u64, 700]),
    ) {
        run(ops, true, tomb)?;
    }
}
