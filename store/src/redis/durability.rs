//! The server checked at connect: that it is a Redis with functions (7.0 or newer), that
//! its settings keep what it acknowledges, and that it holds idem's function library,
//! loaded here when it has none. Redis sets durability for the whole server, so the
//! engine can only read it, and refuses unsafe values unless told to accept them.

use redis::Value;
use redis::aio::ConnectionManager;

use super::{ConnectError, LIBRARY, LIBRARY_VERSION};

/// One finding of [`unsafe_setting`]: the setting, its value, the fix.
type Finding = (&'static str, String, &'static str);

/// The value of `INFO server`'s `field`.
fn info_field<'i>(info: &'i str, field: &str) -> Option<&'i str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Refuses a server older than 7.0 (functions), then reads its durability settings and
/// refuses the first unsafe one, unless `accept` says to run with it: then the risk
/// accepted, named with its value (or as settings that could not be read).
pub(super) async fn check(
    conn: &mut ConnectionManager,
    accept: bool,
) -> Result<Option<String>, ConnectError> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .map_err(ConnectError::Connect)?;
    let version = info_field(&info, "redis_version")
        .unwrap_or("unknown")
        .to_owned();
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if major < 7 {
        return Err(ConnectError::Server {
            version,
            problem: "this engine needs Redis 7.0 or newer (functions: FUNCTION LOAD, FCALL)",
        });
    }
    let mut settings = Vec::new();
    for name in ["appendonly", "appendfsync", "maxmemory-policy"] {
        let pair: Result<Vec<String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(conn)
            .await;
        match pair {
            Ok(pair) => settings.push((name, pair.get(1).cloned().unwrap_or_default())),
            Err(_) if accept => {
                return Ok(Some(
                    "the server's durability settings could not be read (CONFIG GET refused)"
                        .to_owned(),
                ));
            }
            Err(e) => return Err(ConnectError::ReadSettings(e)),
        }
    }
    match unsafe_setting(&settings) {
        Some((setting, value, fix)) if !accept => Err(ConnectError::UnsafeDurability {
            setting,
            value,
            fix,
        }),
        Some((setting, value, _)) => Ok(Some(format!("{setting} is {value}"))),
        None => Ok(None),
    }
}

/// The first setting that lets an acknowledged write be lost, if any.
fn unsafe_setting(settings: &[(&str, String)]) -> Option<Finding> {
    let value = |name: &str| {
        settings
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_ascii_lowercase())
            .unwrap_or_default()
    };
    if value("appendonly") != "yes" {
        return Some((
            "appendonly",
            value("appendonly"),
            "turn the append-only file on (appendonly yes): without it a restart forgets every claim since the last snapshot",
        ));
    }
    if value("appendfsync") != "always" {
        return Some((
            "appendfsync",
            value("appendfsync"),
            "set appendfsync always: the server then answers a write once it is on disk",
        ));
    }
    if value("maxmemory-policy") != "noeviction" {
        return Some((
            "maxmemory-policy",
            value("maxmemory-policy"),
            "set maxmemory-policy noeviction: any other policy drops claims when memory runs short",
        ));
    }
    None
}

/// The masters of the Redis Cluster `conn` is a node of (`CLUSTER SLOTS`): host and port
/// of each, once.
pub(super) async fn masters(
    conn: &mut ConnectionManager,
) -> Result<Vec<(String, u16)>, ConnectError> {
    let not_a_cluster = || {
        ConnectError::Url(
            "cluster=true: the server answers no cluster's slots (is it a node of a Redis Cluster?)"
                .to_owned(),
        )
    };
    let slots: Value = match redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await {
        Ok(slots) => slots,
        // "This instance has cluster support disabled".
        Err(e) if e.code() == Some("ERR") => return Err(not_a_cluster()),
        Err(e) => return Err(ConnectError::Connect(e)),
    };
    let Value::Array(ranges) = slots else {
        return Err(not_a_cluster());
    };
    let mut masters = Vec::new();
    for range in ranges {
        // [first slot, last slot, [host, port, id, …] of the master, then its replicas]
        let Value::Array(parts) = range else {
            return Err(not_a_cluster());
        };
        let Some(Value::Array(node)) = parts.get(2) else {
            return Err(not_a_cluster());
        };
        let host = match node.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => return Err(not_a_cluster()),
        };
        let Some(Value::Int(port)) = node.get(1) else {
            return Err(not_a_cluster());
        };
        let port = u16::try_from(*port).map_err(|_| not_a_cluster())?;
        if !masters.contains(&(host.clone(), port)) {
            masters.push((host, port));
        }
    }
    if masters.is_empty() {
        return Err(not_a_cluster());
    }
    Ok(masters)
}

/// Loads idem's library when the server has none; refuses a newer one. A server with an
/// older one gets this build's (`FUNCTION LOAD REPLACE`: the functions change, the data
/// stays).
pub(super) async fn load_library(conn: &mut ConnectionManager) -> Result<(), ConnectError> {
    let found: Result<i64, _> = redis::cmd("FCALL_RO")
        .arg("idem_version")
        .arg(0)
        .query_async(conn)
        .await;
    match found {
        Ok(found) if found > LIBRARY_VERSION => {
            return Err(ConnectError::NewerLibrary {
                found,
                supported: LIBRARY_VERSION,
            });
        }
        Ok(found) if found == LIBRARY_VERSION => return Ok(()),
        Ok(_) => {}
        // No library yet (the function is not found).
        Err(e) if e.code() == Some("ERR") => {}
        Err(e) => return Err(ConnectError::LoadLibrary(e)),
    }
    let loaded: Result<String, _> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query_async(conn)
        .await;
    loaded.map(drop).map_err(ConnectError::LoadLibrary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(appendonly: &str, fsync: &str, policy: &str) -> Vec<(&'static str, String)> {
        vec![
            ("appendonly", appendonly.to_owned()),
            ("appendfsync", fsync.to_owned()),
            ("maxmemory-policy", policy.to_owned()),
        ]
    }

    #[test]
    fn each_unsafe_setting_is_named_with_its_value() {
        assert_eq!(
            unsafe_setting(&settings("yes", "always", "noeviction")),
            None
        );
        let named = |s: &[(&'static str, String)]| unsafe_setting(s).map(|(n, v, _)| (n, v));
        assert_eq!(
            named(&settings("no", "always", "noeviction")),
            Some(("appendonly", "no".to_owned()))
        );
        assert_eq!(
            named(&settings("yes", "everysec", "noeviction")),
            Some(("appendfsync", "everysec".to_owned()))
        );
        assert_eq!(
            named(&settings("yes", "always", "allkeys-lru")),
            Some(("maxmemory-policy", "allkeys-lru".to_owned()))
        );
    }

    #[test]
    fn the_version_is_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "redis_mode"), None);
    }
}
