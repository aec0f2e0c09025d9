//! A sender's outbox intents, kept on MariaDB as export and import carry them: a box's
//! outbox moves into the shared database and back out, unchanged. The outbox itself runs
//! on a file; nothing here sends or retries.

use idem_core::{Intent, IntentResolution, IntentState, Outcome, ResolvedAs, Timestamp};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};

use super::error::{DUPLICATE_KEY, code, database};
use super::row::{fingerprint_of, get, signed};
use super::statements::exec_count;
use crate::error::Error;

/// The columns of `idem_intents` in the order [`intent_at`] reads them.
pub(super) const INTENT_COLUMNS: &str = "idem_key, operation, state, attempts, created_at, \
     next_attempt_at, deadline, fingerprint, payload, last_status, outcome_code, outcome_body, \
     resolved_as, resolution_reason, resolved_at";

/// The intent in `row`, whose columns are [`INTENT_COLUMNS`].
pub(super) fn intent_at(row: &Row) -> Result<Intent, Error> {
    let key: String = get(row, 0, "idem_intents")?;
    let table = format!("idem_intents row {key}");
    let corrupt = |detail: String| Error::Corrupt {
        detail: format!("{table}: {detail}"),
    };
    let unsigned = |name: &str, value: i64| {
        u64::try_from(value).map_err(|_| corrupt(format!("{name} {value} is negative")))
    };
    let state: String = get(row, 2, &table)?;
    let state = IntentState::from_name(&state)
        .ok_or_else(|| corrupt(format!("state {state:?} is not an intent's state")))?;
    let attempts: i64 = get(row, 3, &table)?;
    let fingerprint: Vec<u8> = get(row, 7, &table)?;
    let fingerprint = fingerprint_of(&fingerprint).map_err(corrupt)?;
    let last_status: Option<i32> = get(row, 9, &table)?;
    let outcome = match (get(row, 10, &table)?, get(row, 11, &table)?) {
        (Some(code), Some(body)) => Some(Outcome { code, body }),
        (None, None) => None,
        _ => return Err(corrupt("outcome_code and outcome_body go together".into())),
    };
    let resolution = match (
        get::<Option<String>>(row, 12, &table)?,
        get::<Option<String>>(row, 13, &table)?,
        get::<Option<i64>>(row, 14, &table)?,
    ) {
        (Some(name), Some(reason), Some(at)) => Some(IntentResolution {
            resolved_as: ResolvedAs::from_name(&name)
                .ok_or_else(|| corrupt(format!("resolved_as {name:?} is not a resolution")))?,
            reason,
            resolved_at: Timestamp(unsigned("resolved_at", at)?),
        }),
        (None, None, None) => None,
        _ => {
            return Err(corrupt(
                "resolved_as, resolution_reason and resolved_at go together".into(),
            ));
        }
    };
    Ok(Intent {
        operation: get(row, 1, &table)?,
        state,
        attempts: u32::try_from(attempts)
            .map_err(|_| corrupt(format!("attempts {attempts} is out of range")))?,
        created_at: Timestamp(unsigned("created_at", get(row, 4, &table)?)?),
        next_attempt_at: Timestamp(unsigned("next_attempt_at", get(row, 5, &table)?)?),
        deadline: Timestamp(unsigned("deadline", get(row, 6, &table)?)?),
        fingerprint,
        payload: get(row, 8, &table)?,
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
pub(super) async fn import_intent<Q: Queryable>(
    q: &mut Q,
    intent: &Intent,
) -> Result<Result<bool, String>, Error> {
    let resolution = intent.resolution.as_ref();
    let inserted = exec_count(
        q,
        &format!(
            "INSERT INTO idem_intents ({INTENT_COLUMNS}) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            Value::from(intent.key.as_str()),
            Value::from(intent.operation.as_str()),
            Value::from(intent.state.name()),
            Value::from(i64::from(intent.attempts)),
            Value::from(signed("created_at", intent.created_at.0)?),
            Value::from(signed("next_attempt_at", intent.next_attempt_at.0)?),
            Value::from(signed("deadline", intent.deadline.0)?),
            Value::from(intent.fingerprint.0.to_vec()),
            Value::from(intent.payload.clone()),
            Value::from(intent.last_status.map(i32::from)),
            Value::from(intent.outcome.as_ref().map(|o| o.code)),
            Value::from(intent.outcome.as_ref().map(|o| o.body.clone())),
            Value::from(resolution.map(|r| r.resolved_as.name())),
            Value::from(resolution.map(|r| r.reason.as_str())),
            Value::from(
                resolution
                    .map(|r| signed("resolved_at", r.resolved_at.0))
                    .transpose()?,
            ),
        ],
    )
    .await;
    match inserted {
        Ok(_) => return Ok(Ok(true)),
        Err(e) if code(&e) == Some(DUPLICATE_KEY) => {}
        Err(e) => return Err(database("import")(e)),
    }
    let row: Option<Row> = q
        .exec_first(
            format!("SELECT {INTENT_COLUMNS} FROM idem_intents WHERE idem_key = ?"),
            vec![Value::from(intent.key.as_str())],
        )
        .await
        .map_err(database("import"))?;
    let same = match row {
        Some(row) => intent_at(&row)? == *intent,
        None => false,
    };
    Ok(if same {
        Ok(false)
    } else {
        Err(format!(
            "intent {}: the database already holds a different intent under this key",
            intent.key
        ))
    })
}
