//! The protocol paths: how an input runs in a write transaction (the two-phase steps,
//! atomic execute), how concurrent inputs share one (group commit), the answers a read
//! snapshot gives without one, and the layers after the key (entities and uniqueness,
//! tokens, the inbox), the reconciler's steps and the sender's outbox.

pub(crate) mod entity;
pub(crate) mod execute;
pub(crate) mod group;
pub(crate) mod inbox;
pub(crate) mod outbox;
pub(crate) mod reconcile;
pub(crate) mod snapshot;
pub(crate) mod token;
pub(crate) mod two_phase;
