//! A record as a row of `idem_records`, and back: the columns, their order in every
//! statement, and the checks that what the database holds is a record.

use idem_core::{Fingerprint, Generation, Outcome, Record, RecordId, Status, Timestamp, Verdict};
use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};

use crate::error::Error;

/// The record's columns, in the order [`record_at`] reads them.
pub(super) const COLUMNS: &str = "fingerprint, generation, state, verdict, created_at, \
     updated_at, lease_until, completed_at, expires_at, outcome_code, outcome_body";

/// The record's columns prefixed with `table` (`"r."`), in the order of [`COLUMNS`].
pub(super) fn columns_of(table: &str) -> String {
    COLUMNS
        .split(", ")
        .map(|c| format!("{table}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `state` column: idem-core's [`Status`] without its data.
pub(super) const PENDING: i16 = 0;
pub(super) const SETTLED: i16 = 1;
pub(super) const UNKNOWN: i16 = 2;
pub(super) const TOMBSTONE: i16 = 3;

fn verdict_code(verdict: Verdict) -> i16 {
    match verdict {
        Verdict::Succeeded => 0,
        Verdict::Failed => 1,
    }
}

/// A record's values as the statements bind them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Columns {
    pub(super) fingerprint: Vec<u8>,
    pub(super) generation: i64,
    pub(super) state: i16,
    pub(super) verdict: Option<i16>,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    pub(super) lease_until: Option<i64>,
    pub(super) completed_at: Option<i64>,
    pub(super) expires_at: Option<i64>,
    pub(super) outcome_code: Option<i32>,
    pub(super) outcome_body: Option<Vec<u8>>,
}

impl Columns {
    /// The columns of `record`; a time or generation past `i64::MAX` is refused.
    pub(super) fn of(record: &Record) -> Result<Columns, Error> {
        let mut columns = Columns {
            fingerprint: record.fingerprint.0.to_vec(),
            generation: signed("generation", record.generation.0)?,
            state: PENDING,
            verdict: None,
            created_at: signed("created_at", record.created_at.0)?,
            updated_at: signed("updated_at", record.updated_at.0)?,
            lease_until: None,
            completed_at: None,
            expires_at: None,
            outcome_code: None,
            outcome_body: None,
        };
        match &record.status {
            Status::Pending { lease_until } => {
                columns.lease_until = Some(signed("lease_until", lease_until.0)?);
            }
            Status::Settled {
                verdict,
                outcome,
                completed_at,
                expires_at,
            } => {
                columns.state = SETTLED;
                columns.verdict = Some(verdict_code(*verdict));
                columns.completed_at = Some(signed("completed_at", completed_at.0)?);
                columns.expires_at = Some(signed("expires_at", expires_at.0)?);
                columns.outcome_code = Some(outcome.code);
                columns.outcome_body = Some(outcome.body.clone());
            }
            Status::Unknown => columns.state = UNKNOWN,
            Status::Tombstone {
                verdict,
                completed_at,
                expires_at,
            } => {
                columns.state = TOMBSTONE;
                columns.verdict = Some(verdict_code(*verdict));
                columns.completed_at = Some(signed("completed_at", completed_at.0)?);
                columns.expires_at = Some(signed("expires_at", expires_at.0)?);
            }
        }
        Ok(columns)
    }

    /// The values in the order of [`COLUMNS`].
    pub(super) fn values(&self) -> Vec<Value> {
        vec![
            Value::from(self.fingerprint.clone()),
            Value::from(self.generation),
            Value::from(self.state),
            Value::from(self.verdict),
            Value::from(self.created_at),
            Value::from(self.updated_at),
            Value::from(self.lease_until),
            Value::from(self.completed_at),
            Value::from(self.expires_at),
            Value::from(self.outcome_code),
            Value::from(self.outcome_body.clone()),
        ]
    }
}

/// The fingerprint a column holds, or what is wrong with it.
pub(super) fn fingerprint_of(bytes: &[u8]) -> Result<Fingerprint, String> {
    <[u8; 32]>::try_from(bytes)
        .map(Fingerprint)
        .map_err(|_| format!("fingerprint of {} bytes, expected 32", bytes.len()))
}

/// `value` as the signed column that keeps it.
pub(super) fn signed(field: &'static str, value: u64) -> Result<i64, Error> {
    i64::try_from(value).map_err(|_| Error::OutOfRange { field, value })
}

/// The key's three parts as parameters: tenant, operation, key.
pub(super) fn key_values(id: &RecordId) -> [Value; 3] {
    [
        Value::from(id.tenant()),
        Value::from(id.operation()),
        Value::from(id.key()),
    ]
}

/// Column `index` of `row` as a `T`; a missing or mistyped column is reported as a row
/// of `table` that is not what the engine wrote.
pub(super) fn get<T: FromValue>(row: &Row, index: usize, table: &str) -> Result<T, Error> {
    match row.get_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(Error::Corrupt {
            detail: format!("{table}: column {index}: {e}"),
        }),
        None => Err(Error::Corrupt {
            detail: format!("{table}: no column {index}"),
        }),
    }
}

/// The record in `row`, from its column `first` on, in the order of [`COLUMNS`].
pub(super) fn record_at(row: &Row, first: usize, id: &RecordId) -> Result<Record, Error> {
    let table = format!("idem_records row {id}");
    let corrupt = |detail: String| Error::Corrupt {
        detail: format!("idem_records row {id}: {detail}"),
    };
    let fingerprint = fingerprint_of(&get::<Vec<u8>>(row, first, &table)?).map_err(corrupt)?;
    let unsigned = |name: &'static str, value: i64| {
        u64::try_from(value).map_err(|_| corrupt(format!("{name} {value} is negative")))
    };
    let time = |offset: usize, name: &'static str| -> Result<Timestamp, Error> {
        Ok(Timestamp(unsigned(
            name,
            get(row, first + offset, &table)?,
        )?))
    };
    let optional_time = |offset: usize, name: &'static str| -> Result<Option<Timestamp>, Error> {
        get::<Option<i64>>(row, first + offset, &table)?
            .map(|v| unsigned(name, v).map(Timestamp))
            .transpose()
    };
    let needed = |value: Option<Timestamp>, name: &'static str, state: &str| {
        value.ok_or_else(|| corrupt(format!("{name} is NULL in a {state} row")))
    };
    let state: i16 = get(row, first + 2, &table)?;
    let verdict = |state: &str| -> Result<Verdict, Error> {
        match get::<Option<i16>>(row, first + 3, &table)? {
            Some(0) => Ok(Verdict::Succeeded),
            Some(1) => Ok(Verdict::Failed),
            other => Err(corrupt(format!(
                "verdict {other:?} in a {state} row, expected 0 or 1"
            ))),
        }
    };
    let lease_until = optional_time(6, "lease_until")?;
    let completed_at = optional_time(7, "completed_at")?;
    let expires_at = optional_time(8, "expires_at")?;
    let status = match state {
        PENDING => Status::Pending {
            lease_until: needed(lease_until, "lease_until", "pending")?,
        },
        SETTLED => {
            let code: Option<i32> = get(row, first + 9, &table)?;
            let body: Option<Vec<u8>> = get(row, first + 10, &table)?;
            Status::Settled {
                verdict: verdict("settled")?,
                outcome: Outcome {
                    code: code
                        .ok_or_else(|| corrupt("outcome_code is NULL in a settled row".into()))?,
                    body: body
                        .ok_or_else(|| corrupt("outcome_body is NULL in a settled row".into()))?,
                },
                completed_at: needed(completed_at, "completed_at", "settled")?,
                expires_at: needed(expires_at, "expires_at", "settled")?,
            }
        }
        UNKNOWN => Status::Unknown,
        TOMBSTONE => Status::Tombstone {
            verdict: verdict("tombstone")?,
            completed_at: needed(completed_at, "completed_at", "tombstone")?,
            expires_at: needed(expires_at, "expires_at", "tombstone")?,
        },
        other => return Err(corrupt(format!("state {other}, expected 0 to 3"))),
    };
    Ok(Record {
        fingerprint,
        generation: Generation(unsigned("generation", get(row, first + 1, &table)?)?),
        created_at: time(4, "created_at")?,
        updated_at: time(5, "updated_at")?,
        status,
    })
}

/// The id in `row`'s columns `first` to `first + 2` (tenant, operation, key).
pub(super) fn id_at(row: &Row, first: usize) -> Result<RecordId, Error> {
    let part = |i: usize| get::<String>(row, first + i, "idem_records");
    let (tenant, operation, key) = (part(0)?, part(1)?, part(2)?);
    RecordId::new(&tenant, &operation, &key).map_err(|e| Error::Corrupt {
        detail: format!("idem_records row {tenant}/{operation}/{key}: {e}"),
    })
}

/// A time the database computed (`idem_now()`), as a timestamp.
pub(super) fn time_at(row: &Row, index: usize) -> Result<Timestamp, Error> {
    let ms: i64 = get(row, index, "the database's clock")?;
    u64::try_from(ms)
        .map(Timestamp)
        .map_err(|_| Error::Corrupt {
            detail: format!("the database's clock reads {ms} ms, before 1970"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_columns_in_the_order_of_the_statements() {
        let settled = Record {
            fingerprint: Fingerprint([7; 32]),
            generation: Generation(9),
            created_at: Timestamp(10),
            updated_at: Timestamp(11),
            status: Status::Settled {
                verdict: Verdict::Failed,
                outcome: Outcome::new(402, "declined"),
                completed_at: Timestamp(11),
                expires_at: Timestamp(99),
            },
        };
        let columns = Columns::of(&settled).unwrap();
        assert_eq!(
            (columns.state, columns.verdict, columns.expires_at),
            (SETTLED, Some(1), Some(99))
        );
        assert_eq!(columns.values().len(), COLUMNS.split(", ").count());
        assert_eq!(columns_of("r.").split(", ").next(), Some("r.fingerprint"));
        let far = Record {
            generation: Generation(u64::MAX),
            ..settled
        };
        assert!(matches!(
            Columns::of(&far),
            Err(Error::OutOfRange {
                field: "generation",
                ..
            })
        ));
    }
}
