//! One test per row of the protocol table, and each refusal.

use super::*;
use alloc::vec;

const T0: Timestamp = Timestamp(1_700_000_000_000);

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

fn config() -> Config {
    Config {
        lease_ms: 1_000,
        success_retention_ms: 10_000,
        failure_retention_ms: 5_000,
        ..Config::default()
    }
}

fn pending(generation: u64, lease_until: Timestamp) -> Record {
    Record {
        fingerprint: fp("a"),
        generation: Generation(generation),
        created_at: T0,
        updated_at: T0,
        status: Status::Pending { lease_until },
    }
}

fn settled(verdict: Verdict, expires_at: Timestamp) -> Record {
    Record {
        status: Status::Settled {
            verdict,
            outcome: Outcome::new(201, "ok"),
            completed_at: T0,
            expires_at,
        },
        ..pending(3, T0)
    }
}

fn unknown() -> Record {
    Record {
        status: Status::Unknown,
        ..pending(3, T0)
    }
}

fn put(write: Write) -> Record {
    match write {
        Write::Put(record) => record,
        other => panic!("expected a put, got {other:?}"),
    }
}

#[test]
fn begin_on_absent_claims_a_new_generation() {
    let t = begin(None, fp("a"), Generation(7), T0, &config());
    let lease_until = T0.plus_millis(1_000);
    assert_eq!(
        t.decision,
        Decision::Claimed {
            generation: Generation(7),
            lease_until
        }
    );
    let record = put(t.write);
    assert_eq!(record.generation, Generation(7));
    assert_eq!(record.status, Status::Pending { lease_until });
    assert_eq!((record.created_at, record.updated_at), (T0, T0));
}

fn without_tombstones() -> Config {
    Config {
        tombstone_retention_ms: 0,
        ..config()
    }
}

#[test]
fn begin_on_expired_settled_without_tombstones_claims_again_even_with_another_fingerprint() {
    for verdict in [Verdict::Succeeded, Verdict::Failed] {
        let old = settled(verdict, T0.plus_millis(50));
        let t = begin(
            Some(&old),
            fp("other"),
            Generation(9),
            T0.plus_millis(50),
            &without_tombstones(),
        );
        assert!(matches!(
            t.decision,
            Decision::Claimed {
                generation: Generation(9),
                ..
            }
        ));
        assert_eq!(put(t.write).fingerprint, fp("other"));
    }
}

fn tombstone(verdict: Verdict, expires_at: Timestamp) -> Record {
    Record {
        updated_at: T0.plus_millis(50),
        status: Status::Tombstone {
            verdict,
            completed_at: T0,
            expires_at,
        },
        ..pending(3, T0)
    }
}

#[test]
fn begin_on_expired_settled_within_tombstone_retention_is_forgotten_and_writes_nothing() {
    let config = Config {
        tombstone_retention_ms: 100,
        ..config()
    };
    for verdict in [Verdict::Succeeded, Verdict::Failed] {
        let old = settled(verdict, T0.plus_millis(50));
        // Whether sweep turned it into its tombstone yet or not, the answer is the same.
        for current in [old.clone(), old.tombstone(100).unwrap()] {
            for now in [50, 149] {
                let t = begin(
                    Some(&current),
                    fp("a"),
                    Generation(9),
                    T0.plus_millis(now),
                    &config,
                );
                assert_eq!(
                    t.decision,
                    Decision::Forgotten {
                        generation: Generation(3),
                        verdict,
                        completed_at: T0,
                    },
                    "{current:?} at +{now}"
                );
                assert_eq!(t.write, Write::Nothing);
                let other = begin(
                    Some(&current),
                    fp("other"),
                    Generation(9),
                    T0.plus_millis(now),
                    &config,
                );
                assert_eq!(
                    other.decision,
                    Decision::Conflict {
                        state: State::Forgotten,
                        stored_fingerprint: fp("a"),
                    }
                );
                assert_eq!(other.write, Write::Nothing);
            }
            // Past the tombstone's own time the key is free again.
            let t = begin(
                Some(&current),
                fp("other"),
                Generation(9),
                T0.plus_millis(150),
                &config,
            );
            assert!(matches!(
                t.decision,
                Decision::Claimed {
                    generation: Generation(9),
                    ..
                }
            ));
        }
    }
}

#[test]
fn a_tombstone_keeps_what_identifies_the_request_and_no_outcome() {
    let old = settled(Verdict::Failed, T0.plus_millis(50));
    assert_eq!(
        old.tombstone(100),
        Some(tombstone(Verdict::Failed, T0.plus_millis(150)))
    );
    assert_eq!(old.tombstone(0), None, "0 turns tombstones off");
    for other in [pending(3, T0), unknown(), tombstone(Verdict::Failed, T0)] {
        assert_eq!(other.tombstone(100), None, "{other:?}");
    }
    let kept = tombstone(Verdict::Succeeded, T0.plus_millis(150));
    assert_eq!(kept.state(), State::Forgotten);
    assert_eq!(kept.expires_at(), Some(T0.plus_millis(150)));
    assert_eq!(kept.lease_until(), None);
}

#[test]
fn sweep_leaves_a_tombstone_then_deletes_it() {
    let config = Config {
        tombstone_retention_ms: 100,
        ..config()
    };
    let old = settled(Verdict::Succeeded, T0.plus_millis(50));
    assert_eq!(sweep(&old, T0.plus_millis(49), &config), Swept::Keep);
    let Swept::Tombstone(kept) = sweep(&old, T0.plus_millis(50), &config) else {
        panic!("a settled record past retention leaves its tombstone");
    };
    assert_eq!(kept, old.tombstone(100).unwrap());
    assert_eq!(sweep(&kept, T0.plus_millis(149), &config), Swept::Keep);
    assert_eq!(sweep(&kept, T0.plus_millis(150), &config), Swept::Delete);
    // A sweep that comes late, past the tombstone's time too, deletes at once.
    assert_eq!(sweep(&old, T0.plus_millis(150), &config), Swept::Delete);
    assert_eq!(
        sweep(&old, T0.plus_millis(50), &without_tombstones()),
        Swept::Delete
    );
    for never in [pending(3, T0), unknown()] {
        assert_eq!(sweep(&never, Timestamp(u64::MAX), &config), Swept::Keep);
    }
}

#[test]
fn executor_inputs_on_a_tombstone_are_stale_and_resolve_is_wrong_state() {
    let kept = tombstone(Verdict::Succeeded, T0.plus_millis(150));
    assert!(matches!(
        heartbeat(Some(&kept), Generation(3), T0, &config()),
        Err(Refusal::Stale {
            state: State::Forgotten,
            ..
        })
    ));
    assert!(matches!(
        release(Some(&kept), Generation(3)),
        Err(Refusal::Stale { .. })
    ));
    assert_eq!(
        resolve(Some(&kept), Resolution::NotExecuted, T0, &config()),
        Err(Refusal::WrongState {
            state: State::Forgotten,
            expected: State::Unknown,
        })
    );
}

#[test]
fn begin_with_another_fingerprint_on_a_live_record_is_a_conflict() {
    let live = [
        pending(3, T0.plus_millis(10)),
        pending(3, T0),
        settled(Verdict::Succeeded, T0.plus_millis(10)),
        settled(Verdict::Failed, T0.plus_millis(10)),
        unknown(),
    ];
    for record in live {
        let t = begin(Some(&record), fp("b"), Generation(9), T0, &config());
        assert_eq!(
            t.decision,
            Decision::Conflict {
                state: record.state(),
                stored_fingerprint: fp("a")
            }
        );
        assert_eq!(t.write, Write::Nothing);
    }
}

#[test]
fn begin_on_pending_with_lease_running_is_in_progress() {
    let record = pending(3, T0.plus_millis(1));
    let t = begin(Some(&record), fp("a"), Generation(9), T0, &config());
    assert_eq!(
        t.decision,
        Decision::InProgress {
            generation: Generation(3),
            lease_until: T0.plus_millis(1)
        }
    );
    assert_eq!(t.write, Write::Nothing);
}

#[test]
fn begin_on_expired_lease_turns_unknown_by_default() {
    let record = pending(3, T0);
    let t = begin(Some(&record), fp("a"), Generation(9), T0, &config());
    assert_eq!(
        t.decision,
        Decision::NeedsReconciliation {
            generation: Generation(3)
        }
    );
    let written = put(t.write);
    assert_eq!(written.status, Status::Unknown);
    assert_eq!(written.generation, Generation(3));
}

#[test]
fn begin_on_expired_lease_with_takeover_fences_the_old_executor() {
    let config = Config {
        on_lease_expiry: LeaseExpiry::Takeover,
        ..config()
    };
    let record = pending(3, T0);
    let t = begin(Some(&record), fp("a"), Generation(9), T0, &config);
    assert!(matches!(
        t.decision,
        Decision::Claimed {
            generation: Generation(9),
            ..
        }
    ));
    let written = put(t.write);
    assert_eq!(
        complete(
            Some(&written),
            Generation(3),
            Verdict::Succeeded,
            Outcome::default(),
            T0,
            &config
        ),
        Err(Refusal::Stale {
            given: Generation(3),
            current: Generation(9),
            state: State::Pending
        })
    );
}

#[test]
fn begin_on_live_settled_replays_the_outcome() {
    for verdict in [Verdict::Succeeded, Verdict::Failed] {
        let record = settled(verdict, T0.plus_millis(1));
        let t = begin(Some(&record), fp("a"), Generation(9), T0, &config());
        assert_eq!(
            t.decision,
            Decision::Replay {
                verdict,
                outcome: Outcome::new(201, "ok"),
                completed_at: T0
            }
        );
        assert_eq!(t.write, Write::Nothing);
    }
}

#[test]
fn begin_on_unknown_needs_reconciliation_forever() {
    let record = unknown();
    let years_later = T0.plus_millis(10 * 365 * 24 * 3_600_000);
    let t = begin(
        Some(&record),
        fp("a"),
        Generation(9),
        years_later,
        &config(),
    );
    assert_eq!(
        t.decision,
        Decision::NeedsReconciliation {
            generation: Generation(3)
        }
    );
    assert_eq!(t.write, Write::Nothing);
    assert!(!sweepable(&record, years_later));
}

#[test]
fn heartbeat_extends_the_lease() {
    let record = pending(3, T0.plus_millis(5));
    let later = T0.plus_millis(500);
    let written = heartbeat(Some(&record), Generation(3), later, &config()).unwrap();
    assert_eq!(
        written.status,
        Status::Pending {
            lease_until: later.plus_millis(1_000)
        }
    );
    assert_eq!(written.updated_at, later);
}

#[test]
fn complete_settles_with_the_verdicts_retention() {
    let record = pending(3, T0.plus_millis(5));
    for (verdict, retention) in [(Verdict::Succeeded, 10_000), (Verdict::Failed, 5_000)] {
        let outcome = Outcome::new(402, vec![1, 2, 3]);
        let written = complete(
            Some(&record),
            Generation(3),
            verdict,
            outcome.clone(),
            T0,
            &config(),
        )
        .unwrap();
        assert_eq!(
            written.status,
            Status::Settled {
                verdict,
                outcome,
                completed_at: T0,
                expires_at: T0.plus_millis(retention)
            }
        );
    }
}

#[test]
fn complete_refuses_an_oversize_outcome() {
    let config = Config {
        max_outcome_bytes: 4,
        ..config()
    };
    let record = pending(3, T0.plus_millis(5));
    let err = complete(
        Some(&record),
        Generation(3),
        Verdict::Succeeded,
        Outcome::new(0, [0; 5]),
        T0,
        &config,
    )
    .unwrap_err();
    assert_eq!(
        err,
        Refusal::OutcomeTooLarge(OutcomeError { len: 5, max: 4 })
    );
    assert_eq!(
        alloc::string::ToString::to_string(&err),
        "outcome: 5 bytes, at most 4"
    );
}

#[test]
fn release_deletes_so_a_retry_may_claim() {
    let record = pending(3, T0.plus_millis(5));
    assert_eq!(release(Some(&record), Generation(3)), Ok(Delete));
}

#[test]
fn mark_unknown_keeps_generation_and_fingerprint() {
    let record = pending(3, T0.plus_millis(5));
    let written = mark_unknown(Some(&record), Generation(3), T0).unwrap();
    assert_eq!(written.status, Status::Unknown);
    assert_eq!(
        (written.generation, written.fingerprint),
        (Generation(3), fp("a"))
    );
}

#[test]
fn resolve_settles_an_unknown_as_complete_would() {
    let record = unknown();
    let outcome = Outcome::new(200, "done");
    let written = resolve(
        Some(&record),
        Resolution::Succeeded(outcome.clone()),
        T0,
        &config(),
    )
    .unwrap()
    .expect("a succeeded resolution puts the settled record");
    assert_eq!(
        written.status,
        Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: outcome.clone(),
            completed_at: T0,
            expires_at: T0.plus_millis(10_000)
        }
    );
    let written = resolve(Some(&record), Resolution::Failed(outcome), T0, &config())
        .unwrap()
        .expect("a failed resolution puts the settled record");
    assert_eq!(written.state(), State::Failed);
    assert_eq!(written.expires_at(), Some(T0.plus_millis(5_000)));
}

#[test]
fn resolve_not_executed_deletes() {
    assert_eq!(
        resolve(Some(&unknown()), Resolution::NotExecuted, T0, &config()),
        Ok(None)
    );
}

#[test]
fn sweep_takes_only_settled_records_past_expiry() {
    let at = T0.plus_millis(100);
    assert!(sweepable(&settled(Verdict::Succeeded, at), at));
    assert!(sweepable(&settled(Verdict::Failed, at), at));
    assert!(!sweepable(
        &settled(Verdict::Succeeded, at),
        T0.plus_millis(99)
    ));
    assert!(!sweepable(&pending(3, T0), Timestamp(u64::MAX)));
    assert!(!sweepable(&unknown(), Timestamp(u64::MAX)));
}

#[test]
fn executor_inputs_with_another_generation_or_state_are_stale() {
    let config = config();
    let cases = [
        pending(4, T0.plus_millis(5)),
        settled(Verdict::Succeeded, T0.plus_millis(5)),
        unknown(),
    ];
    for record in cases {
        let stale = Refusal::Stale {
            given: Generation(3),
            current: record.generation,
            state: record.state(),
        };
        let current = Some(&record);
        assert_eq!(
            heartbeat(current, Generation(3), T0, &config),
            Err(stale.clone())
        );
        assert_eq!(
            complete(
                current,
                Generation(3),
                Verdict::Succeeded,
                Outcome::default(),
                T0,
                &config
            ),
            Err(stale.clone())
        );
        assert_eq!(release(current, Generation(3)), Err(stale.clone()));
        assert_eq!(mark_unknown(current, Generation(3), T0), Err(stale));
    }
    // Settled with the same generation: the executor cannot overwrite its own outcome.
    let done = settled(Verdict::Succeeded, T0.plus_millis(5));
    assert!(matches!(
        complete(
            Some(&done),
            done.generation,
            Verdict::Failed,
            Outcome::default(),
            T0,
            &config
        ),
        Err(Refusal::Stale {
            state: State::Succeeded,
            ..
        })
    ));
}

#[test]
fn inputs_on_an_absent_key_are_not_found() {
    let config = config();
    assert_eq!(
        heartbeat(None, Generation(1), T0, &config),
        Err(Refusal::NotFound)
    );
    assert_eq!(
        complete(
            None,
            Generation(1),
            Verdict::Succeeded,
            Outcome::default(),
            T0,
            &config
        ),
        Err(Refusal::NotFound)
    );
    assert_eq!(release(None, Generation(1)), Err(Refusal::NotFound));
    assert_eq!(
        mark_unknown(None, Generation(1), T0),
        Err(Refusal::NotFound)
    );
    assert_eq!(
        resolve(None, Resolution::NotExecuted, T0, &config),
        Err(Refusal::NotFound)
    );
}

#[test]
fn resolve_refuses_anything_but_unknown() {
    for record in [pending(3, T0), settled(Verdict::Failed, T0.plus_millis(5))] {
        assert_eq!(
            resolve(Some(&record), Resolution::NotExecuted, T0, &config()),
            Err(Refusal::WrongState {
                state: record.state(),
                expected: State::Unknown
            })
        );
    }
}

#[test]
fn stale_message_names_both_generations() {
    let err = Refusal::Stale {
        given: Generation(3),
        current: Generation(4),
        state: State::Pending,
    };
    assert_eq!(
        alloc::string::ToString::to_string(&err),
        "generation 3 is stale: the record is pending with generation 4; only the current pending generation may act"
    );
}
