//! State machines and callback orders for the entity tests of both engines.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use idem_core::machine::{Machine, MachineSpec};

/// A machine of `states` (the first is the initial one) and the allowed `moves`.
pub fn machine(states: &[&str], moves: &[(&str, &str)]) -> Machine {
    Machine::new(MachineSpec {
        states: states.iter().map(|s| s.to_string()).collect(),
        initial: states[0].to_string(),
        moves: moves
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
    })
    .unwrap()
}

/// Every distinct order of a multiset of events, from `at` on, pushed to `out`.
pub fn orders(events: &mut Vec<&'static str>, at: usize, out: &mut Vec<Vec<&'static str>>) {
    if at == events.len() {
        out.push(events.clone());
        return;
    }
    let mut seen = Vec::new();
    for i in at..events.len() {
        if seen.contains(&events[i]) {
            continue;
        }
        seen.push(events[i]);
        events.swap(at, i);
        orders(events, at + 1, out);
        events.swap(at, i);
    }
}
