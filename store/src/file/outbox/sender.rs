//! The outbox's sender: drains due intents through a [`Transport`] the application
//! gives, records each reply, and forgets completed intents after a retention. The Rust
//! counterpart of the browser package's `IdemSender`.
//!
//! What the loop an application would write gets wrong, the sender does once:
//!
//! - **Nothing taken is stranded.** [`Outbox::due`] puts the intents it returns in
//!   flight before they are sent. The sender sends and records every one it took; one
//!   whose record fails (the store failed) is left in flight, and the sender's next
//!   drain first queues every in-flight intent again ([`Outbox::restart`]), as its first
//!   drain does after a crash.
//! - **The receiver's pace.** A `Retry-After` (seconds or an HTTP date, [`retry_after`])
//!   sets the next attempt, within the intent's deadline; without one, the ledger's
//!   backoff does.
//! - **One header form.** `Idempotency-Key` is written as an RFC 8941 String, the
//!   IETF draft's form, by [`key_header`], for every transport.
//! - **Completed intents go.** With [`Sender::forget_completed_after`], an intent
//!   completed (2xx) and created at least that long ago is forgotten, oldest first;
//!   failed, conflicting, expired and unknown ones stay for a person to look at.
//!
//! One sender per store file: its first drain requeues every intent in flight, which is
//! right only when no other sender has one out.

use std::time::Duration;

use idem_core::{Attempt, Effect, IntentState, Reply, Timestamp};

use super::{IntentFilter, Outbox, OutboxError};

/// The most intents forgotten in one drain: forgetting is one transaction each.
const FORGET_AT_ONCE: usize = 256;

/// Sends one attempt and brings back the receiver's reply.
pub trait Transport {
    /// Sends `attempt`: its payload, with [`key_header`] of its key as the
    /// `Idempotency-Key` header, to where its operation goes. `Ok` with the reply the
    /// receiver gave, whatever its status (the ledger decides what it means), and
    /// `retry_at` from its `Retry-After` ([`retry_after`]); `Err` when no reply came (no
    /// connection, a reset, a timeout): the attempt is tried again after a backoff.
    ///
    /// # Errors
    ///
    /// [`NoReply`], saying why.
    fn send(&mut self, attempt: &Attempt, now: Timestamp) -> Result<Reply, NoReply>;
}

/// No reply came to an attempt: why, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no reply: {0}")]
pub struct NoReply(pub String);

/// What one [`Sender::drain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Drained {
    /// Intents queued again first, left in flight by a crash or a failed drain.
    pub requeued: usize,
    /// Attempts sent.
    pub sent: usize,
    /// Attempts that got no reply.
    pub no_reply: usize,
    /// Intents a reply (or a missing one past the deadline) made terminal: completed,
    /// failed, conflict, unknown, expired. Those that expire while queued, found by
    /// [`Outbox::due`], are not counted.
    pub finished: usize,
    /// Completed intents forgotten after their retention.
    pub forgotten: usize,
}

/// Drains an [`Outbox`] through a [`Transport`]. Make one with [`Sender::new`].
///
/// ```
/// use std::time::Duration;
///
/// use idem_store::outbox::{Attempt, LedgerConfig, NoReply, Reply, Sender, Transport};
/// use idem_store::{Fingerprint, Store, Timestamp, now};
///
/// /// The receiver, as a test sees it: every attempt answered 201.
/// struct Accepting;
///
/// impl Transport for Accepting {
///     fn send(&mut self, _: &Attempt, _: Timestamp) -> Result<Reply, NoReply> {
///         Ok(Reply { status: 201, body: b"ok".to_vec(), retry_at: None })
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("terminal.redb"))?;
/// let outbox = store.outbox(LedgerConfig::with_seed(7))?;
/// let payload = br#"{"sale":42}"#.to_vec();
/// let fingerprint = Fingerprint::of_bytes(&payload);
/// outbox.enqueue("forward-sale", payload, fingerprint, now(), [7; 16])?;
///
/// let mut sender = Sender::new(Accepting).forget_completed_after(Duration::from_secs(86_400));
/// let drained = sender.drain(&outbox, now)?;
/// assert_eq!((drained.sent, drained.finished), (1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Sender<T> {
    transport: T,
    batch: usize,
    forget_after: Option<Duration>,
    /// The next drain queues the in-flight intents again first: at the start, and after
    /// a drain that failed with attempts in hand.
    requeue: bool,
}

impl<T: Transport> Sender<T> {
    /// A sender on `transport`: 16 attempts taken at a time, completed intents kept
    /// until forgotten by the application.
    #[must_use]
    pub fn new(transport: T) -> Sender<T> {
        Sender {
            transport,
            batch: 16,
            forget_after: None,
            requeue: true,
        }
    }

    /// How many due intents are taken (put in flight) at a time, at least 1.
    #[must_use]
    pub fn batch(mut self, batch: usize) -> Sender<T> {
        self.batch = batch.max(1);
        self
    }

    /// Forgets a completed intent once `retention` has passed since it was created:
    /// the application has read its outcome by then (a receipt shown, a number stored).
    #[must_use]
    pub fn forget_completed_after(mut self, retention: Duration) -> Sender<T> {
        self.forget_after = Some(retention);
        self
    }

    /// The transport.
    pub fn transport(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Sends every intent that is due when it starts, batch after batch (an intent
    /// queued again meanwhile waits for the next drain); records each reply or missing
    /// reply; then forgets the
    /// completed intents past their retention. Call it when the network comes back, on
    /// a timer, and at [`Outbox::next_wakeup`] ([`Sender::run`] does all three).
    ///
    /// # Errors
    ///
    /// The store's: the drain stops there, and the intents it had taken and not
    /// recorded are queued again by the next drain.
    pub fn drain(
        &mut self,
        outbox: &Outbox,
        now: impl Fn() -> Timestamp,
    ) -> Result<Drained, OutboxError> {
        let mut drained = Drained::default();
        if self.requeue {
            drained.requeued = outbox.restart()?;
            self.requeue = false;
        }
        // What is due when the drain starts: an intent queued again during it waits for
        // the next drain, so a receiver that keeps failing does not hold the drain.
        let started = now();
        loop {
            // A failure of the store from here on (even one whose commit landed) leaves
            // what was taken to the next drain's requeue.
            self.requeue = true;
            let attempts = outbox.due(started, self.batch)?;
            if attempts.is_empty() {
                self.requeue = false;
                // A batch of intents that expired instead of being sent is empty too:
                // go on while something is still due.
                match outbox.next_wakeup()? {
                    Some(at) if at <= started => continue,
                    _ => break,
                }
            }
            for attempt in &attempts {
                drained.sent += 1;
                let effect = match self.transport.send(attempt, now()) {
                    Ok(reply) => outbox.record_reply(&attempt.key, reply, now())?,
                    Err(_) => {
                        drained.no_reply += 1;
                        outbox.record_transport_error(&attempt.key, now())?
                    }
                };
                if matches!(effect, Effect::Finished(_)) {
                    drained.finished += 1;
                }
            }
            self.requeue = false;
        }
        if let Some(retention) = self.forget_after {
            drained.forgotten = forget_completed(outbox, now(), retention)?;
        }
        Ok(drained)
    }

    /// Drains, then sleeps until the next intent is due (at most `idle` at a time, so
    /// that intents another handle of the store enqueued are seen), again and again
    /// until `stop` says so (checked before each drain).
    ///
    /// # Errors
    ///
    /// The store's, from a drain.
    pub fn run(
        &mut self,
        outbox: &Outbox,
        idle: Duration,
        mut stop: impl FnMut(&Drained) -> bool,
    ) -> Result<(), OutboxError> {
        let mut last = Drained::default();
        while !stop(&last) {
            last = self.drain(outbox, crate::now)?;
            let now = crate::now();
            let wait = match outbox.next_wakeup()? {
                Some(at) if at > now => Duration::from_millis(at.0 - now.0).min(idle),
                Some(_) => Duration::ZERO,
                None => idle,
            };
            std::thread::sleep(wait);
        }
        Ok(())
    }
}

/// Forgets up to [`FORGET_AT_ONCE`] completed intents created at least `retention`
/// before `now`, oldest first; how many.
fn forget_completed(
    outbox: &Outbox,
    now: Timestamp,
    retention: Duration,
) -> Result<usize, OutboxError> {
    let retention = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    let completed = outbox.intents(&IntentFilter {
        state: Some(IntentState::Completed),
        limit: Some(FORGET_AT_ONCE),
    })?;
    let mut forgotten = 0;
    for intent in completed {
        if intent.created_at.plus_millis(retention) > now {
            // Oldest first: the rest are younger.
            break;
        }
        outbox.forget(&intent.key)?;
        forgotten += 1;
    }
    Ok(forgotten)
}

/// The `Idempotency-Key` header value for `key`: an RFC 8941 String (in double quotes,
/// `\` before `"` and `\`), as draft-ietf-httpapi-idempotency-key-header asks; every
/// intent key (a UUIDv7) is one.
#[must_use]
pub fn key_header(key: &str) -> String {
    idem_core::http::key_field_value(key).unwrap_or_else(|_| format!("\"{key}\""))
}

/// When a `Retry-After` value asks for the next attempt: `now` plus its seconds, or its
/// HTTP date (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`) when later than `now`;
/// `None` when it is neither.
#[must_use]
pub fn retry_after(value: &str, now: Timestamp) -> Option<Timestamp> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = value.parse().ok()?;
        return Some(now.plus_millis(seconds.saturating_mul(1_000)));
    }
    let at = http_date(value)?;
    Some(if at > now { at } else { now })
}

/// An IMF-fixdate (RFC 9110 §5.6.7) in ms since the epoch.
fn http_date(value: &str) -> Option<Timestamp> {
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let rest = value.get(5..)?;
    let mut parts = rest.split(' ');
    let (day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() || value.get(3..5)? != ", " {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let day: u32 = day.parse().ok()?;
    let year: i64 = year.parse().ok().filter(|y| (1970..=9999).contains(y))?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut hms = time.split(':').map(|p| p.parse::<u32>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if day == 0 || day > month_days[month - 1] || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, u32::try_from(month).ok()?, day);
    let seconds = days * 86_400 + i64::from(h * 3_600 + m * 60 + s);
    u64::try_from(seconds)
        .ok()
        .map(|s| Timestamp(s.saturating_mul(1_000)))
}

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = Timestamp(784_111_777_000);
        assert_eq!(retry_after("120", now), Some(Timestamp(784_111_897_000)));
        assert_eq!(retry_after(" 0 ", now), Some(now));
        // RFC 9110's example date is `now` here; a date before it means now.
        assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(now));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:50:37 GMT", now),
            Some(Timestamp(784_111_837_000))
        );
        assert_eq!(
            retry_after("Sat, 05 Dec 2026 12:00:00 GMT", now),
            Some(Timestamp(1_796_472_000_000))
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun 06 Nov 1994",
            "Sat, 31 Feb 2026 00:00:00 GMT",
            "Sat, 01 Jan 99999999999999 00:00:00 GMT",
        ] {
            assert_eq!(retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn the_key_header_is_a_structured_field_string() {
        assert_eq!(
            key_header("01890a5d-ac96-774b-bcce-b302099a8057"),
            "\"01890a5d-ac96-774b-bcce-b302099a8057\""
        );
        assert_eq!(key_header("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
