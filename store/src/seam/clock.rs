//! The system clock as a [`Timestamp`], for applications that pass "now" to the store.

use std::time::SystemTime;

use idem_core::Timestamp;

/// The system clock's current time. A clock set before 1970 reads as the epoch (see
/// [`Timestamp`]'s conversion from [`SystemTime`]).
///
/// The store never calls it: every input takes its time as an argument, so tests and
/// tools can run at any time they choose.
#[must_use]
pub fn now() -> Timestamp {
    Timestamp::from(SystemTime::now())
}
