//! Throwaway Redis servers for integration tests: each [`Server`] owns a temporary
//! directory, its data (the append-only file) and the `redis-server` process running on
//! it.
//!
//! A server runs the Redis installed on the machine (`redis-server` on the `PATH` or in
//! `/usr/bin`; Debian 12's `redis-server` package). It listens on a free port of
//! 127.0.0.1 only, with no password ([`Server::url`]), and starts with the settings the
//! engine requires (`appendonly yes`, `appendfsync always`, `maxmemory-policy
//! noeviction`) unless a test gives others ([`Server::start_with`]). Without the binary,
//! [`Server::start`] panics: a test that needs Redis never passes by skipping.
//!
//! Only std is used; the server is this process's child, so [`Server::kill9`] is a
//! SIGKILL of a process whose id is known. Dropping a [`Server`] kills it and removes its
//! directory, also when a test panics. Every wait is bounded.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset of it

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a wait loop looks again.
const POLL: Duration = Duration::from_millis(20);
/// How long a start may take until the server answers.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a clean stop may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How many ports a first start tries when the one it picked was taken meanwhile.
const START_ATTEMPTS: u32 = 3;
/// How many lines of the server's log a panic message shows.
const LOG_TAIL_LINES: usize = 40;

/// The settings the engine requires, given at every start before a test's own.
const SAFE: [&str; 3] = [
    "--appendonly yes",
    "--appendfsync always",
    "--maxmemory-policy noeviction",
];

/// A Redis server of its own, in a temporary directory.
///
/// The data (the append-only file) and the server's log (`server.log`) live in
/// [`Server::dir`]. The server can be stopped ([`Server::stop`]), crashed
/// ([`Server::kill9`]) and started again on the same port and data
/// ([`Server::restart`]). Dropping it kills whatever runs and removes the directory.
pub struct Server {
    dir: PathBuf,
    port: u16,
    /// The `--name value…` options, given again at every start.
    options: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// Starts a server with the engine's settings.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing or does not start; the message tells why, with
    /// the tail of the server's log.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with the engine's settings, then `options` (each `--name value…`,
    /// which override them: `--appendfsync everysec`, `--replicaof 127.0.0.1 6379`).
    ///
    /// # Panics
    ///
    /// As [`Server::start`].
    pub fn start_with(options: &[&str]) -> Server {
        static SERVERS: AtomicU32 = AtomicU32::new(0);
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-{}-{}-{stamp}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).expect("make the server's directory");
        let mut all: Vec<String> = SAFE.iter().map(|o| (*o).to_owned()).collect();
        all.extend(options.iter().map(|o| (*o).to_owned()));
        let mut server = Server {
            dir,
            port: 0,
            options: all,
            child: None,
        };
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(why) => failures.push(why),
            }
        }
        panic!("redis-server did not start: {}", failures.join("; "));
    }

    /// The URL of database 0.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory.
    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Runs one command with `redis-cli` and gives its output (trimmed).
    ///
    /// # Panics
    ///
    /// When `redis-cli` fails.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(binary("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli");
        assert!(
            out.status.success(),
            "redis-cli {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits until this server, a replica, has its primary's data and follows it
    /// (`master_link_status:up`), bounded.
    ///
    /// # Panics
    ///
    /// When it does not within the start timeout.
    pub fn wait_for_primary(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
            {
                return;
            }
            sleep(POLL);
        }
        panic!("the replica did not reach its primary: {}", self.log_tail());
    }

    /// SIGKILLs the server: what it had not written to its append-only file is lost, as
    /// in a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _killed = child.kill();
            let _reaped = child.wait();
        }
    }

    /// Stops the server cleanly (`SHUTDOWN`), bounded; killed when it does not stop.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _asked = Command::new(binary("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "SHUTDOWN"])
            .stdin(Stdio::null())
            .output();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            sleep(POLL);
        }
        let _killed = child.kill();
        let _reaped = child.wait();
    }

    /// Starts the server again on the same port and data.
    ///
    /// # Panics
    ///
    /// When it does not start.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        if let Err(why) = self.spawn() {
            panic!("redis-server did not start again: {why}");
        }
    }

    /// Starts `redis-server` and waits until it answers a `PING`.
    fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let mut command = Command::new(binary("redis-server"));
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--dir", self.dir.to_str().expect("a UTF-8 temp path")])
            .args(["--logfile", log.to_str().expect("a UTF-8 temp path")])
            .args(["--save", ""])
            .args(["--daemonize", "no"]);
        for option in &self.options {
            command.args(option.split_whitespace());
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server could not be run ({e}); install redis-server"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("exited with {status}: {}", self.log_tail()));
            }
            if self.answers() {
                return Ok(());
            }
            sleep(POLL);
        }
        self.kill9();
        Err(format!(
            "no answer within {START_TIMEOUT:?}: {}",
            self.log_tail()
        ))
    }

    /// True when the server answers a `PING` (and is done loading its data: a loading
    /// server answers `-LOADING`).
    fn answers(&self) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
            return false;
        };
        let _set = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut answer = [0_u8; 64];
        // A server with a password answers that it wants one: it is up all the same.
        matches!(stream.read(&mut answer),
            Ok(n) if answer[..n].starts_with(b"+PONG") || answer[..n].starts_with(b"-NOAUTH"))
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

/// `masters` servers made one Redis Cluster on loopback (`redis-cli --cluster create`,
/// no replicas), each with the engine's settings; ready once every node says
/// `cluster_state:ok`.
///
/// # Panics
///
/// When a server does not start or the cluster does not form, bounded.
pub fn start_cluster(masters: usize) -> Vec<Server> {
    let servers: Vec<Server> = (0..masters)
        .map(|_| {
            Server::start_with(&[
                "--cluster-enabled yes",
                "--cluster-config-file nodes.conf",
                "--cluster-node-timeout 5000",
            ])
        })
        .collect();
    let nodes: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let out = Command::new(binary("redis-cli"))
        .args(["--cluster", "create"])
        .args(&nodes)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + START_TIMEOUT;
    for server in &servers {
        while !server
            .cli(&["CLUSTER", "INFO"])
            .contains("cluster_state:ok")
        {
            assert!(
                Instant::now() < deadline,
                "the cluster did not form: {}",
                server.cli(&["CLUSTER", "INFO"])
            );
            sleep(POLL);
        }
    }
    servers
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        let _removed = fs::remove_dir_all(&self.dir);
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `name` on the `PATH`, or in `/usr/bin` where Debian puts it.
fn binary(name: &str) -> PathBuf {
    let in_usr = PathBuf::from("/usr/bin").join(name);
    if in_usr.exists() {
        in_usr
    } else {
        PathBuf::from(name)
    }
}
