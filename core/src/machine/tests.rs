//! Unit tests of entity machines, golden bytes, and a property test against a reference
//! model.

use alloc::collections::BTreeSet;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use proptest::prelude::*;

use super::*;

fn s(text: &str) -> String {
    text.into()
}

fn payment() -> Machine {
    Machine::new(MachineSpec {
        states: vec![s("created"), s("paid"), s("refunded"), s("cancelled")],
        initial: s("created"),
        moves: vec![
            (s("created"), s("paid")),
            (s("created"), s("cancelled")),
            (s("paid"), s("refunded")),
        ],
    })
    .unwrap()
}

fn at(state: &str, version: u64) -> Entity {
    Entity {
        state: s(state),
        version,
        updated_at: Timestamp(5),
    }
}

#[test]
fn the_five_outcomes_of_the_table() {
    let m = payment();
    let now = Timestamp(9);
    let applied = |state: &str, version| EntityDecision::Applied {
        entity: Entity {
            state: s(state),
            version,
            updated_at: now,
        },
    };
    // Absent: the initial state, or a move allowed from it, makes version 1.
    assert_eq!(
        transition(&m, None, "created", None, now),
        applied("created", 1)
    );
    assert_eq!(transition(&m, None, "paid", None, now), applied("paid", 1));
    assert_eq!(
        transition(&m, None, "refunded", None, now),
        EntityDecision::Illegal {
            from: s("created"),
            to: s("refunded")
        }
    );
    // Already there, whatever the version given.
    let paid = at("paid", 2);
    assert_eq!(
        transition(&m, Some(&paid), "paid", Some(1), now),
        EntityDecision::AlreadyThere {
            entity: paid.clone()
        }
    );
    // Allowed, with the right version or none.
    assert_eq!(
        transition(&m, Some(&paid), "refunded", Some(2), now),
        applied("refunded", 3)
    );
    assert_eq!(
        transition(&m, Some(&paid), "refunded", None, now),
        applied("refunded", 3)
    );
    // Not allowed, or no state at all.
    assert_eq!(
        transition(&m, Some(&paid), "created", None, now),
        EntityDecision::Illegal {
            from: s("paid"),
            to: s("created")
        }
    );
    assert!(matches!(
        transition(&m, Some(&paid), "shipped", None, now),
        EntityDecision::Illegal { .. }
    ));
    // Allowed, but someone moved it meanwhile.
    assert_eq!(
        transition(&m, Some(&paid), "refunded", Some(1), now),
        EntityDecision::VersionMismatch {
            expected: 1,
            current: 2
        }
    );
    assert_eq!(
        transition(&m, None, "paid", Some(3), now),
        EntityDecision::VersionMismatch {
            expected: 3,
            current: 0
        }
    );
}

#[test]
fn bad_machines_are_refused_naming_the_problem() {
    let spec = |states: &[&str], initial: &str, moves: &[(&str, &str)]| MachineSpec {
        states: states.iter().map(|x| s(x)).collect(),
        initial: s(initial),
        moves: moves.iter().map(|(a, b)| (s(a), s(b))).collect(),
    };
    let cases = [
        (
            spec(&[], "a", &[]),
            "states: empty, a machine needs at least one",
        ),
        (
            spec(&["a", ""], "a", &[]),
            "states: state name \"\" must be 1 to 64 bytes without control characters",
        ),
        (spec(&["a", "a"], "a", &[]), "states: \"a\" is listed twice"),
        (
            spec(&["a", "b"], "c", &[]),
            "initial: \"c\" is not one of the states",
        ),
        (
            spec(&["a", "b"], "a", &[("a", "x")]),
            "moves: \"x\" is not one of the states",
        ),
        (
            spec(&["a", "b"], "a", &[("a", "b"), ("a", "b")]),
            "moves: [\"a\", \"b\"] is listed twice",
        ),
        (
            spec(&["a", "b"], "a", &[("b", "b")]),
            "moves: [\"b\", \"b\"] moves nowhere (staying is always allowed)",
        ),
        (
            spec(&["a", "b\u{7}"], "a", &[]),
            "states: state name \"b\\u{7}\" must be 1 to 64 bytes without control characters",
        ),
    ];
    for (spec, message) in cases {
        assert_eq!(Machine::new(spec).unwrap_err().to_string(), message);
    }
}

/// Golden bytes: the entity encoding is part of the file format.
#[test]
fn entity_bytes_are_frozen() {
    let entity = Entity {
        state: s("paid"),
        version: 3,
        updated_at: Timestamp(0x0102),
    };
    let bytes = entity.encode();
    assert_eq!(bytes, [1, 4, b'p', b'a', b'i', b'd', 3, 0x82, 0x02]);
    assert_eq!(Entity::decode(&bytes).unwrap(), entity);
    assert!(Entity::decode(&[2, 0]).is_err());
    assert!(Entity::decode(&[1, 9]).is_err());
}

/// The reference model: a set of allowed moves and a map from entity to (state,
/// version), a few obviously right lines.
fn model(
    states: &[String],
    moves: &BTreeSet<(String, String)>,
    current: Option<&(String, u64)>,
    to: &str,
    expected: Option<u64>,
) -> Option<(String, u64)> {
    let (from, version) = current.map_or((states[0].as_str(), 0), |(s, v)| (s.as_str(), *v));
    if current.is_some_and(|(s, _)| s == to) {
        return None;
    }
    let legal = states.iter().any(|s| s == to)
        && ((current.is_none() && to == states[0].as_str())
            || moves.contains(&(from.to_string(), to.to_string())));
    if !legal || expected.is_some_and(|e| e != version) {
        return None;
    }
    Some((to.to_string(), version + 1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random machines over up to 6 states, random sequences of moves with fresh and
    /// stale versions: the machine agrees with the model, versions go up by exactly one
    /// per applied move, and a move that is not applied writes nothing.
    #[test]
    fn transitions_follow_the_reference_model(
        n in 1usize..6,
        edges in proptest::collection::btree_set((0usize..6, 0usize..6), 0..20),
        steps in proptest::collection::vec((0usize..7, proptest::option::of(0u64..6)), 1..60),
    ) {
        let states: Vec<String> = (0..n).map(|i| alloc::format!("s{i}")).collect();
        let moves: BTreeSet<(String, String)> = edges
            .into_iter()
            .filter(|(a, b)| a < &n && b < &n && a != b)
            .map(|(a, b)| (states[a].clone(), states[b].clone()))
            .collect();
        let machine = Machine::new(MachineSpec {
            states: states.clone(),
            initial: states[0].clone(),
            moves: moves.iter().cloned().collect(),
        })
        .unwrap();
        let mut entity: Option<Entity> = None;
        let mut reference: Option<(String, u64)> = None;
        for (i, (target, expected)) in steps.into_iter().enumerate() {
            // Index n names no state: an unknown target.
            let to = states.get(target).cloned().unwrap_or_else(|| "nowhere".into());
            let decision = transition(&machine, entity.as_ref(), &to, expected, Timestamp(i as u64));
            let next = model(&states, &moves, reference.as_ref(), &to, expected);
            match (decision, next) {
                (EntityDecision::Applied { entity: new }, Some((state, version))) => {
                    prop_assert_eq!(&new.state, &state);
                    prop_assert_eq!(new.version, version);
                    prop_assert_eq!(new.version, entity.as_ref().map_or(0, |e| e.version) + 1);
                    entity = Some(new);
                    reference = Some((state, version));
                }
                (EntityDecision::Applied { .. }, None) => prop_assert!(false, "applied what the model refuses"),
                (other, Some(_)) => prop_assert!(false, "refused what the model applies: {:?}", other),
                (EntityDecision::AlreadyThere { entity: same }, None) => {
                    prop_assert_eq!(Some(&same), entity.as_ref());
                }
                (_, None) => {}
            }
        }
    }
}
