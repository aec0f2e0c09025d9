//! The server checked at connect: that it is a MariaDB this engine runs on, and that its
//! durability settings keep what it acknowledged. MariaDB sets durability for the whole
//! server (unlike PostgreSQL's per-session `synchronous_commit`), so the engine can only
//! read it, and refuses unsafe values unless told to accept them.

use std::collections::BTreeMap;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::ConnectError;

/// The oldest MariaDB this engine runs on: 10.6 (`SKIP LOCKED`; sequences came in 10.3,
/// `INSERT … RETURNING` in 10.5).
const OLDEST: (u16, u16) = (10, 6);

/// Refuses a server that is not MariaDB 10.6 or newer, naming what it lacks.
pub(super) async fn check_server(conn: &mut Conn) -> Result<(), ConnectError> {
    let version: String = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(ConnectError::ReadSettings)?
        .unwrap_or_default();
    if !version.contains("MariaDB") {
        return Err(ConnectError::Server {
            version,
            problem: "this engine needs MariaDB 10.6 or newer (MySQL has no sequences and no \
                      INSERT … RETURNING, which it uses)",
        });
    }
    let (major, minor, _) = conn.server_version();
    if (major, minor) < OLDEST {
        return Err(ConnectError::Server {
            version,
            problem: "this engine needs MariaDB 10.6 or newer (FOR UPDATE SKIP LOCKED)",
        });
    }
    Ok(())
}

/// Whether the server is a node of a Galera cluster (`wsrep_on`; a server built without
/// Galera has no such variable).
pub(super) async fn galera(conn: &mut Conn) -> Result<bool, ConnectError> {
    let on: Option<(String, String)> = conn
        .query_first("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
        .await
        .map_err(ConnectError::ReadSettings)?;
    Ok(on.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON")))
}

/// One finding of [`unsafe_setting`]: the variable, its value, the fix.
type Finding = (&'static str, String, &'static str);

/// Reads the server's durability settings and refuses the first unsafe one, unless
/// `accept` says to run with it: then the risk accepted, named with its value.
pub(super) async fn check(conn: &mut Conn, accept: bool) -> Result<Option<String>, ConnectError> {
    let rows: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN \
               ('innodb_flush_log_at_trx_commit', 'log_bin', 'sync_binlog', \
                'rpl_semi_sync_master_enabled', 'rpl_semi_sync_master_wait_point', \
                'rpl_semi_sync_source_enabled', 'rpl_semi_sync_source_wait_point')",
        )
        .await
        .map_err(ConnectError::ReadSettings)?;
    let settings: BTreeMap<String, String> = rows
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    match unsafe_setting(&settings) {
        Some((variable, value, fix)) if !accept => Err(ConnectError::UnsafeDurability {
            variable,
            value,
            fix,
        }),
        Some((variable, value, _)) => Ok(Some(format!("{variable} is {value}"))),
        None => Ok(None),
    }
}

/// Why commits are less durable than the settings checked at connect promise, read now:
/// a semi-synchronous primary whose replicas did not acknowledge within its timeout has
/// fallen back to asynchronous replication, silently, until one catches up. `None` when
/// it has not (or semi-synchronous replication is off: then the check at connect judged
/// the settings).
pub(super) async fn degraded(conn: &mut Conn) -> Result<Option<String>, mysql_async::Error> {
    // One round trip: a health check and a scrape each ask.
    let read: Option<(Option<String>, Option<String>)> = conn
        .query_first(
            "SELECT CAST(@@GLOBAL.rpl_semi_sync_master_enabled AS CHAR), \
               (SELECT CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS')",
        )
        .await?;
    let (enabled, status) = read.unwrap_or_default();
    Ok(fell_back(enabled.as_deref(), status.as_deref()))
}

/// The finding of [`degraded`] from the variable `rpl_semi_sync_master_enabled` and the
/// status `Rpl_semi_sync_master_status`.
fn fell_back(enabled: Option<&str>, status: Option<&str>) -> Option<String> {
    let on = |value: Option<&str>| value.is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1");
    (on(enabled) && !on(status)).then(|| {
        format!(
            "semi-synchronous replication fell back to asynchronous (rpl_semi_sync_master_enabled \
             is ON, Rpl_semi_sync_master_status is {}): no replica acknowledged within \
             rpl_semi_sync_master_timeout, and until one catches up a failover can lose an \
             answered request",
            status.unwrap_or("absent")
        )
    })
}

/// The first setting in `settings` (server variables by lower-case name) that lets an
/// acknowledged commit be lost, if any.
fn unsafe_setting(settings: &BTreeMap<String, String>) -> Option<Finding> {
    let get = |name: &str| settings.get(name).map(String::as_str);
    let on = |name: &str| get(name).is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1");
    if let Some(value) = get("innodb_flush_log_at_trx_commit")
        && value != "1"
    {
        return Some((
            "innodb_flush_log_at_trx_commit",
            value.to_owned(),
            "set innodb_flush_log_at_trx_commit = 1 (SET GLOBAL, and in the server's configuration)",
        ));
    }
    if on("log_bin")
        && let Some(value) = get("sync_binlog")
        && value != "1"
    {
        return Some((
            "sync_binlog",
            value.to_owned(),
            "with the binary log on, set sync_binlog = 1 (SET GLOBAL, and in the server's configuration)",
        ));
    }
    for (enabled, wait_point) in [
        (
            "rpl_semi_sync_master_enabled",
            "rpl_semi_sync_master_wait_point",
        ),
        (
            "rpl_semi_sync_source_enabled",
            "rpl_semi_sync_source_wait_point",
        ),
    ] {
        if on(enabled)
            && let Some(value) = get(wait_point)
            && !value.eq_ignore_ascii_case("AFTER_SYNC")
        {
            return Some((
                if wait_point.contains("master") {
                    "rpl_semi_sync_master_wait_point"
                } else {
                    "rpl_semi_sync_source_wait_point"
                },
                value.to_owned(),
                "set the semi-synchronous wait point to AFTER_SYNC (lossless)",
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn each_unsafe_setting_is_named_and_safe_ones_pass() {
        let safe = of(&[
            ("innodb_flush_log_at_trx_commit", "1"),
            ("log_bin", "OFF"),
            ("sync_binlog", "0"),
            ("rpl_semi_sync_master_enabled", "OFF"),
            ("rpl_semi_sync_master_wait_point", "AFTER_COMMIT"),
        ]);
        assert_eq!(unsafe_setting(&safe), None);
        let flush = of(&[("innodb_flush_log_at_trx_commit", "2")]);
        assert_eq!(
            unsafe_setting(&flush).map(|f| (f.0, f.1)),
            Some(("innodb_flush_log_at_trx_commit", "2".to_owned()))
        );
        let binlog = of(&[
            ("innodb_flush_log_at_trx_commit", "1"),
            ("log_bin", "ON"),
            ("sync_binlog", "0"),
        ]);
        assert_eq!(
            unsafe_setting(&binlog).map(|f| (f.0, f.1)),
            Some(("sync_binlog", "0".to_owned()))
        );
        let semi_sync = of(&[
            ("innodb_flush_log_at_trx_commit", "1"),
            ("rpl_semi_sync_master_enabled", "ON"),
            ("rpl_semi_sync_master_wait_point", "AFTER_COMMIT"),
        ]);
        assert_eq!(
            unsafe_setting(&semi_sync).map(|f| (f.0, f.1)),
            Some(("rpl_semi_sync_master_wait_point", "AFTER_COMMIT".to_owned()))
        );
    }

    #[test]
    fn a_semi_synchronous_primary_that_fell_back_is_degraded() {
        let found = fell_back(Some("1"), Some("OFF")).expect("degraded");
        assert!(
            found.contains("Rpl_semi_sync_master_status is OFF"),
            "{found}"
        );
        assert_eq!(fell_back(Some("1"), Some("ON")), None);
        assert_eq!(fell_back(Some("0"), Some("OFF")), None);
        assert_eq!(fell_back(None, None), None);
    }
}
