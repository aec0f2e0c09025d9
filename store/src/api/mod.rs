//! The public API: [`crate::Store`] and its features, each feature's `impl Store` in a
//! file of its own.

pub(crate) mod entity;
pub(crate) mod execute;
pub(crate) mod inbox;
pub(crate) mod maintain;
pub(crate) mod outbox;
pub(crate) mod read;
pub(crate) mod reconcile;
pub(crate) mod store;
pub(crate) mod token;
pub(crate) mod transfer;
pub(crate) mod two_phase;

#[cfg(test)]
mod tests;
