//! The versioned schema: created on first use by a user allowed to, printed for a DBA
//! who applies it by hand, and refused when a newer idem wrote it or a table was changed
//! by hand.
//!
//! MariaDB commits each DDL statement on its own, so the schema cannot be made in one
//! transaction: every statement may run again, and the version row is written last, so
//! that a schema cut short reads as none (or as the older version) and the next connect
//! completes it. An older schema is upgraded the same way: its statements add what is
//! missing and raise the version row last.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::ConnectError;
use super::error::code;

/// The schema this build writes and reads, in `idem_meta.schema_version`: 2 added the
/// claimant (`seam::lost`). An older database is upgraded by applying [`SCHEMA`]
/// (`testdata/mariadb-schema-v*.sql` keep the older versions).
pub(super) const SCHEMA_VERSION: i64 = 2;

/// The schema as SQL, every statement safe to run again.
pub(super) const SCHEMA: &str = include_str!("schema.sql");

/// `ER_NO_SUCH_TABLE`: the table does not exist.
const NO_SUCH_TABLE: u16 = 1146;

/// The columns of `idem_records` this build reads and writes, with their types as
/// `information_schema.columns.data_type` names them.
const RECORD_COLUMNS: [(&str, &str); 16] = [
    ("tenant", "varbinary"),
    ("operation", "varbinary"),
    ("idem_key", "varbinary"),
    ("fingerprint", "varbinary"),
    ("generation", "bigint"),
    ("revision", "bigint"),
    ("state", "smallint"),
    ("verdict", "smallint"),
    ("created_at", "bigint"),
    ("updated_at", "bigint"),
    ("lease_until", "bigint"),
    ("completed_at", "bigint"),
    ("expires_at", "bigint"),
    ("outcome_code", "int"),
    ("outcome_body", "longblob"),
    ("claimant", "bigint"),
];

/// The statements of [`SCHEMA`], one by one, without the comments.
pub(super) fn statements() -> impl Iterator<Item = String> {
    SCHEMA
        .split(";\n")
        .map(|chunk| {
            chunk
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|statement| !statement.trim().is_empty())
}

/// Makes sure the database holds this build's schema: creates it, or upgrades an older
/// one, when it is missing or older and `create` allows; refuses a newer one; checks the
/// columns of the records' table.
pub(super) async fn ensure(conn: &mut Conn, create: bool) -> Result<(), ConnectError> {
    let version = match version(conn).await? {
        Some(version) if version >= SCHEMA_VERSION => version,
        Some(older) if !create => {
            return Err(ConnectError::OlderSchema {
                found: older,
                supported: SCHEMA_VERSION,
            });
        }
        None if !create => return Err(ConnectError::NoSchema),
        Some(_) | None => {
            for statement in statements() {
                if let Err(e) = conn.query_drop(statement).await {
                    // Another replica may have made it at the same moment.
                    match version(conn).await? {
                        Some(version) if version >= SCHEMA_VERSION => break,
                        _ => return Err(ConnectError::CreateSchema(e)),
                    }
                }
            }
            version(conn).await?.unwrap_or(SCHEMA_VERSION)
        }
    };
    if version > SCHEMA_VERSION {
        return Err(ConnectError::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    check_columns(conn).await?;
    check_sequence(conn, create).await
}

/// Makes the generations' sequence step by `auto_increment_increment` (`INCREMENT BY
/// 0`), as this build creates it, when an earlier idem made it count by 1 and `create`
/// allows; refuses such a sequence on a Galera cluster, where its nodes would hand out
/// the same generation, when it does not.
async fn check_sequence(conn: &mut Conn, create: bool) -> Result<(), ConnectError> {
    let increment: Option<i64> = conn
        .query_first("SELECT increment FROM idem_generation")
        .await
        .map_err(ConnectError::ReadSchema)?;
    if increment.unwrap_or(0) == 0 {
        return Ok(());
    }
    if create {
        return conn
            .query_drop("ALTER SEQUENCE idem_generation INCREMENT BY 0")
            .await
            .map_err(ConnectError::CreateSchema);
    }
    // A server built without Galera has no such variable.
    let galera: Option<(String, String)> = conn
        .query_first("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
        .await
        .map_err(ConnectError::ReadSchema)?;
    if !galera.is_some_and(|(_, on)| on.eq_ignore_ascii_case("ON")) {
        return Ok(());
    }
    Err(ConnectError::SchemaChanged {
        detail: "idem_generation counts by 1 on a Galera cluster, whose nodes would hand out \
                 the same generation; run ALTER SEQUENCE idem_generation INCREMENT BY 0 (as \
                 `idem schema --db mysql://…` does) as a user allowed to"
            .into(),
    })
}

/// The schema version, or `None` when the database holds no idem schema.
async fn version(conn: &mut Conn) -> Result<Option<i64>, ConnectError> {
    match conn
        .query_first::<i64, _>("SELECT value FROM idem_meta WHERE name = 'schema_version'")
        .await
    {
        Ok(version) => Ok(version),
        Err(e) if code(&e) == Some(NO_SUCH_TABLE) => Ok(None),
        Err(e) => Err(ConnectError::ReadSchema(e)),
    }
}

async fn check_columns(conn: &mut Conn) -> Result<(), ConnectError> {
    let found: Vec<(String, String)> = conn
        .query(
            "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
              WHERE table_schema = DATABASE() AND table_name = 'idem_records'",
        )
        .await
        .map_err(ConnectError::ReadSchema)?;
    for (column, kind) in RECORD_COLUMNS {
        match found.iter().find(|(name, _)| name == column) {
            None => {
                return Err(ConnectError::SchemaChanged {
                    detail: format!("idem_records has no column {column} ({kind})"),
                });
            }
            Some((_, actual)) if !actual.eq_ignore_ascii_case(kind) => {
                return Err(ConnectError::SchemaChanged {
                    detail: format!("idem_records.{column} is {actual}, expected {kind}"),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_splits_into_its_statements_with_the_version_last() {
        let statements: Vec<String> = statements().collect();
        assert_eq!(statements.len(), 12, "{statements:#?}");
        assert!(statements[0].contains("CREATE TABLE IF NOT EXISTS idem_meta"));
        assert!(
            statements
                .last()
                .is_some_and(|s| s.contains("'schema_version', 2")),
            "the version row is written last"
        );
        assert!(statements.iter().all(|s| !s.contains("--")));
    }
}
