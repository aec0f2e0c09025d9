//! What `idem` prints: human text, or with `--json` one JSON object per line.
//!
//! In JSON, times are integer ms and bytes are base64 in `*_b64` fields.

use std::io::{self, Write};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use idem_core::protocol::Decision;
use idem_core::{Record, RecordId, Status, Timestamp};
use idem_store::maintain::RecordView;
use serde::Serialize;

use crate::exit::Failure;
use crate::time::{format_instant, format_span};

/// Writes results to stdout in the chosen form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Printer {
    /// `--json` was given.
    pub(crate) json: bool,
    /// The time ages and countdowns are measured from.
    pub(crate) now: Timestamp,
}

impl Printer {
    /// Prints `text` and a newline.
    pub(crate) fn line(&self, text: &str) -> Result<(), Failure> {
        let mut out = io::stdout().lock();
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(|e| Failure::stdout(&e))
    }

    /// Prints `value` as one compact JSON line.
    pub(crate) fn json_line(&self, value: &impl Serialize) -> Result<(), Failure> {
        let text = serde_json::to_string(value)
            .map_err(|e| Failure::runtime(format!("json output: {e}")))?;
        self.line(&text)
    }

    /// Prints the JSON form when `--json` is set, else the text form.
    pub(crate) fn either(
        &self,
        value: &impl Serialize,
        text: impl FnOnce() -> String,
    ) -> Result<(), Failure> {
        if self.json {
            self.json_line(value)
        } else {
            self.line(&text())
        }
    }

    /// Prints `begin`'s decision.
    pub(crate) fn decision(&self, decision: &Decision) -> Result<(), Failure> {
        self.either(&DecisionView::of(decision), || self.decision_text(decision))
    }

    fn decision_text(&self, decision: &Decision) -> String {
        match decision {
            Decision::Claimed {
                generation,
                lease_until,
            } => format!(
                "claimed: generation {generation}, lease until {}",
                self.instant_from_now(*lease_until)
            ),
            Decision::InProgress {
                generation,
                lease_until,
            } => format!(
                "in progress: generation {generation} holds the key, lease until {}",
                self.instant_from_now(*lease_until)
            ),
            Decision::Replay {
                verdict,
                outcome,
                completed_at,
            } => {
                format!(
                    "replay: {verdict} with code {} at {}\n{}",
                    outcome.code,
                    self.instant_from_now(*completed_at),
                    body_text(&outcome.body)
                )
            }
            Decision::Conflict {
                state,
                stored_fingerprint,
            } => format!(
                "conflict: the key is live ({state}) with another request's fingerprint {stored_fingerprint}; a new request needs a new key"
            ),
            Decision::NeedsReconciliation { generation } => format!(
                "unknown: nobody knows whether generation {generation} took effect; reconcile it with `idem resolve`"
            ),
            Decision::Forgotten {
                generation,
                verdict,
                completed_at,
            } => format!(
                "forgotten: generation {generation} ran and {verdict} at {}; its outcome is past retention and no longer kept; do not run it again",
                self.instant_from_now(*completed_at)
            ),
        }
    }

    /// Prints one record (`get`, and the results of `complete`, `resolve` and the like).
    pub(crate) fn record(&self, id: &RecordId, record: &Record) -> Result<(), Failure> {
        self.either(&RecordView::new(id, record), || {
            self.record_text(id, record)
        })
    }

    fn record_text(&self, id: &RecordId, record: &Record) -> String {
        let mut rows = vec![
            ("tenant", id.tenant().to_string()),
            ("operation", id.operation().to_string()),
            ("key", id.key().to_string()),
            ("state", self.state_detail(record)),
            ("generation", record.generation.to_string()),
            ("fingerprint", record.fingerprint.to_hex()),
            ("created", self.instant_from_now(record.created_at)),
            ("updated", self.instant_from_now(record.updated_at)),
        ];
        match &record.status {
            Status::Pending { lease_until } => {
                rows.push(("lease until", self.instant_from_now(*lease_until)))
            }
            Status::Settled {
                outcome,
                completed_at,
                expires_at,
                ..
            } => {
                rows.push(("completed", self.instant_from_now(*completed_at)));
                rows.push(("expires", self.instant_from_now(*expires_at)));
                rows.push(("code", outcome.code.to_string()));
                rows.push(("outcome", body_text(&outcome.body)));
            }
            Status::Unknown => {}
            Status::Tombstone {
                completed_at,
                expires_at,
                ..
            } => {
                rows.push(("completed", self.instant_from_now(*completed_at)));
                rows.push(("forgotten", self.instant_from_now(record.updated_at)));
                rows.push(("tombstone until", self.instant_from_now(*expires_at)));
            }
        }
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|(k, v)| vec![k.to_string(), v])
            .collect();
        table(&rows)
    }

    /// Prints records as an aligned table, or one JSON line each.
    pub(crate) fn records(&self, rows: &[(RecordId, Record)]) -> Result<(), Failure> {
        if self.json {
            return rows
                .iter()
                .try_for_each(|(id, r)| self.json_line(&RecordView::new(id, r)));
        }
        if rows.is_empty() {
            return self.line("no records");
        }
        let mut cells = vec![
            ["TENANT", "OPERATION", "KEY", "GEN", "STATE"]
                .map(String::from)
                .to_vec(),
        ];
        cells.extend(rows.iter().map(|(id, r)| {
            vec![
                id.tenant().to_string(),
                id.operation().to_string(),
                id.key().to_string(),
                r.generation.to_string(),
                self.state_detail(r),
            ]
        }));
        self.line(&table(&cells))
    }

    /// A record's state with its ages: `pending 3m, lease expired`,
    /// `succeeded 2h ago, code 0, expires in 22h`, `unknown 5m`.
    pub(crate) fn state_detail(&self, record: &Record) -> String {
        let now = self.now;
        match &record.status {
            Status::Pending { lease_until } => {
                let age = format_span(now.millis_since(record.created_at));
                if now >= *lease_until {
                    format!("pending {age}, lease expired")
                } else {
                    format!(
                        "pending {age}, lease {} left",
                        format_span(lease_until.millis_since(now))
                    )
                }
            }
            Status::Settled {
                verdict,
                outcome,
                completed_at,
                expires_at,
            } => {
                let ago = format_span(now.millis_since(*completed_at));
                let expiry = if now >= *expires_at {
                    "retention ended".to_string()
                } else {
                    format!("expires in {}", format_span(expires_at.millis_since(now)))
                };
                format!("{verdict} {ago} ago, code {}, {expiry}", outcome.code)
            }
            Status::Unknown => format!(
                "unknown {}",
                format_span(now.millis_since(record.updated_at))
            ),
            Status::Tombstone {
                verdict,
                completed_at,
                ..
            } => format!(
                "forgotten: {verdict} {} ago, outcome past retention, only a tombstone kept",
                format_span(now.millis_since(*completed_at))
            ),
        }
    }

    /// `2025-03-01T12:00:30Z (in 30s)` or `… (3m ago)`.
    pub(crate) fn instant_from_now(&self, at: Timestamp) -> String {
        let when = format_instant(at);
        if at > self.now {
            format!("{when} (in {})", format_span(at.millis_since(self.now)))
        } else if at < self.now {
            format!("{when} ({} ago)", format_span(self.now.millis_since(at)))
        } else {
            format!("{when} (now)")
        }
    }
}

/// An outcome body for people: the text itself when it is short printable UTF-8, else
/// its size.
fn body_text(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok("") => "(empty)".into(),
        Ok(text)
            if text.len() <= 200
                && !text
                    .trim_end()
                    .contains(|c: char| c.is_control() && c != '\t') =>
        {
            text.trim_end().to_string()
        }
        _ => format!("({} bytes; --json shows them as base64)", body.len()),
    }
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let lines: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            line
        })
        .collect();
    lines.join("\n")
}

/// `begin`'s JSON shapes, exactly as docs/design.md §5 gives them.
#[derive(Debug, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub(crate) enum DecisionView {
    /// `{"decision":"claimed","generation":N,"lease_until":MS}`
    Claimed { generation: u64, lease_until: u64 },
    /// `{"decision":"in_progress","generation":N,"lease_until":MS}`
    InProgress { generation: u64, lease_until: u64 },
    /// `{"decision":"replay","state":…,"code":INT,"outcome_b64":…,"completed_at":MS}`
    Replay {
        state: &'static str,
        code: i32,
        outcome_b64: String,
        completed_at: u64,
    },
    /// `{"decision":"conflict","state":…,"stored_fingerprint":HEX}`
    Conflict {
        state: &'static str,
        stored_fingerprint: String,
    },
    /// `{"decision":"unknown","generation":N}`
    Unknown { generation: u64 },
    /// `{"decision":"forgotten","generation":N,"state":…,"completed_at":MS}`
    Forgotten {
        generation: u64,
        state: &'static str,
        completed_at: u64,
    },
}

impl DecisionView {
    /// The view of `decision`.
    pub(crate) fn of(decision: &Decision) -> DecisionView {
        match decision {
            Decision::Claimed {
                generation,
                lease_until,
            } => DecisionView::Claimed {
                generation: generation.0,
                lease_until: lease_until.0,
            },
            Decision::InProgress {
                generation,
                lease_until,
            } => DecisionView::InProgress {
                generation: generation.0,
                lease_until: lease_until.0,
            },
            Decision::Replay {
                verdict,
                outcome,
                completed_at,
            } => DecisionView::Replay {
                state: verdict.name(),
                code: outcome.code,
                outcome_b64: BASE64.encode(&outcome.body),
                completed_at: completed_at.0,
            },
            Decision::Conflict {
                state,
                stored_fingerprint,
            } => DecisionView::Conflict {
                state: state.name(),
                stored_fingerprint: stored_fingerprint.to_hex(),
            },
            Decision::NeedsReconciliation { generation } => DecisionView::Unknown {
                generation: generation.0,
            },
            Decision::Forgotten {
                generation,
                verdict,
                completed_at,
            } => DecisionView::Forgotten {
                generation: generation.0,
                state: verdict.name(),
                completed_at: completed_at.0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::{Fingerprint, Generation, Outcome, Verdict};

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["A".to_string(), "BB".to_string(), "C".to_string()],
            vec!["long".to_string(), "x".to_string(), "y".to_string()],
        ];
        assert_eq!(table(&rows), "A     BB  C\nlong  x   y");
    }

    #[test]
    fn state_details_show_ages() {
        let printer = Printer {
            json: false,
            now: Timestamp(200_000),
        };
        let mut record = Record {
            fingerprint: Fingerprint::of_bytes(b""),
            generation: Generation(3),
            created_at: Timestamp(20_000),
            updated_at: Timestamp(20_000),
            status: Status::Pending {
                lease_until: Timestamp(50_000),
            },
        };
        assert_eq!(printer.state_detail(&record), "pending 3m, lease expired");
        record.status = Status::Pending {
            lease_until: Timestamp(230_000),
        };
        assert_eq!(printer.state_detail(&record), "pending 3m, lease 30s left");
        record.status = Status::Settled {
            verdict: Verdict::Failed,
            outcome: Outcome::new(2, *b"x"),
            completed_at: Timestamp(80_000),
            expires_at: Timestamp(3_800_000),
        };
        assert_eq!(
            printer.state_detail(&record),
            "failed 2m ago, code 2, expires in 1h"
        );
    }

    #[test]
    fn decisions_serialize_in_the_contract_shape() {
        let view = DecisionView::of(&Decision::Claimed {
            generation: Generation(4),
            lease_until: Timestamp(30_000),
        });
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"decision":"claimed","generation":4,"lease_until":30000}"#
        );
        let view = DecisionView::of(&Decision::NeedsReconciliation {
            generation: Generation(9),
        });
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"decision":"unknown","generation":9}"#
        );
    }
}
