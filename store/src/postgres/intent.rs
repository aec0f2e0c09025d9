//! A sender's outbox intents, kept on PostgreSQL as export and import carry them: a box's
//! outbox moves into the shared database and back out, unchanged. The outbox itself runs
//! on a file (docs/postgres.md, "Intents"); nothing here sends or retries.

use idem_core::{Intent, IntentResolution, IntentState, Outcome, ResolvedAs, Timestamp};
use tokio_postgres::{GenericClient, Row};

use super::error::database;
use super::row::{fingerprint_of, signed};
use crate::error::Error;

/// The columns of `idem_intents` in the order [`intent_at`] reads them.
pub(super) const INTENT_COLUMNS: &str = "key, operation, state, attempts, created_at, \
     next_attempt_at, deadline, fingerprint, payload, last_status, outcome_code, outcome_body, \
     resolved_as, resolution_reason, resolved_at";

/// The intent in `row`, whose columns are [`INTENT_COLUMNS`].
pub(super) fn intent_at(row: &Row) -> Result<Intent, Error> {
    let key: String = row.try_get(0).map_err(|e| Error::Corrupt {
        detail: format!("idem_intents: column key: {e}"),
    })?;
    let corrupt = |detail: String| Error::Corrupt {
        detail: format!("idem_intents row {key}: {detail}"),
    };
    macro_rules! column {
        ($index:expr, $name:literal) => {
            row.try_get($index)
                .map_err(|e| corrupt(format!("column {}: {e}", $name)))?
        };
    }
    let unsigned = |name: &str, value: i64| {
        u64::try_from(value).map_err(|_| corrupt(format!("{name} {value} is negative")))
    };
    let state: String = column!(2, "state");
    let state = IntentState::from_name(&state)
        .ok_or_else(|| corrupt(format!("state {state:?} is not an intent's state")))?;
    let attempts: i64 = column!(3, "attempts");
    let fingerprint: Vec<u8> = column!(7, "fingerprint");
    let fingerprint = fingerprint_of(&fingerprint).map_err(corrupt)?;
    let last_status: Option<i32> = column!(9, "last_status");
    let outcome = match (column!(10, "outcome_code"), column!(11, "outcome_body")) {
        (Some(code), Some(body)) => Some(Outcome { code, body }),
        (None, None) => None,
        _ => return Err(corrupt("outcome_code and outcome_body go together".into())),
    };
    let resolution = match (
        column!(12, "resolved_as"),
        column!(13, "resolution_reason"),
        column!(14, "resolved_at"),
    ) {
        (Some(name), Some(reason), Some(at)) => {
            let name: String = name;
            Some(IntentResolution {
                resolved_as: ResolvedAs::from_name(&name)
                    .ok_or_else(|| corrupt(format!("resolved_as {name:?} is not a resolution")))?,
                reason,
                resolved_at: Timestamp(unsigned("resolved_at", at)?),
            })
        }
        (None, None, None) => None,
        _ => {
            return Err(corrupt(
                "resolved_as, resolution_reason and resolved_at go together".into(),
            ));
        }
    };
    Ok(Intent {
        operation: column!(1, "operation"),
        state,
        attempts: u32::try_from(attempts)
            .map_err(|_| corrupt(format!("attempts {attempts} is out of range")))?,
        created_at: Timestamp(unsigned("created_at", column!(4, "created_at"))?),
        next_attempt_at: Timestamp(unsigned("next_attempt_at", column!(5, "next_attempt_at"))?),
        deadline: Timestamp(unsigned("deadline", column!(6, "deadline"))?),
        fingerprint,
        payload: column!(8, "payload"),
        last_status: last_status
            .map(|s| u16::try_from(s).map_err(|_| corrupt(format!("last_status {s}"))))
            .transpose()?,
        outcome,
        resolution,
        key,
    })
}

/// Writes an imported intent: true when written, false when the same intent is there
/// already; `Ok(Err(message))` when a different intent holds its key.
pub(super) async fn import_intent(
    client: &impl GenericClient,
    intent: &Intent,
) -> Result<Result<bool, String>, Error> {
    let resolution = intent.resolution.as_ref();
    let inserted = client
        .execute(
            &format!(
                "INSERT INTO idem_intents ({INTENT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT DO NOTHING"
            ),
            &[
                &intent.key,
                &intent.operation,
                &intent.state.name(),
                &i64::from(intent.attempts),
                &signed("created_at", intent.created_at.0)?,
                &signed("next_attempt_at", intent.next_attempt_at.0)?,
                &signed("deadline", intent.deadline.0)?,
                &intent.fingerprint.0.as_slice(),
                &intent.payload,
                &intent.last_status.map(i32::from),
                &intent.outcome.as_ref().map(|o| o.code),
                &intent.outcome.as_ref().map(|o| o.body.as_slice()),
                &resolution.map(|r| r.resolved_as.name()),
                &resolution.map(|r| r.reason.as_str()),
                &resolution
                    .map(|r| signed("resolved_at", r.resolved_at.0))
                    .transpose()?,
            ],
        )
        .await
        .map_err(database("import"))?;
    if inserted == 1 {
        return Ok(Ok(true));
    }
    let row = client
        .query_one(
            &format!("SELECT {INTENT_COLUMNS} FROM idem_intents WHERE key = $1"),
            &[&intent.key],
        )
        .await
        .map_err(database("import"))?;
    Ok(if intent_at(&row)? == *intent {
        Ok(false)
    } else {
        Err(format!(
            "intent {}: the database already holds a different intent under this key",
            intent.key
        ))
    })
}
