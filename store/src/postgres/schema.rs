//! The versioned schema: created on first use by a role allowed to, printed for a DBA
//! who applies it by hand, and refused when a newer idem wrote it or a table was changed
//! by hand.

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::ConnectError;

/// The schema this build writes and reads, in `idem_meta.schema_version`: 2 added the
/// entities, claimed values and tokens, 3 the intents an import carries, 4 the claimant
/// of a claim (a lost claim's mark, docs/design.md §16); an older
/// database is upgraded by applying [`SCHEMA`] (`testdata/postgres-schema-v*.sql` keep
/// the older versions).
pub(super) const SCHEMA_VERSION: i64 = 4;

/// The schema as SQL, every statement safe to run again.
pub(super) const SCHEMA: &str = include_str!("schema.sql");

/// The columns of `idem_records` this build reads and writes, with their types.
const RECORD_COLUMNS: [(&str, &str); 15] = [
    ("tenant", "text"),
    ("operation", "text"),
    ("key", "text"),
    ("fingerprint", "bytea"),
    ("generation", "bigint"),
    ("state", "smallint"),
    ("verdict", "smallint"),
    ("created_at", "bigint"),
    ("updated_at", "bigint"),
    ("lease_until", "bigint"),
    ("completed_at", "bigint"),
    ("expires_at", "bigint"),
    ("outcome_code", "integer"),
    ("outcome_body", "bytea"),
    ("claimant", "bigint"),
];

/// Makes sure the database holds this build's schema: creates it, or upgrades an older
/// one, when it is missing or older and `create` allows; refuses a newer one; and checks
/// the columns of the records' table.
pub(super) async fn ensure(client: &Client, create: bool) -> Result<(), ConnectError> {
    let version = match version(client).await? {
        Some(version) if version >= SCHEMA_VERSION => version,
        Some(older) if !create => {
            return Err(ConnectError::OlderSchema {
                found: older,
                supported: SCHEMA_VERSION,
            });
        }
        Some(_) | None if create => {
            if let Err(e) = client
                .batch_execute(&format!("BEGIN; {SCHEMA} COMMIT;"))
                .await
            {
                let _ = client.batch_execute("ROLLBACK").await;
                // Another replica may have made it at the same moment.
                match version(client).await? {
                    Some(version) if version >= SCHEMA_VERSION => version,
                    _ => return Err(ConnectError::CreateSchema(e)),
                }
            } else {
                SCHEMA_VERSION
            }
        }
        _ => return Err(ConnectError::NoSchema),
    };
    if version > SCHEMA_VERSION {
        return Err(ConnectError::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    check_columns(client).await
}

/// The schema version, or `None` when the database holds no idem schema.
async fn version(client: &Client) -> Result<Option<i64>, ConnectError> {
    let read = client
        .query_opt(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await;
    match read {
        Ok(row) => row
            .map(|row| row.try_get::<_, i64>(0))
            .transpose()
            .map_err(ConnectError::ReadSchema),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(ConnectError::ReadSchema(e)),
    }
}

async fn check_columns(client: &Client) -> Result<(), ConnectError> {
    let rows = client
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
              WHERE table_schema = current_schema() AND table_name = 'idem_records'",
            &[],
        )
        .await
        .map_err(ConnectError::ReadSchema)?;
    let found: Vec<(String, String)> = rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(ConnectError::ReadSchema)?;
    for (column, kind) in RECORD_COLUMNS {
        match found.iter().find(|(name, _)| name == column) {
            None => {
                return Err(ConnectError::SchemaChanged {
                    detail: format!("idem_records has no column {column} ({kind})"),
                });
            }
            Some((_, actual)) if actual != kind => {
                return Err(ConnectError::SchemaChanged {
                    detail: format!("idem_records.{column} is {actual}, expected {kind}"),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}
