//! The two waits for the write lock: this process's threads queue on a [`Gate`], then
//! the one at the front waits for other processes in [`begin_write`]. Both give up with
//! [`Error::Busy`] once the call's [`Deadline`] has passed, counted from when it started.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use redb::{Database, TransactionError, WriteTransaction};

use crate::error::Error;
use crate::file::wait::{Deadline, Tried, retry_until};

/// Lets one thread of this process at a time into a write transaction; the others wait,
/// each until its own deadline. The thread inside is known, so that it asking again
/// (a write from inside the work of an execute) is refused at once with
/// [`Error::Reentrant`] rather than waiting for itself.
///
/// A turn that ends wakes a waiter only when one is waiting: waking costs a system call
/// even when nobody sleeps, and most turns have no one behind them.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    freed: Condvar,
}

/// Who has the turn, and how many threads wait on [`Gate::freed`] for it.
#[derive(Debug, Default)]
struct GateState {
    holder: Option<ThreadId>,
    waiting: usize,
}

/// A thread's turn at the [`Gate`]; dropping it (also while a panic unwinds) lets the
/// next thread in.
#[derive(Debug)]
pub(crate) struct Turn<'g>(&'g Gate);

impl Gate {
    /// Waits for this thread's turn, or returns [`Error::Busy`] at the deadline, or
    /// [`Error::Reentrant`] at once when this thread already has the turn.
    pub(crate) fn enter(&self, deadline: Deadline) -> Result<Turn<'_>, Error> {
        let me = thread::current().id();
        let mut state = self.state();
        while let Some(holder) = state.holder {
            if holder == me {
                return Err(Error::Reentrant);
            }
            let remaining = deadline.remaining();
            if remaining.is_zero() {
                return Err(busy_error(deadline.waited()));
            }
            state.waiting += 1;
            state = self
                .freed
                .wait_timeout(state, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting -= 1;
        }
        state.holder = Some(me);
        Ok(Turn(self))
    }

    /// Whether the calling thread has the turn (it is inside a write transaction).
    pub(crate) fn held_here(&self) -> bool {
        self.state().holder == Some(thread::current().id())
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.holder = None;
        let waiting = state.waiting > 0;
        drop(state);
        if waiting {
            self.0.freed.notify_one();
        }
    }
}

/// Begins a write transaction, trying again while another process holds redb's write
/// lock, until the deadline.
pub(crate) fn begin_write(db: &Database, deadline: Deadline) -> Result<WriteTransaction, Error> {
    retry_until(
        deadline,
        || match db.try_begin_write() {
            Ok(txn) => Tried::Done(Ok(txn)),
            Err(TransactionError::WouldBlock) => Tried::Held,
            Err(e) => Tried::Done(Err(e.into())),
        },
        busy_error,
    )
}

/// The error of a write that waited `waited` for the lock and gave up.
pub(crate) fn busy_error(waited: std::time::Duration) -> Error {
    Error::Busy { waited }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_turn_waits_for_the_previous_one_until_its_deadline() {
        let gate = Gate::default();
        let first = gate.enter(Deadline::after(Duration::ZERO)).unwrap();
        // The thread with the turn asking again is refused at once, whatever its deadline.
        let again = gate.enter(Deadline::after(Duration::from_secs(600)));
        assert!(matches!(again, Err(Error::Reentrant)), "{again:?}");
        assert!(gate.held_here());
        std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                assert!(!gate.held_here());
                gate.enter(Deadline::after(Duration::from_millis(50)))
                    .map(drop)
                    .unwrap_err()
            });
            let err = other.join().unwrap();
            assert!(matches!(err, Error::Busy { waited } if waited >= Duration::from_millis(50)));
        });
        std::thread::scope(|scope| {
            let (started, waiting) = mpsc::channel();
            let gate = &gate;
            let waiter = scope.spawn(move || {
                started.send(()).unwrap();
                let deadline = Deadline::after(Duration::from_secs(10));
                let entered = gate.enter(deadline).is_ok();
                // Before its deadline: woken, not let in when its wait timed out.
                entered && !deadline.remaining().is_zero()
            });
            // The waiter is asleep on the condvar (it counted itself there under the
            // lock): dropping the first turn must wake it.
            waiting.recv().unwrap();
            while gate.state().waiting == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(first);
            assert!(waiter.join().unwrap());
        });
        // Released by the waiter's dropped turn.
        assert!(gate.enter(Deadline::after(Duration::ZERO)).is_ok());
    }
}
