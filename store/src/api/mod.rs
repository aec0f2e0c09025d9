//! The public API: [`crate::Store`] and its features, each feature's `impl Store` in a
//! file of its own.

pub mod entity;
pub(crate) mod execute;
pub mod inbox;
pub mod maintain;
pub mod outbox;
pub(crate) mod read;
mod receiver;
pub(crate) mod reconcile;
pub(crate) mod store;
pub mod token;
pub(crate) mod transfer;
pub(crate) mod two_phase;

#[cfg(test)]
mod tests;
