//! Throwaway PostgreSQL servers for integration tests: each [`Server`] owns a temporary
//! directory, the cluster initialized in it and the server processes running on it.
//!
//! A server runs the PostgreSQL installed on the machine: the binaries of the highest
//! version under `/usr/lib/postgresql/*/bin`, or those in the directory named by the
//! `IDEM_PG_BIN` environment variable. It listens on a free port of 127.0.0.1 (and on a
//! Unix socket in its directory) and trusts every local connection, as the superuser
//! `postgres` ([`Server::url`]). Without the binaries, [`Server::start`] panics: a test that
//! needs PostgreSQL never passes by skipping.
//!
//! initdb refuses to run as root. When the tests run as root, every command that touches
//! the cluster (initdb, pg_ctl, and so the server) runs as the `postgres` system user
//! through `runuser -u postgres --`, and the temporary directory belongs to that user;
//! otherwise they run as the current user.
//!
//! Only std is used: the commands are the PostgreSQL binaries, `id`, `chown`, `runuser` and
//! the shell's `kill`, and the server's processes are found in `/proc`.
//!
//! Dropping a [`Server`] stops it at once (`pg_ctl stop -m immediate`) and removes its
//! directory. Every wait is bounded.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset of it

use std::fs;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The system user that runs the server when the tests run as root; also the superuser
/// that initdb creates in every cluster.
const USER: &str = "postgres";
/// The binaries a PostgreSQL installation must have to be used.
const TOOLS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];
/// How often a wait loop looks again.
const POLL: Duration = Duration::from_millis(20);
/// How long [`Server::kill9`] waits for each step: the postmaster's death, its children's,
/// the port's closing.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How long initdb may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `pg_ctl start` and `pg_ctl stop -m fast` may take: pg_ctl's own limit (`-t 30`)
/// and a margin.
const PG_CTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `pg_ctl stop -m immediate` may take when a server is dropped: pg_ctl's own
/// limit (`-t 10`) and a margin.
const DROP_STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How many ports a first start tries when the one it picked was taken in the meantime.
const START_ATTEMPTS: u32 = 3;
/// How many lines of the server's log a panic message shows.
const LOG_TAIL_LINES: usize = 40;

/// A PostgreSQL server of its own, in a temporary directory, for one test.
///
/// The cluster lives in [`Server::data_dir`], inside [`Server::dir`], which also holds the
/// server's log (`log`) and its Unix socket. The server can be stopped ([`Server::stop`]),
/// crashed ([`Server::kill9`]) and started again on the same port and data
/// ([`Server::restart`]). Dropping it stops whatever runs and removes the directory.
pub struct Server {
    /// The temporary directory, canonical (the `/proc` look-ups compare paths).
    dir: PathBuf,
    /// The TCP port on 127.0.0.1.
    port: u16,
    /// The extra `-c name=value` settings, given again at every start.
    settings: Vec<(String, String)>,
    /// Whether this handle started the server and has not stopped or killed it since.
    running: bool,
    /// The superuser's password, when connections over TCP must give one.
    password: Option<String>,
}

impl Server {
    /// Starts a server with the default settings; see [`Server::start_with`].
    ///
    /// # Panics
    ///
    /// When the PostgreSQL binaries are missing, or initdb or the start fails; the message
    /// tells why, with the command's output or the tail of the server's log.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Initializes a cluster in a fresh temporary directory and starts a server on it,
    /// with the extra server settings `settings`, each passed as `-c name=value` (for
    /// example `("synchronous_commit", "off")`), after this module's own: listening on
    /// 127.0.0.1 only, `fsync=on`, `max_connections=300`. Returns once the server accepts
    /// connections.
    ///
    /// # Panics
    ///
    /// When a setting's name is not a plain identifier, when the PostgreSQL binaries are
    /// missing (or, as root, the `postgres` user), or when initdb or the start fails; the
    /// message tells why, with the command's output or the tail of the server's log.
    pub fn start_with(settings: &[(&str, &str)]) -> Server {
        Server::start_as(settings, None)
    }

    /// Starts a server whose connections over TCP must give `password` (SCRAM), for the
    /// superuser `postgres`; [`Server::url`] carries it.
    ///
    /// # Panics
    ///
    /// As [`Server::start_with`].
    pub fn start_with_password(password: &str) -> Server {
        assert!(
            password.chars().all(|c| c.is_ascii_alphanumeric()),
            "a test password is letters and digits"
        );
        Server::start_as(&[], Some(password))
    }

    fn start_as(settings: &[(&str, &str)], password: Option<&str>) -> Server {
        for (name, _) in settings {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
                "invalid PostgreSQL setting name {name:?}"
            );
        }
        binaries();
        if running_as_root() {
            require_server_user();
        }
        let mut server = Server {
            dir: make_dir(),
            port: 0,
            settings: settings
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            running: false,
            password: password.map(str::to_owned),
        };
        // From here on, a panic drops `server`, which stops whatever was started and
        // removes the directory.
        server.initdb();
        let mut attempt = 1;
        loop {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                // Another process took the port between `free_port` and the start.
                Err(failure) if failure.port_taken && attempt < START_ATTEMPTS => attempt += 1,
                Err(failure) => panic!("starting PostgreSQL failed: {}", failure.message),
            }
        }
    }

    /// A streaming standby of `primary`, named `name` (its `application_name`, for the
    /// primary's `synchronous_standby_names`): a base backup of the running primary
    /// (`pg_basebackup -R`, which leaves `standby.signal`) in a fresh temporary
    /// directory, started on a port of its own with the primary's settings. Returns once
    /// it accepts connections.
    ///
    /// # Panics
    ///
    /// When the backup or the start fails; the message tells why.
    pub fn standby_of(primary: &Server, name: &str) -> Server {
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "invalid standby name {name:?}"
        );
        // A promoted standby must not wait for a standby of its own.
        let mut settings: Vec<(String, String)> = primary
            .settings
            .iter()
            .filter(|(name, _)| name != "synchronous_standby_names")
            .cloned()
            .collect();
        settings.push((
            "primary_conninfo".to_owned(),
            format!(
                "host=127.0.0.1 port={} user={USER} application_name={name}",
                primary.port
            ),
        ));
        let mut standby = Server {
            dir: make_dir(),
            port: 0,
            settings,
            running: false,
            password: None,
        };
        let mut command = standby.server_command("pg_basebackup");
        command
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                USER,
            ])
            .arg("-D")
            .arg(standby.data_dir())
            .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"]);
        if let Err(e) = standby.run(command, INITDB_TIMEOUT) {
            panic!("pg_basebackup failed: {e}");
        }
        standby.port = free_port();
        if let Err(failure) = standby.launch() {
            panic!("starting the standby failed: {}", failure.message);
        }
        standby
    }

    /// Promotes a standby to a primary (`pg_ctl promote`), waiting until it is one.
    ///
    /// # Panics
    ///
    /// When the promotion fails.
    pub fn promote(&self) {
        let mut command = self.server_command("pg_ctl");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "30", "promote"]);
        if let Err(e) = self.run(command, PG_CTL_TIMEOUT) {
            panic!("pg_ctl promote failed: {e}");
        }
    }

    /// The URL to connect to the server over TCP, as the superuser `postgres`, to the
    /// database `postgres`: `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => {
                format!(
                    "postgres://{USER}:{password}@127.0.0.1:{}/postgres",
                    self.port
                )
            }
            None => format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port),
        }
    }

    /// The TCP port the server listens on, on 127.0.0.1. It stays the same across
    /// [`Server::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory: `data` inside [`Server::dir`].
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's temporary directory: `/tmp/idem-pg-<pid>-<counter>-<nanos>`, holding the
    /// data directory, the server's log (`log`) and its Unix socket. Removed on drop.
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The process id of the postmaster, the server's main process: the first line of
    /// `postmaster.pid` in the data directory.
    ///
    /// # Panics
    ///
    /// When that file is missing or unreadable, as it is while the server is not running.
    pub fn postmaster_pid(&self) -> u32 {
        let path = self.data_dir().join("postmaster.pid");
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e} (is the server running?)", path.display()));
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{} does not start with a process id: {text:?}",
                    path.display()
                )
            })
    }

    /// Crashes the server: kills the postmaster with SIGKILL, so that it neither
    /// checkpoints nor cleans up, then kills what it leaves behind. When this returns, no
    /// process of the server is left, the port refuses connections and the data directory
    /// is as the crash left it; [`Server::restart`] then performs crash recovery.
    ///
    /// # Panics
    ///
    /// When the server is not running, or a step does not complete within 10 s.
    pub fn kill9(&mut self) {
        assert!(self.running, "kill9: the server is not running");
        let data_dir = self.data_dir();

        // 1. The postmaster's process id, from postmaster.pid. A process of this server
        //    has the data directory as its working directory, which rules out an
        //    unrelated process that got a stale id.
        let pid = self.postmaster_pid();
        assert!(
            working_dir_is(pid, &data_dir),
            "kill9: process {pid} of {} is not this server's postmaster",
            data_dir.join("postmaster.pid").display()
        );

        // 2. SIGKILL the postmaster (`kill -9`; root may signal the `postgres` user's
        //    processes, and a user its own, so no runuser is needed).
        self.running = false;
        if let Err(e) = send_kill(pid) {
            panic!("kill9: kill -9 {pid}: {e}");
        }

        // 3. Wait until it is gone: `kill -0` fails, or it is a zombie that no one has
        //    reaped yet (its parent, pg_ctl, exited at the start, and the process that
        //    adopted it may be slow to reap it, or never do).
        if !wait_until(KILL_WAIT, || !is_alive(pid)) {
            panic!("kill9: the postmaster {pid} is still alive {KILL_WAIT:?} after kill -9");
        }

        // 4. Kill the leftover children of the postmaster (checkpointer, background writer,
        //    WAL writer, backends...). They survive it for a moment, each until it notices
        //    its parent's death, and could go on writing after the "crash"; and the
        //    restarted server refuses to start while one still holds the old shared
        //    memory. Their parent gone, they are found by their working directory, the
        //    data directory; SIGKILLed, and waited for until none is left.
        if let Err(left) = kill_processes_in(&data_dir, KILL_WAIT) {
            panic!(
                "kill9: processes of the server still alive {KILL_WAIT:?} after kill -9: {left:?}"
            );
        }

        // 5. Wait until the port refuses connections: the listening socket died with the
        //    last process that held it.
        let port = self.port;
        if !wait_until(KILL_WAIT, || !accepts_connections(port)) {
            panic!("kill9: port {port} still accepts connections {KILL_WAIT:?} after the kill");
        }

        // 6. Remove the lock files the dead server left: postmaster.pid, if still present,
        //    and its Unix socket's lock file. PostgreSQL ignores a lock file whose process
        //    is dead, but takes one whose id another process got meanwhile for a running
        //    server, and would refuse to start.
        remove_if_present(&data_dir.join("postmaster.pid"));
        remove_if_present(&self.dir.join(format!(".s.PGSQL.{port}.lock")));
    }

    /// Starts the server again, on the same port, data directory and settings, after
    /// [`Server::stop`] or [`Server::kill9`]. After a kill, PostgreSQL first performs crash
    /// recovery from its WAL; this returns once the server accepts connections.
    ///
    /// # Panics
    ///
    /// When the server is running, or the start fails (the message has the tail of the
    /// server's log).
    pub fn restart(&mut self) {
        assert!(
            !self.running,
            "restart: the server is running; stop() or kill9() it first"
        );
        if let Err(failure) = self.launch() {
            panic!("restarting PostgreSQL failed: {}", failure.message);
        }
    }

    /// Stops the server cleanly: `pg_ctl stop -m fast`, which ends the sessions, writes a
    /// shutdown checkpoint and waits (at most 30 s) for the server to exit.
    ///
    /// # Panics
    ///
    /// When the server is not running, or pg_ctl fails (the message has the tail of the
    /// server's log).
    pub fn stop(&mut self) {
        assert!(self.running, "stop: the server is not running");
        let mut command = self.server_command("pg_ctl");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w", "-t", "30", "stop"]);
        if let Err(e) = self.run(command, PG_CTL_TIMEOUT) {
            panic!("stopping PostgreSQL failed: {e}{}", self.log_tail());
        }
        self.running = false;
    }

    /// Initializes the cluster in the data directory: trust authentication (or, with a
    /// password, SCRAM over TCP and trust on the Unix socket), superuser `postgres`,
    /// UTF-8, the C locale (the same sort order on every machine, and no
    /// dependence on the locales installed), no fsync of the new files.
    fn initdb(&self) {
        let mut command = self.server_command("initdb");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", USER, "-E", "UTF8", "--locale=C"])
            .arg("--no-sync");
        match &self.password {
            None => {
                command.arg("--auth=trust");
            }
            Some(password) => {
                let file = self.dir.join("password");
                fs::write(&file, password).expect("the password file");
                if running_as_root() {
                    let chown = Command::new("chown").arg(USER).arg(&file).status();
                    assert!(
                        chown.is_ok_and(|s| s.success()),
                        "chown of the password file"
                    );
                }
                command
                    .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
                    .arg(format!("--pwfile={}", file.display()));
            }
        }
        if let Err(e) = self.run(command, INITDB_TIMEOUT) {
            panic!("initdb failed: {e}");
        }
    }

    /// Starts the server with pg_ctl on `self.port`, waiting until it accepts connections.
    /// On failure, stops whatever may still run (pg_ctl gives up waiting after 30 s, but
    /// leaves a slow server running).
    fn launch(&mut self) -> Result<(), LaunchFailure> {
        let log = self.log_path();
        let log_start = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        // pg_ctl hands these to the server through /bin/sh: every value is quoted.
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} \
             -c fsync=on -c max_connections=300",
            self.port,
            shell_quote(&self.dir.to_string_lossy())
        );
        for (name, value) in &self.settings {
            options.push_str(" -c ");
            options.push_str(&shell_quote(&format!("{name}={value}")));
        }
        let mut command = self.server_command("pg_ctl");
        command
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "30", "start", "-o"])
            .arg(options);
        match self.run(command, PG_CTL_TIMEOUT) {
            Ok(_) => {
                self.running = true;
                Ok(())
            }
            Err(e) => {
                let this_start = read_from(&log, log_start);
                let port_taken = this_start.contains("Address already in use");
                let message = format!("{e}{}", self.log_tail());
                self.force_stop();
                Err(LaunchFailure {
                    message,
                    port_taken,
                })
            }
        }
    }

    /// Stops whatever of the server may run, never panicking: `pg_ctl stop -m immediate`
    /// when the data directory has a postmaster.pid, then SIGKILL for any process left in
    /// the data directory.
    fn force_stop(&mut self) {
        let data_dir = self.data_dir();
        if data_dir.join("postmaster.pid").exists() {
            let mut command = self.server_command("pg_ctl");
            command
                .arg("-D")
                .arg(&data_dir)
                .args(["-m", "immediate", "-w", "-t", "10", "stop"]);
            let _ = self.run(command, DROP_STOP_TIMEOUT);
        }
        let _ = kill_processes_in(&data_dir, KILL_WAIT);
        self.running = false;
    }

    /// A command that runs the PostgreSQL binary `tool` as the server's user (through
    /// `runuser -u postgres --` when the tests run as root), in the server's directory.
    fn server_command(&self, tool: &str) -> Command {
        let program = binaries().join(tool);
        let mut command = if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", USER, "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        // The test's own working directory may be closed to the `postgres` user.
        command.current_dir(&self.dir);
        command
    }

    /// Runs `command`, at most `timeout` (then kills it), with its standard output and
    /// error together in `command.out` in the server's directory (a file, not a pipe: a
    /// server that a command leaves running cannot hold it open and stall the read).
    /// Returns that output, or on failure a message with the command and its output.
    fn run(&self, mut command: Command, timeout: Duration) -> Result<String, String> {
        let described = format!("{command:?}");
        let out_path = self.dir.join("command.out");
        let out = fs::File::create(&out_path)
            .and_then(|file| Ok((file.try_clone()?, file)))
            .map_err(|e| format!("{described}: creating {}: {e}", out_path.display()))?;
        command.stdin(Stdio::null()).stdout(out.0).stderr(out.1);
        let mut child = command
            .spawn()
            .map_err(|e| format!("{described}: could not run it: {e}"))?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!("killed after {timeout:?}"));
                }
                Ok(None) => sleep(POLL),
                Err(e) => break Err(format!("waiting for it: {e}")),
            }
        };
        let output = read_from(&out_path, 0);
        match status {
            Ok(status) if status.success() => Ok(output),
            Ok(status) => Err(format!("{described} failed ({status}):\n{output}")),
            Err(e) => Err(format!("{described}: {e}:\n{output}")),
        }
    }

    /// The server's log file, appended to by every start.
    fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The last lines of the server's log, for a panic message.
    fn log_tail(&self) -> String {
        let log = self.log_path();
        let text = read_from(&log, 0);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        format!("\n--- last lines of {}:\n{tail}", log.display())
    }
}

impl Drop for Server {
    /// Stops the server at once (`pg_ctl stop -m immediate`, then SIGKILL for any process
    /// left) and removes its directory, ignoring every error.
    fn drop(&mut self) {
        self.force_stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Why a start failed.
struct LaunchFailure {
    /// What happened, with pg_ctl's output and the tail of the server's log.
    message: String,
    /// Whether the server could not listen because another process had the port.
    port_taken: bool,
}

/// The directory of the PostgreSQL binaries, found once: `IDEM_PG_BIN` when set, else the
/// highest version under `/usr/lib/postgresql` that has initdb, pg_ctl and postgres.
fn binaries() -> &'static Path {
    static BINARIES: OnceLock<PathBuf> = OnceLock::new();
    BINARIES.get_or_init(find_binaries)
}

fn find_binaries() -> PathBuf {
    let complete = |dir: &Path| TOOLS.iter().all(|tool| dir.join(tool).is_file());
    if let Some(dir) = std::env::var_os("IDEM_PG_BIN").filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            complete(&dir),
            "IDEM_PG_BIN={} lacks one of {TOOLS:?}",
            dir.display()
        );
        return dir;
    }
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for entry in fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name();
        // A version directory: "15", or "9.6" before PostgreSQL 10.
        let Some(version) = name.to_str().and_then(|name| {
            name.split('.')
                .map(|part| part.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()
        }) else {
            continue;
        };
        let bin = entry.path().join("bin");
        if complete(&bin) && best.as_ref().is_none_or(|(highest, _)| version > *highest) {
            best = Some((version, bin));
        }
    }
    match best {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin \
             (the test command installs the postgresql package)"
        ),
    }
}

/// Whether the tests run as root (effective user id 0, from `id -u`), found once.
fn running_as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| match Command::new("id").arg("-u").output() {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).trim() == "0"
        }
        Ok(output) => panic!(
            "`id -u` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => panic!("could not run `id -u`: {e}"),
    })
}

/// Panics unless the `postgres` system user, which runs the server for root, exists.
fn require_server_user() {
    let exists = Command::new("id")
        .arg(USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        exists,
        "the tests run as root, and initdb refuses to: the server runs as the `{USER}` \
         user, which does not exist (create it with \
         `useradd --system --home /var/lib/postgresql --shell /bin/bash {USER}`)"
    );
}

/// Creates a fresh directory `/tmp/idem-pg-<pid>-<counter>-<nanos>`, mode 0700, owned by
/// the `postgres` user when the tests run as root; returns its canonical path.
fn make_dir() -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    for _ in 0..100 {
        let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let path = PathBuf::from(format!(
            "/tmp/idem-pg-{}-{counter}-{nanos}",
            std::process::id()
        ));
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("creating {}: {e}", path.display()),
        }
        let path = fs::canonicalize(&path).unwrap_or(path);
        if running_as_root() {
            let chown = Command::new("chown")
                .args(["-R", &format!("{USER}:{USER}")])
                .arg(&path)
                .output();
            match chown {
                Ok(output) if output.status.success() => {}
                failed => {
                    let _ = fs::remove_dir_all(&path);
                    panic!(
                        "chown -R {USER}:{USER} {}: {}",
                        path.display(),
                        match failed {
                            Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
                            Err(e) => e.to_string(),
                        }
                    );
                }
            }
        }
        return path;
    }
    panic!("no fresh directory /tmp/idem-pg-* after 100 tries");
}

/// A TCP port of 127.0.0.1 that was free a moment ago: the kernel's pick for a listener
/// bound to port 0, which is closed again.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|e| panic!("finding a free port on 127.0.0.1: {e}"))
}

/// Whether something accepts TCP connections on `port` of 127.0.0.1 (a connection that
/// times out counts as accepted: a listener with a full backlog is still there).
fn accepts_connections(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match TcpStream::connect_timeout(&address, Duration::from_millis(200)) {
        Ok(_) => true,
        Err(e) => e.kind() == ErrorKind::TimedOut,
    }
}

/// Sends SIGKILL to `pid` with the shell's `kill -9`.
fn send_kill(pid: u32) -> Result<(), String> {
    let output = Command::new("sh")
        .args(["-c", "kill -9 \"$1\"", "sh", &pid.to_string()])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// Whether process `pid` lives: `kill -0` succeeds on it, and it is not a zombie (a dead
/// process that its parent has not reaped yet).
fn is_alive(pid: u32) -> bool {
    let signalable = Command::new("sh")
        .args(["-c", "kill -0 \"$1\" 2>/dev/null", "sh", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    signalable && !is_zombie(pid)
}

/// Whether process `pid` is a zombie: state `Z` in `/proc/<pid>/stat` (the field after the
/// command name, which is in parentheses and may itself hold spaces and parentheses).
fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Whether the working directory of process `pid` is `dir` (false when it cannot be read:
/// the process is gone, a zombie, or another user's).
fn working_dir_is(pid: u32, dir: &Path) -> bool {
    fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir)
}

/// The processes whose working directory is `dir`: every process of a PostgreSQL server
/// works in its data directory.
fn processes_in(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|&pid| working_dir_is(pid, dir))
        .collect();
    pids.sort_unstable();
    pids
}

/// SIGKILLs every process working in `dir` until none is left, at most `timeout`; on
/// timeout, returns those still there.
fn kill_processes_in(dir: &Path, timeout: Duration) -> Result<(), Vec<u32>> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = processes_in(dir);
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(pids);
        }
        for &pid in &pids {
            // It may have exited since: a failure here is no news.
            let _ = send_kill(pid);
        }
        sleep(POLL);
    }
}

/// Polls `done` every 20 ms until it holds, at most `timeout`; whether it held.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(POLL);
    }
}

/// Removes the file `path`; one already gone is fine, and so, in this cleanup, is any
/// other error (the start that follows reports what matters).
fn remove_if_present(path: &Path) {
    let _ = fs::remove_file(path);
}

/// The text of the file `path` from byte `offset` on (lossy UTF-8), empty when unreadable.
fn read_from(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = fs::File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `text` quoted for /bin/sh: in single quotes, each single quote written `'\''`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
