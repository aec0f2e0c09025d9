//! The one bounded wait of the store: try, pause, try again, until a deadline.
//!
//! Every wait for something another process or thread holds (redb's write lock, a file
//! another process has open exclusively, the database handle a check needs to itself)
//! is a [`Deadline`] and [`retry_until`]: the attempt is made at once, then after pauses
//! that grow from 200 µs to [`MAX_PAUSE`], and the wait gives up once the deadline has
//! passed, reporting how long it waited.

use std::thread;
use std::time::{Duration, Instant};

/// The longest pause between two attempts.
///
/// redb's write lock is not handed to waiters in turn: a process writing back to back
/// takes it again microseconds after each commit, and a waiter gets it only by trying in
/// such a gap, so pauses stay short: with longer ones a waiter beside a busy writer
/// often got no turn until the writer was done (`docs/store.md`, "Several processes").
/// A waiter then makes about a thousand non-blocking attempts a second.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(1);

/// The first pause after a failed attempt.
const FIRST_PAUSE: Duration = Duration::from_micros(200);

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
}

/// What one attempt of a [`retry_until`] found.
pub(crate) enum Tried<T, E> {
    /// Done: stop waiting with this.
    Done(Result<T, E>),
    /// Held by someone else: try again after a pause, if time is left.
    Held,
}

/// Runs `attempt` until it is [`Tried::Done`], pausing between attempts, or until
/// `deadline` passes: then `Err(gave_up(waited))`.
pub(crate) fn retry_until<T, E>(
    deadline: Deadline,
    mut attempt: impl FnMut() -> Tried<T, E>,
    gave_up: impl FnOnce(Duration) -> E,
) -> Result<T, E> {
    let mut pause = FIRST_PAUSE;
    loop {
        if let Tried::Done(done) = attempt() {
            return done;
        }
        let remaining = deadline.remaining();
        if remaining.is_zero() {
            return Err(gave_up(deadline.waited()));
        }
        thread::sleep(pause.min(remaining));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_that_succeeds_at_once_never_waits() {
        let done: Result<u8, Duration> = retry_until(
            Deadline::after(Duration::ZERO),
            || Tried::Done(Ok(7)),
            |waited| waited,
        );
        assert_eq!(done, Ok(7));
    }

    #[test]
    fn attempts_repeat_until_done() {
        let mut tries = 0;
        let done: Result<u8, Duration> = retry_until(
            Deadline::after(Duration::from_secs(60)),
            || {
                tries += 1;
                if tries < 5 {
                    Tried::Held
                } else {
                    Tried::Done(Ok(tries))
                }
            },
            |waited| waited,
        );
        assert_eq!(done, Ok(5));
    }

    #[test]
    fn a_held_thing_gives_up_at_the_deadline_and_says_how_long_it_waited() {
        let timeout = Duration::from_millis(20);
        let mut tries = 0u32;
        let gave_up: Result<(), Duration> = retry_until(
            Deadline::after(timeout),
            || {
                tries += 1;
                Tried::Held
            },
            |waited| waited,
        );
        let waited = gave_up.unwrap_err();
        assert!(waited >= timeout, "gave up after {waited:?}");
        // Pauses are at most MAX_PAUSE, so a 20 ms wait makes several attempts.
        assert!(tries >= 3, "only {tries} attempts");
    }
}
