//! Entity state machines with a version check (docs/design.md §8): the layers after the key.
//!
//! The key (the receiver protocol) stops a retry from running twice, but not two keys
//! for one business fact, callbacks that arrive out of order, or two operators editing
//! one order. An [`Entity`] is a business object's state and version; a [`Machine`] is
//! plain data that says which moves between states are allowed; [`transition`] decides
//! a move, purely:
//!
//! | current | result |
//! |---|---|
//! | absent, `to` is the initial state or allowed from it | put `{to, version 1}` → [`EntityDecision::Applied`] |
//! | state == `to` | nothing → [`EntityDecision::AlreadyThere`] (a repeated callback is harmless) |
//! | `(state, to)` not allowed (or `to` no state of the machine) | nothing → [`EntityDecision::Illegal`] |
//! | `expected_version` given and different | nothing → [`EntityDecision::VersionMismatch`] |
//! | `(state, to)` allowed, version matches or not given | put `{to, version + 1}` → [`EntityDecision::Applied`] |
//!
//! The checks run in that order: a repeated move is AlreadyThere even with a stale
//! version, and an illegal move is Illegal whatever the version. An absent entity has
//! version 0. Only [`EntityDecision::Applied`] writes, and it carries the entity to put.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::encoding::{self, DecodeError};
use crate::quote::Quoted;

/// The longest state name, in bytes.
pub const MAX_STATE_LEN: usize = 64;

/// A business object's state: where it is, how many moves it made, when the last one
/// was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// The current state, one of its machine's.
    pub state: String,
    /// Moves applied so far: 1 after the first, then one more per move.
    pub version: u64,
    /// When the last move was applied.
    pub updated_at: Timestamp,
}

impl Entity {
    /// The persisted bytes: a version byte, then postcard.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encoding::encode(self)
    }

    /// Decodes bytes made by [`Entity::encode`].
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for empty, newer-format or malformed bytes.
    pub fn decode(bytes: &[u8]) -> Result<Entity, DecodeError> {
        encoding::decode(bytes, "entity")
    }
}

/// A machine as written by hand (a JSON file for the CLI): states, the initial one, and
/// the allowed moves as `[from, to]` pairs. [`Machine::new`] checks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    /// Every state.
    pub states: Vec<String>,
    /// The state an entity starts in.
    pub initial: String,
    /// The allowed moves, `[from, to]`.
    pub moves: Vec<(String, String)>,
}

/// States and the allowed moves between them, checked: every name is a state, no state
/// or move is listed twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    // Sorted, for lookups without a hash map.
    states: Vec<String>,
    // Positions in `states`: a move compares as two integers, in the order of its names.
    initial: usize,
    // Sorted; `(from, to)`.
    moves: Vec<(usize, usize)>,
}

/// A machine that cannot work, naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MachineError {
    /// No states at all.
    NoStates,
    /// A state name is empty, too long, or holds a control character.
    BadName {
        /// The name.
        name: String,
        /// Where it appears: `states`, `initial` or `moves`.
        field: &'static str,
    },
    /// A state is listed twice.
    DuplicateState(String),
    /// A move names a state the machine does not have (or the initial state is not one).
    UnknownState {
        /// The name.
        name: String,
        /// Where it appears: `initial` or `moves`.
        field: &'static str,
    },
    /// A move is listed twice.
    DuplicateMove(String, String),
    /// A move from a state to itself: staying is always allowed (AlreadyThere).
    SelfMove(String),
}

impl fmt::Display for MachineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineError::NoStates => f.write_str("states: empty, a machine needs at least one"),
            MachineError::BadName { name, field } => write!(
                f,
                "{field}: state name {} must be 1 to {MAX_STATE_LEN} bytes without control characters",
                Quoted(name)
            ),
            MachineError::DuplicateState(name) => {
                write!(f, "states: {} is listed twice", Quoted(name))
            }
            MachineError::UnknownState { name, field } => {
                write!(f, "{field}: {} is not one of the states", Quoted(name))
            }
            MachineError::DuplicateMove(from, to) => {
                write!(
                    f,
                    "moves: [{}, {}] is listed twice",
                    Quoted(from),
                    Quoted(to)
                )
            }
            MachineError::SelfMove(name) => write!(
                f,
                "moves: [{0}, {0}] moves nowhere (staying is always allowed)",
                Quoted(name)
            ),
        }
    }
}

impl core::error::Error for MachineError {}

/// Where `name` is in the sorted `states`.
fn position(states: &[String], name: &str) -> Option<usize> {
    states.binary_search_by(|s| s.as_str().cmp(name)).ok()
}

fn check_name(name: &str, field: &'static str) -> Result<(), MachineError> {
    if name.is_empty() || name.len() > MAX_STATE_LEN || name.chars().any(char::is_control) {
        return Err(MachineError::BadName {
            name: name.into(),
            field,
        });
    }
    Ok(())
}

impl Machine {
    /// A machine from its spec, checked.
    ///
    /// # Errors
    ///
    /// [`MachineError`] naming the first problem.
    pub fn new(spec: MachineSpec) -> Result<Machine, MachineError> {
        let MachineSpec {
            mut states,
            initial,
            moves,
        } = spec;
        if states.is_empty() {
            return Err(MachineError::NoStates);
        }
        for name in &states {
            check_name(name, "states")?;
        }
        // Through the crate's one sort, which orders positions (a few hundred bytes of wasm).
        let order = crate::order::sorted_positions(states.len(), &mut |a, b| {
            states[a].cmp(&states[b]).then(a.cmp(&b))
        });
        // Loops, not `collect`: each `collect` compiles to its own code.
        let mut sorted = Vec::with_capacity(order.len());
        for &i in &order {
            sorted.push(core::mem::take(&mut states[i]));
        }
        let states = sorted;
        if let Some(pair) = states.windows(2).find(|w| w[0] == w[1]) {
            return Err(MachineError::DuplicateState(pair[0].clone()));
        }
        let position = |name: &str, field| {
            check_name(name, field)?;
            position(&states, name).ok_or_else(|| MachineError::UnknownState {
                name: name.into(),
                field,
            })
        };
        let initial = position(&initial, "initial")?;
        let mut pairs = Vec::with_capacity(moves.len());
        for (from, to) in &moves {
            let pair = (position(from, "moves")?, position(to, "moves")?);
            if pair.0 == pair.1 {
                return Err(MachineError::SelfMove(from.clone()));
            }
            pairs.push(pair);
        }
        // States are sorted, so positions compare as the names do.
        let order = crate::order::sorted_positions(pairs.len(), &mut |a, b| {
            pairs[a].cmp(&pairs[b]).then(a.cmp(&b))
        });
        let mut moves = Vec::with_capacity(order.len());
        for &i in &order {
            moves.push(pairs[i]);
        }
        if let Some(pair) = moves.windows(2).find(|w| w[0] == w[1]) {
            let (from, to) = pair[0];
            return Err(MachineError::DuplicateMove(
                states[from].clone(),
                states[to].clone(),
            ));
        }
        Ok(Machine {
            states,
            initial,
            moves,
        })
    }

    /// The state an entity starts in.
    #[must_use]
    pub fn initial(&self) -> &str {
        &self.states[self.initial]
    }

    /// True when `state` is one of the machine's states.
    #[must_use]
    pub fn has_state(&self, state: &str) -> bool {
        position(&self.states, state).is_some()
    }

    /// True when the move `from` → `to` is allowed.
    #[must_use]
    pub fn allows(&self, from: &str, to: &str) -> bool {
        match (position(&self.states, from), position(&self.states, to)) {
            (Some(from), Some(to)) => self.moves.binary_search(&(from, to)).is_ok(),
            _ => false,
        }
    }

    /// The machine as its spec (states and moves sorted).
    #[must_use]
    pub fn spec(&self) -> MachineSpec {
        MachineSpec {
            states: self.states.clone(),
            initial: self.initial().into(),
            moves: self
                .moves
                .iter()
                .map(|&(from, to)| (self.states[from].clone(), self.states[to].clone()))
                .collect(),
        }
    }
}

/// What [`transition`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an applied move must be written before answering"]
pub enum EntityDecision {
    /// The move is applied: put this entity.
    Applied {
        /// The entity after the move.
        entity: Entity,
    },
    /// The entity is already in the target state; nothing to write.
    AlreadyThere {
        /// The entity as it is.
        entity: Entity,
    },
    /// The machine does not allow the move; nothing to write.
    Illegal {
        /// The current state (the initial one for an absent entity).
        from: String,
        /// The target state.
        to: String,
    },
    /// The caller expected another version: someone moved the entity meanwhile.
    VersionMismatch {
        /// The version the caller expected.
        expected: u64,
        /// The entity's version (0 when absent).
        current: u64,
    },
}

/// Decides the move of the entity `current` (`None`: absent) to `to`, with the
/// optimistic version check `expected_version`, at `now`. See the module table.
pub fn transition(
    machine: &Machine,
    current: Option<&Entity>,
    to: &str,
    expected_version: Option<u64>,
    now: Timestamp,
) -> EntityDecision {
    let (from, version) = match current {
        Some(entity) => (entity.state.as_str(), entity.version),
        None => (machine.initial(), 0),
    };
    if let Some(entity) = current.filter(|e| e.state == to) {
        return EntityDecision::AlreadyThere {
            entity: entity.clone(),
        };
    }
    let creates_initial = current.is_none() && to == machine.initial();
    if !machine.has_state(to) || !(creates_initial || machine.allows(from, to)) {
        return EntityDecision::Illegal {
            from: from.into(),
            to: to.into(),
        };
    }
    if let Some(expected) = expected_version.filter(|&v| v != version) {
        return EntityDecision::VersionMismatch {
            expected,
            current: version,
        };
    }
    EntityDecision::Applied {
        entity: Entity {
            state: to.into(),
            // Saturating: a version near u64::MAX comes only from damaged bytes.
            version: version.saturating_add(1),
            updated_at: now,
        },
    }
}

#[cfg(test)]
mod tests;
