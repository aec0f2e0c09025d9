//! The bounded waits for the write lock: this process's threads queue on a [`Gate`],
//! then one of them waits for other processes in [`begin_write`]; a call gives up with
//! [`Error::Busy`] once its lock timeout has passed, counted from when it started.

use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use redb::{Database, TransactionError, WriteTransaction};

use crate::Error;

/// When a call started waiting and how long it may wait in all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    timeout: Duration,
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline {
            start: Instant::now(),
            timeout,
        }
    }

    /// How long the call has waited so far.
    pub(crate) fn waited(self) -> Duration {
        self.start.elapsed()
    }

    /// What is left of the timeout (zero once it passed).
    pub(crate) fn remaining(self) -> Duration {
        self.timeout.saturating_sub(self.start.elapsed())
    }

    /// The error for a call that ran out of time.
    pub(crate) fn busy(self) -> Error {
        Error::Busy {
            waited: self.waited(),
        }
    }
}

/// Lets one thread of this process at a time into a write transaction; the others wait,
/// each until its own deadline.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    busy: Mutex<bool>,
    freed: Condvar,
}

/// A thread's turn at the [`Gate`]; dropping it (also while a panic unwinds) lets the
/// next thread in.
#[derive(Debug)]
pub(crate) struct Turn<'g>(&'g Gate);

impl Gate {
    /// Waits for this thread's turn, or returns [`Error::Busy`] at the deadline.
    pub(crate) fn enter(&self, deadline: Deadline) -> Result<Turn<'_>, Error> {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        while *busy {
            let remaining = deadline.remaining();
            if remaining.is_zero() {
                return Err(deadline.busy());
            }
            busy = self
                .freed
                .wait_timeout(busy, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *busy = true;
        Ok(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.freed.notify_one();
    }
}

/// The longest pause between two attempts at another process's write lock.
///
/// The lock is not handed to waiters in turn: a process writing back to back takes it
/// again microseconds after each commit, and a waiter gets it only by trying in such a
/// gap. With pauses of up to 10 ms, three processes waiting beside one writing 90
/// transactions in a row often (8 runs in 20) got no turn at all until it was done; at
/// 1 ms one of them got a turn during its run in all 20. A waiter then makes about a
/// thousand non-blocking lock attempts a second (about 1% of a core).
const MAX_PAUSE: Duration = Duration::from_millis(1);

/// Begins a write transaction, polling while another process holds redb's write lock,
/// until the deadline.
pub(crate) fn begin_write(db: &Database, deadline: Deadline) -> Result<WriteTransaction, Error> {
    let mut pause = Duration::from_micros(200);
    loop {
        match db.try_begin_write() {
            Ok(txn) => return Ok(txn),
            Err(TransactionError::WouldBlock) => {
                let remaining = deadline.remaining();
                if remaining.is_zero() {
                    return Err(deadline.busy());
                }
                thread::sleep(pause.min(remaining));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_waits_for_the_previous_one_until_its_deadline() {
        let gate = Gate::default();
        let first = gate.enter(Deadline::after(Duration::ZERO)).unwrap();
        let start = Instant::now();
        let err = gate
            .enter(Deadline::after(Duration::from_millis(50)))
            .unwrap_err();
        assert!(matches!(err, Error::Busy { waited } if waited >= Duration::from_millis(50)));
        assert!(start.elapsed() >= Duration::from_millis(50));
        std::thread::scope(|scope| {
            let waiter =
                scope.spawn(|| gate.enter(Deadline::after(Duration::from_secs(10))).is_ok());
            std::thread::sleep(Duration::from_millis(20));
            drop(first);
            assert!(waiter.join().unwrap());
        });
        // Released by the waiter's dropped turn.
        assert!(gate.enter(Deadline::after(Duration::ZERO)).is_ok());
    }
}
