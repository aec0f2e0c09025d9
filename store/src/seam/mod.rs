//! The seam: the floor every engine stands on. What the HTTP layer, `idem proxy`, the
//! reconciler and the operator need of a store ([`receiver::Receiver`]), and the
//! vocabulary every engine speaks: the reports its calls return, the list filter, the
//! addresses and rules of the layers after the key, and the export format.
//!
//! The seam imports no engine; every engine imports it.

#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) mod cache;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) mod claiming;
pub(crate) mod clock;
pub(crate) mod entity;
pub(crate) mod filter;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod lost;
pub(crate) mod poll;
pub(crate) mod receiver;
pub(crate) mod reconcile;
pub(crate) mod report;
#[cfg(any(
    feature = "http",
    feature = "postgres",
    feature = "mysql",
    feature = "redis"
))]
pub(crate) mod running;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod template;
pub(crate) mod token;
pub(crate) mod transfer;
