//! Property test of the sender ledger over random sequences of inputs.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use proptest::prelude::*;

use super::*;

/// Retention 10 s, margin 1 s: an intent's deadline is 9 s after its creation, so the
/// sequences below reach it.
fn config(seed: u64) -> LedgerConfig {
    LedgerConfig {
        server_retention_ms: 10_000,
        safety_margin_ms: 1_000,
        base_backoff_ms: 50,
        max_backoff_ms: 2_000,
        ..LedgerConfig::with_seed(seed)
    }
}

const STATUSES: [u16; 15] = [
    200, 201, 303, 400, 404, 408, 409, 422, 425, 429, 500, 503, 0, 102, 600,
];

#[derive(Debug, Clone)]
enum Op {
    Begin,
    Due,
    Reply {
        pick: usize,
        status: u16,
        retry_in: Option<u64>,
    },
    TransportError {
        pick: usize,
    },
    Restart,
    SnapshotRestore,
    Forget {
        pick: usize,
    },
    Resolve {
        pick: usize,
        resolved_as: usize,
    },
    Advance {
        ms: u64,
    },
    JumpBack {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Begin),
        4 => Just(Op::Due),
        4 => (any::<usize>(), proptest::sample::select(&STATUSES[..]), proptest::option::of(0..15_000u64))
            .prop_map(|(pick, status, retry_in)| Op::Reply { pick, status, retry_in }),
        2 => any::<usize>().prop_map(|pick| Op::TransportError { pick }),
        1 => Just(Op::Restart),
        1 => Just(Op::SnapshotRestore),
        2 => any::<usize>().prop_map(|pick| Op::Forget { pick }),
        1 => (any::<usize>(), 0..3usize).prop_map(|(pick, resolved_as)| Op::Resolve { pick, resolved_as }),
        4 => (0..4_000u64).prop_map(|ms| Op::Advance { ms }),
        1 => (0..2_000u64).prop_map(|ms| Op::JumpBack { ms }),
    ]
}

/// What the test remembers about every key it was given.
#[derive(Default)]
struct Seen {
    /// Key → the intent as `begin` returned it.
    begun: BTreeMap<String, Intent>,
    /// Key → the intent when it first was terminal (and again when it was resolved).
    terminal: BTreeMap<String, Intent>,
    /// Keys of the expired intents nobody resolved yet: none may leave the ledger.
    unresolved: BTreeSet<String>,
    /// Key → highest attempt count seen.
    attempts: BTreeMap<String, u32>,
    forgotten: BTreeSet<String>,
}

impl Seen {
    fn check(&mut self, ledger: &Ledger) -> Result<(), TestCaseError> {
        for intent in ledger.iter() {
            let key = &intent.key;
            prop_assert!(!self.forgotten.contains(key), "forgotten {key} came back");
            let begun = self
                .begun
                .get(key)
                .ok_or_else(|| TestCaseError::fail("unknown key"))?;
            prop_assert_eq!(&intent.operation, &begun.operation);
            prop_assert_eq!(&intent.payload, &begun.payload);
            prop_assert_eq!(intent.deadline, begun.deadline);
            prop_assert_eq!(intent.created_at, begun.created_at);
            if intent.state == IntentState::Queued {
                prop_assert!(intent.next_attempt_at <= intent.deadline, "{intent:?}");
            }
            let last = self.attempts.entry(key.clone()).or_default();
            prop_assert!(intent.attempts >= *last, "attempts went down: {intent:?}");
            *last = intent.attempts;
            if let Some(settled) = self.terminal.get(key) {
                if intent != settled {
                    // The one change of a terminal intent: an expired one is resolved.
                    prop_assert!(settled.needs_resolution(), "a terminal intent changed");
                    prop_assert!(intent.resolution.is_some(), "{intent:?}");
                    let unresolved = Intent {
                        resolution: None,
                        ..intent.clone()
                    };
                    prop_assert_eq!(&unresolved, settled, "a resolve changed more");
                    self.terminal.insert(key.clone(), intent.clone());
                }
            } else if intent.state.is_terminal() {
                self.terminal.insert(key.clone(), intent.clone());
            }
            if intent.needs_resolution() {
                self.unresolved.insert(key.clone());
            } else {
                self.unresolved.remove(key);
            }
            if intent.resolution.is_some() {
                prop_assert_eq!(intent.state, IntentState::Expired);
            }
        }
        for key in &self.unresolved {
            prop_assert!(
                ledger.get(key).is_some(),
                "expired {key} left the ledger unresolved"
            );
        }
        Ok(())
    }
}

fn pick(ledger: &Ledger, seen: &Seen, index: usize) -> String {
    // Mostly keys in the ledger; sometimes a forgotten one.
    let mut keys: Vec<&String> = ledger.iter().map(|i| &i.key).collect();
    keys.extend(seen.forgotten.iter());
    if keys.is_empty() {
        String::from("no-such-key")
    } else {
        keys[index % keys.len()].clone()
    }
}

fn run(seed: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut ledger = Ledger::new(config(seed)).unwrap();
    let mut seen = Seen::default();
    let mut now = Timestamp(1_700_000_000_000);
    let mut counter = 0u64;
    for op in ops {
        match op {
            Op::Begin => {
                counter += 1;
                let mut random = [0xa5; 16];
                random[8..].copy_from_slice(&counter.to_be_bytes());
                let payload = counter.to_be_bytes().to_vec();
                let fingerprint = Fingerprint::of_bytes(&payload);
                let intent = ledger
                    .begin("op", payload, fingerprint, now, random)
                    .unwrap()
                    .clone();
                prop_assert!(
                    !seen.begun.contains_key(&intent.key),
                    "key reused: {}",
                    intent.key
                );
                prop_assert_eq!(intent.deadline, now.plus_millis(9_000));
                seen.begun.insert(intent.key.clone(), intent);
            }
            Op::Due => {
                let before: BTreeMap<String, Intent> =
                    ledger.iter().map(|i| (i.key.clone(), i.clone())).collect();
                for attempt in ledger.due(now) {
                    let intent = ledger.get(&attempt.key).unwrap();
                    prop_assert!(
                        now < intent.deadline,
                        "sent at {now} past {}",
                        intent.deadline
                    );
                    prop_assert_eq!(before[&attempt.key].state, IntentState::Queued);
                    prop_assert_eq!(intent.state, IntentState::InFlight);
                    prop_assert_eq!(attempt.attempt, intent.attempts);
                    prop_assert_eq!(&attempt.payload, &seen.begun[&attempt.key].payload);
                }
            }
            Op::Reply {
                pick: index,
                status,
                retry_in,
            } => {
                let key = pick(&ledger, &seen, index);
                let reply = Reply {
                    status,
                    body: Vec::new(),
                    retry_at: retry_in.map(|ms| now.plus_millis(ms)),
                };
                let result = ledger.on_reply(&key, reply, now);
                prop_assert_eq!(result.is_err(), ledger.get(&key).is_none());
            }
            Op::TransportError { pick: index } => {
                let key = pick(&ledger, &seen, index);
                let result = ledger.on_transport_error(&key, now);
                prop_assert_eq!(result.is_err(), ledger.get(&key).is_none());
            }
            Op::Restart => ledger.restart(),
            Op::SnapshotRestore => {
                let mut expected = ledger.clone();
                expected.restart();
                ledger = Ledger::restore(&ledger.snapshot()).unwrap();
                prop_assert_eq!(&ledger, &expected);
            }
            Op::Forget { pick: index } => {
                let key = pick(&ledger, &seen, index);
                let settled = ledger.get(&key).map(Intent::is_settled);
                let unresolved = ledger.get(&key).is_some_and(Intent::needs_resolution);
                match ledger.forget(&key) {
                    Ok(_) => {
                        prop_assert_eq!(settled, Some(true));
                        seen.forgotten.insert(key);
                    }
                    Err(LedgerError::Unresolved { .. }) => prop_assert!(unresolved),
                    Err(_) => prop_assert_ne!(settled, Some(true)),
                }
            }
            Op::Resolve {
                pick: index,
                resolved_as,
            } => {
                let key = pick(&ledger, &seen, index);
                let unresolved = ledger.get(&key).map(Intent::needs_resolution);
                let resolved_as = ResolvedAs::ALL[resolved_as];
                match ledger.resolve(&key, resolved_as, "checked with the receiver", now) {
                    Ok(intent) => {
                        prop_assert_eq!(unresolved, Some(true));
                        let resolution = intent.resolution.as_ref().unwrap();
                        prop_assert_eq!(resolution.resolved_as, resolved_as);
                        prop_assert_eq!(resolution.resolved_at, now);
                    }
                    Err(_) => prop_assert_ne!(unresolved, Some(true)),
                }
            }
            Op::Advance { ms } => now = now.plus_millis(ms),
            Op::JumpBack { ms } => now = Timestamp(now.0 - ms),
        }
        seen.check(&ledger)?;
    }
    // Whatever happened, nothing is sent at or after a deadline, and every queued intent
    // ends expired once time passes all deadlines.
    let end = Timestamp(u64::MAX / 2);
    prop_assert!(ledger.due(end).is_empty());
    prop_assert!(ledger.iter().all(|i| i.state != IntentState::Queued));
    seen.check(&ledger)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn ledger_invariants_hold_for_any_input_sequence(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        run(seed, ops)?;
    }
}
