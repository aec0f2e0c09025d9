//! The receiver's business effect: what running an intent does, counted per intent.
//!
//! Every execution adds one to the intent's count in a business table (the shop's own
//! table in the store file for the atomic path, an external provider for the two-phase
//! path). A count above one is a duplicate execution, the failure idem exists to prevent.
//! The outcome names the execution number, so a second run also answers different bytes.

use idem_core::{Outcome, Verdict};

/// Status of a succeeded execution.
pub(crate) const CREATED: i32 = 201;
/// Status of a declined one: a definitive failure, replayed like a success.
pub(crate) const DECLINED: i32 = 402;

/// The business table's row of one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Execution {
    /// How many times the effect ran. Exactly-once means never more than 1.
    pub count: u32,
    /// The verdict of the first run.
    pub verdict: Verdict,
    /// The outcome of the first run: what a reconciler settles an Unknown record with.
    pub outcome: Outcome,
}

/// Runs the effect of the intent `effect_key` with `payload` once more, after the runs
/// in `previous`. Returns the row to store and this run's verdict and outcome.
#[must_use]
pub(crate) fn perform(
    previous: Option<&Execution>,
    effect_key: &str,
    payload: &[u8],
) -> (Execution, Verdict, Outcome) {
    let count = previous.map_or(0, |p| p.count).saturating_add(1);
    // One payload in eight is declined: a definitive failure the sender must not retry.
    let declined = payload.first().is_some_and(|b| b % 8 == 0);
    let (verdict, code, word) = if declined {
        (Verdict::Failed, DECLINED, "declined")
    } else {
        (Verdict::Succeeded, CREATED, "receipt")
    };
    let outcome = Outcome::new(code, format!("{word} for {effect_key}, run {count}"));
    let row = match previous {
        Some(first) => Execution {
            count,
            ..first.clone()
        },
        None => Execution {
            count,
            verdict,
            outcome: outcome.clone(),
        },
    };
    (row, verdict, outcome)
}

impl Execution {
    /// Bytes for a business table: count (u32 big-endian), verdict byte, code (i32
    /// big-endian), body.
    #[must_use]
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.outcome.body.len());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.push(match self.verdict {
            Verdict::Succeeded => 0,
            Verdict::Failed => 1,
        });
        out.extend_from_slice(&self.outcome.code.to_be_bytes());
        out.extend_from_slice(&self.outcome.body);
        out
    }

    /// The row [`Execution::encode`] wrote.
    ///
    /// # Panics
    ///
    /// On bytes no encode made: the simulation wrote them itself, so that is a bug.
    #[must_use]
    pub(crate) fn decode(bytes: &[u8]) -> Execution {
        assert!(bytes.len() >= 9, "business row of {} bytes", bytes.len());
        let count = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let verdict = match bytes[4] {
            0 => Verdict::Succeeded,
            1 => Verdict::Failed,
            other => panic!("business row with verdict byte {other}"),
        };
        let code = i32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        Execution {
            count,
            verdict,
            outcome: Outcome::new(code, &bytes[9..]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_count_runs() {
        let (first, verdict, outcome) = perform(None, "t/k", &[3, 1]);
        assert_eq!((first.count, verdict), (1, Verdict::Succeeded));
        assert_eq!(outcome, first.outcome);
        assert_eq!(Execution::decode(&first.encode()), first);
        let (second, _, again) = perform(Some(&first), "t/k", &[3, 1]);
        assert_eq!(second.count, 2);
        assert_eq!(
            second.outcome, first.outcome,
            "the row keeps the first outcome"
        );
        assert_ne!(again, first.outcome, "a second run answers different bytes");
        let (declined, verdict, _) = perform(None, "t/d", &[8]);
        assert_eq!(
            (declined.verdict, verdict),
            (Verdict::Failed, Verdict::Failed)
        );
        assert_eq!(declined.outcome.code, DECLINED);
    }
}
