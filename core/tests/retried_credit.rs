//! The story of one retried credit, told through the pure protocol.

use idem_core::memory::MemoryReceiver;
use idem_core::protocol::{Decision, Refusal};
use idem_core::{Config, Fingerprint, Generation, Outcome, RecordId, State, Timestamp, Verdict};

const MINUTE: u64 = 60_000;
const DAY: u64 = 24 * 60 * MINUTE;

#[test]
fn a_retried_credit_executes_once() {
    let mut receiver = MemoryReceiver::new(Config::default());
    let id = RecordId::new("shop-7", "credit", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap();
    let credit = Fingerprint::of_fields(&[("account", b"A-1"), ("amount", b"2500")]).unwrap();
    let t0 = Timestamp(1_750_000_000_000);

    // The first request claims the key.
    let Decision::Claimed { generation, .. } = receiver.begin(&id, credit, t0).unwrap() else {
        panic!("the first begin must claim");
    };

    // A duplicate arriving while the first executes is told to wait for the lease.
    let duplicate = receiver.begin(&id, credit, t0.plus_millis(10)).unwrap();
    assert_eq!(
        duplicate,
        Decision::InProgress {
            generation,
            lease_until: t0.plus_millis(30_000)
        }
    );

    // The executor completes.
    let receipt = Outcome::new(201, br#"{"balance":12500}"#.to_vec());
    receiver
        .complete(
            &id,
            generation,
            Verdict::Succeeded,
            receipt.clone(),
            t0.plus_millis(40),
        )
        .unwrap();

    // The client lost the reply and retries: it gets the same bytes, nothing runs again.
    let retry = receiver
        .begin(&id, credit, t0.plus_millis(5 * MINUTE))
        .unwrap();
    assert_eq!(
        retry,
        Decision::Replay {
            verdict: Verdict::Succeeded,
            outcome: receipt,
            completed_at: t0.plus_millis(40)
        }
    );

    // A different amount under the same key is a conflict, never accepted silently.
    let changed = Fingerprint::of_fields(&[("account", b"A-1"), ("amount", b"9999")]).unwrap();
    assert_eq!(
        receiver
            .begin(&id, changed, t0.plus_millis(6 * MINUTE))
            .unwrap(),
        Decision::Conflict {
            state: State::Succeeded,
            stored_fingerprint: credit
        }
    );

    // Another tenant with the same key does not meet this one.
    let other_tenant = RecordId::new("shop-8", "credit", id.key()).unwrap();
    assert!(matches!(
        receiver
            .begin(&other_tenant, changed, t0.plus_millis(7 * MINUTE))
            .unwrap(),
        Decision::Claimed { .. }
    ));

    // Retention ends: the outcome is forgotten, and a late retry still does not execute.
    let after_retention = t0.plus_millis(40 + DAY);
    assert_eq!(
        receiver.begin(&id, credit, after_retention).unwrap(),
        Decision::Forgotten {
            generation,
            verdict: Verdict::Succeeded,
            completed_at: t0.plus_millis(40),
        }
    );

    // The tombstone's 30 days end too: the key can be claimed again, and the earlier
    // generation is fenced.
    let after_retention = t0.plus_millis(40 + 31 * DAY);
    let Decision::Claimed {
        generation: second, ..
    } = receiver.begin(&id, credit, after_retention).unwrap()
    else {
        panic!("an expired key must be claimable");
    };
    assert!(second > generation);
    assert!(matches!(
        receiver.complete(
            &id,
            generation,
            Verdict::Succeeded,
            Outcome::default(),
            after_retention
        ),
        Err(Refusal::Stale { .. })
    ));

    // An executor that cannot tell what happened marks the outcome unknown...
    receiver
        .mark_unknown(&id, second, after_retention.plus_millis(5))
        .unwrap();
    // ...and a day later it is still unknown: time alone never settles or removes it.
    let a_day_later = after_retention.plus_millis(DAY);
    assert_eq!(
        receiver.begin(&id, credit, a_day_later).unwrap(),
        Decision::NeedsReconciliation { generation: second }
    );
    assert!(receiver.sweep(a_day_later, 100).is_empty());
    assert_eq!(receiver.get(&id).map(|r| r.state()), Some(State::Unknown));
    assert_eq!(receiver.generation(), Generation(3));
}
