//! What the world saw happen: the checks made while the run goes (replies, generations,
//! executions) and a log per intent that a failure report prints.

use std::collections::{HashMap, HashSet};
use std::fmt;

use idem_core::ledger::ReplyClass;
use idem_core::{Generation, Reply};

use super::faults::Fault;

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The oracle check that failed.
    pub check: &'static str,
    /// The intent concerned (`tenant/key`), if one.
    pub key: Option<String>,
    /// What was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "[{}] {key}: {}", self.check, self.detail),
            None => write!(f, "[{}] {}", self.check, self.detail),
        }
    }
}

/// One line of an intent's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Note {
    /// The sale and its intent were created.
    Created,
    /// The sender sent this attempt.
    Sent(u32),
    /// The attempt reached the receiver.
    Arrived(u32),
    /// The receiver claimed the key with this generation.
    Claimed(Generation),
    /// The effect ran (the run number).
    Ran(u32),
    /// The two-phase executor found itself fenced and did not run the effect.
    Fenced,
    /// The receiver answered this status.
    Answered(u16),
    /// A reply with this status reached the sender.
    Delivered(u16),
    /// The sender gave the attempt up (timeout).
    TimedOut(u32),
    /// A two-phase executor died with the receiver.
    ExecutorLost,
    /// The reconciler acted.
    Reconciled(&'static str),
}

/// The running record of a simulation.
#[derive(Debug, Default)]
pub(crate) struct History {
    first_reply: HashMap<String, (u16, Vec<u8>)>,
    last_generation: Generation,
    violations: Vec<Violation>,
    reported: HashSet<(&'static str, String)>,
    log: HashMap<String, Vec<(u64, Note)>>,
    faults: Vec<(u64, Fault)>,
}

/// Formats a true time as days and clock time since the start of the run.
#[must_use]
pub(crate) fn since_start(at: u64, start: u64) -> String {
    let ms = at.saturating_sub(start);
    let (s, ms) = (ms / 1000, ms % 1000);
    format!(
        "d{}+{:02}:{:02}:{:02}.{ms:03}",
        s / 86_400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

impl History {
    /// Adds a line to the log of `key`.
    pub(crate) fn note(&mut self, key: &str, at: u64, note: Note) {
        self.log.entry(key.to_owned()).or_default().push((at, note));
    }

    /// A fault struck.
    pub(crate) fn fault(&mut self, at: u64, fault: &Fault) {
        self.faults.push((at, fault.clone()));
    }

    /// The receiver answers `reply` for `key`: a definitive answer must equal the first.
    pub(crate) fn answered(&mut self, key: &str, at: u64, reply: &Reply) {
        self.note(key, at, Note::Answered(reply.status));
        // 410 Gone is no replay: the outcome is past retention, only its tombstone kept.
        let class = ReplyClass::of(reply.status);
        if class.settles_as().is_none() || class == ReplyClass::Gone {
            return;
        }
        match self.first_reply.get(key) {
            None => {
                self.first_reply
                    .insert(key.to_owned(), (reply.status, reply.body.clone()));
            }
            Some((status, body)) if (*status, body) != (reply.status, &reply.body) => {
                let detail = format!(
                    "answered {} {:?}, but the first answer was {status} {:?}",
                    reply.status,
                    String::from_utf8_lossy(&reply.body),
                    String::from_utf8_lossy(body)
                );
                self.violate("replay-equals-first", Some(key), detail);
            }
            Some(_) => {}
        }
    }

    /// The receiver claimed a key: generations strictly increase across restarts.
    pub(crate) fn claimed(&mut self, key: &str, at: u64, generation: Generation) {
        self.note(key, at, Note::Claimed(generation));
        if generation <= self.last_generation {
            let detail = format!(
                "claimed generation {generation} after {} was handed out",
                self.last_generation
            );
            self.violate("generation-increases", Some(key), detail);
        }
        self.last_generation = self.last_generation.max(generation);
    }

    /// Records a broken promise; a check broken again for the same key is not repeated.
    pub(crate) fn violate(&mut self, check: &'static str, key: Option<&str>, detail: String) {
        if let Some(key) = key {
            if !self.reported.insert((check, key.to_owned())) {
                return;
            }
        }
        self.violations.push(Violation {
            check,
            key: key.map(str::to_owned),
            detail,
        });
    }

    /// Every broken promise so far.
    #[must_use]
    pub(crate) fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The log of `key`, one line per note, times since `start`.
    #[must_use]
    pub(crate) fn log_of(&self, key: &str, start: u64) -> String {
        let mut out = String::new();
        for (at, note) in self.log.get(key).map_or(&[][..], Vec::as_slice) {
            out.push_str(&format!("    {} {note:?}\n", since_start(*at, start)));
        }
        out
    }

    /// Every fault, one line each, times since `start`.
    #[must_use]
    pub(crate) fn faults_log(&self, start: u64) -> String {
        let mut out = String::new();
        for (at, fault) in &self.faults {
            out.push_str(&format!("    {} {fault:?}\n", since_start(*at, start)));
        }
        out
    }
}
