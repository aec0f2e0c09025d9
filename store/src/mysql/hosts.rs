//! The database's hosts: one, or a list in the URL (`mysql://u:p@h1:3306,h2:3306/db`) of
//! a primary and its replicas, of which the engine writes to the one that takes writes
//! (`@@read_only` off). A replica follows a promotion without a restart: when the host in
//! use stops answering, or says it is read-only, the hosts are asked again in the order
//! given and the first writable one is used from then on.
//!
//! Each host has its own pool; only the chosen one's hands out connections. With one
//! host nothing is asked: its pool is the engine's, as it always was.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Pool};
use tokio::time::Instant;

use super::ConnectError;

/// How often the host in use is asked again whether it still takes writes (a planned
/// switchover sets the old primary read-only and leaves it running).
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One of the URL's hosts.
struct Host {
    /// `host:port` as the URL gives it, for messages.
    name: String,
    /// A connection of its own (a probe, an import's), in the engine's session.
    own: Opts,
    /// The pool, used while this host is the chosen one.
    pool: Pool,
}

/// The hosts of the URL and the one in use.
pub(super) struct Hosts {
    hosts: Vec<Host>,
    /// The index of the host in use.
    current: AtomicUsize,
    /// When the host in use is next asked whether it takes writes; `None` right after a
    /// failure, to ask at the next connection.
    next_check: Mutex<Option<Instant>>,
    /// One choice at a time; what the last one found when it found no host.
    choosing: tokio::sync::Mutex<Option<NoWritableHost>>,
    /// How many choices were made.
    choices: AtomicU64,
    /// How long a host may take to answer a probe.
    connect_timeout: Duration,
    /// Whether an unsafe durability setting is accepted on a host chosen later.
    accept_unsafe: bool,
}

/// No host of the list took writes when asked: each host with why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no writable host among the URL's: {0}")]
pub(super) struct NoWritableHost(String);

impl NoWritableHost {
    /// Each host with why it was not chosen.
    pub(super) fn hosts(&self) -> &str {
        &self.0
    }
}

/// The hosts named in `url` (after `mysql://`, before the path, separated by commas),
/// each as a URL of its own with the same user, database and parameters; a URL of one
/// host is given back as it is.
pub(super) fn split(url: &str) -> Result<Vec<(String, String)>, ConnectError> {
    let Some(rest) = url.strip_prefix("mysql://") else {
        return Ok(vec![(url.to_owned(), url.to_owned())]);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    if !hosts.contains(',') {
        return Ok(vec![(hosts.to_owned(), url.to_owned())]);
    }
    hosts
        .split(',')
        .enumerate()
        .map(|(n, host)| {
            if host.is_empty() {
                return Err(ConnectError::Url(format!(
                    "host {} of the list {hosts:?} is empty; separate hosts by one comma \
                     (mysql://user@host1:3306,host2:3306/db)",
                    n + 1
                )));
            }
            Ok((host.to_owned(), format!("mysql://{user}{host}{tail}")))
        })
        .collect()
}

impl Hosts {
    /// The hosts given (each its name, a connection's options, its pool's options),
    /// host `chosen` in use.
    pub(super) fn new(
        hosts: Vec<(String, Opts, Opts)>,
        chosen: usize,
        connect_timeout: Duration,
        accept_unsafe: bool,
    ) -> Hosts {
        Hosts {
            hosts: hosts
                .into_iter()
                .map(|(name, own, pooled)| Host {
                    name,
                    own,
                    pool: Pool::new(pooled),
                })
                .collect(),
            current: AtomicUsize::new(chosen),
            next_check: Mutex::new(Some(Instant::now() + CHECK_EVERY)),
            choosing: tokio::sync::Mutex::new(None),
            choices: AtomicU64::new(0),
            connect_timeout,
            accept_unsafe,
        }
    }

    /// The options of a connection of its own to the host in use.
    fn own_connection(&self) -> Opts {
        self.hosts[self.current.load(Ordering::Acquire)].own.clone()
    }

    /// A connection of its own to the host in use (an import's), within the connect
    /// timeout.
    pub(super) async fn connect_own(&self) -> Result<Conn, mysql_async::Error> {
        within(self.connect_timeout, Conn::new(self.own_connection())).await
    }

    /// A connection of `host`'s pool: a free one, or a new one, within the connect
    /// timeout (the driver has none of its own: a host that does not answer would hold
    /// the call for as long as the operating system tries to connect).
    async fn pooled(&self, host: &Host) -> Result<Conn, mysql_async::Error> {
        within(self.connect_timeout, host.pool.get_conn()).await
    }

    /// A connection of the pool of the host that takes writes: the one in use while it
    /// answers and, once a second, still says it is writable; else the first of the list
    /// that does.
    pub(super) async fn get_conn(&self) -> Result<Conn, mysql_async::Error> {
        let at = self.current.load(Ordering::Acquire);
        let host = &self.hosts[at];
        if self.hosts.len() == 1 {
            return self.pooled(host).await;
        }
        match self.pooled(host).await {
            Ok(mut conn) if self.check_due() => {
                if let Ok(false) = read_only(&mut conn).await {
                    return Ok(conn);
                }
            }
            Ok(conn) => return Ok(conn),
            Err(_) => {}
        }
        // The host in use went away or stopped taking writes: the finding names what
        // each host answered, this one's error included.
        match self.choose(at).await {
            Ok(chosen) => self.pooled(&self.hosts[chosen]).await,
            Err(e) => Err(mysql_async::Error::Other(Box::new(e))),
        }
        .inspect_err(|_| self.failed())
    }

    /// After a failure that may mean the host in use went away or stopped taking writes:
    /// it is asked again at the next connection.
    pub(super) fn failed(&self) {
        if self.hosts.len() > 1 {
            *self.next_check.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    /// True when the host in use is to be asked whether it takes writes now; the caller
    /// that is told so asks, the others go on.
    fn check_due(&self) -> bool {
        let mut next = self.next_check.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if next.is_some_and(|at| at > now) {
            return false;
        }
        *next = Some(now + CHECK_EVERY);
        true
    }

    /// Asks the hosts in the URL's order and uses the first that takes writes (and whose
    /// durability settings pass the check the engine made at connect). A choice made
    /// while this caller waited for its turn is this caller's too: callers that arrive
    /// together during a promotion ask the hosts once.
    async fn choose(&self, failed: usize) -> Result<usize, NoWritableHost> {
        let arrived = self.choices.load(Ordering::Acquire);
        let mut last = self.choosing.lock().await;
        let current = self.current.load(Ordering::Acquire);
        if current != failed {
            return Ok(current);
        }
        if self.choices.load(Ordering::Acquire) != arrived
            && let Some(e) = last.as_ref()
        {
            return Err(e.clone());
        }
        let chosen = first_writable(
            self.hosts.iter().map(|h| (h.name.as_str(), &h.own)),
            self.connect_timeout,
            self.accept_unsafe,
        )
        .await;
        self.choices.fetch_add(1, Ordering::AcqRel);
        match chosen {
            Ok(chosen) => {
                self.current.store(chosen, Ordering::Release);
                *self.next_check.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + CHECK_EVERY);
                *last = None;
                Ok(chosen)
            }
            Err(e) => {
                *last = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// The index of the first of `hosts` that answers within `timeout`, takes writes, and
/// has durability settings the engine accepts; else each host with why not.
pub(super) async fn first_writable<'a>(
    hosts: impl Iterator<Item = (&'a str, &'a Opts)>,
    timeout: Duration,
    accept_unsafe: bool,
) -> Result<usize, NoWritableHost> {
    let mut why = Vec::new();
    for (n, (name, opts)) in hosts.enumerate() {
        let probed = async {
            let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
            let writable = match read_only(&mut conn).await {
                Ok(true) => Err("read_only is ON".to_owned()),
                Ok(false) => super::durability::check(&mut conn, accept_unsafe)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let _ = conn.disconnect().await;
            writable
        };
        match tokio::time::timeout(timeout, probed).await {
            Ok(Ok(())) => return Ok(n),
            Ok(Err(e)) => why.push(format!("{name} ({e})")),
            Err(_) => why.push(format!("{name} (no answer within {timeout:?})")),
        }
    }
    Err(NoWritableHost(why.join(", ")))
}

/// No connection came within the connect timeout: the host does not answer, or every
/// connection of the pool stayed in use.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no connection to the database within {0:?} (connect_timeout)")]
pub(super) struct NoConnection(Duration);

/// `connecting`, or [`NoConnection`] once `timeout` has passed.
async fn within(
    timeout: Duration,
    connecting: impl Future<Output = Result<Conn, mysql_async::Error>>,
) -> Result<Conn, mysql_async::Error> {
    tokio::time::timeout(timeout, connecting)
        .await
        .unwrap_or_else(|_| Err(mysql_async::Error::Other(Box::new(NoConnection(timeout)))))
}

/// Whether the server of `conn` refuses writes (`@@global.read_only`).
async fn read_only(conn: &mut Conn) -> Result<bool, mysql_async::Error> {
    let value: Option<i64> = conn.query_first("SELECT @@GLOBAL.read_only").await?;
    Ok(value.unwrap_or(0) != 0)
}

/// True when `e` is the engine's finding that no host took writes, or that none gave a
/// connection in time: waited out like a restart.
pub(super) fn out_of_reach(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Other(other)
        if other.is::<NoWritableHost>() || other.is::<NoConnection>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_hosts_becomes_a_url_each_and_one_host_stays_as_given() {
        let hosts = split("mysql://u:p%2C@db1:3306,db2:3307/shop?require_ssl=true").unwrap();
        assert_eq!(
            hosts,
            [
                (
                    "db1:3306".to_owned(),
                    "mysql://u:p%2C@db1:3306/shop?require_ssl=true".to_owned()
                ),
                (
                    "db2:3307".to_owned(),
                    "mysql://u:p%2C@db2:3307/shop?require_ssl=true".to_owned()
                ),
            ]
        );
        let one = "mysql://u@db:3306/shop";
        assert_eq!(
            split(one).unwrap(),
            [("db:3306".to_owned(), one.to_owned())]
        );
        let error = split("mysql://u@db1,,db3/shop").unwrap_err();
        assert!(error.is_input());
        assert!(
            error
                .to_string()
                .contains("host 2 of the list \"db1,,db3\" is empty"),
            "{error}"
        );
    }
}
