//! Throwaway MariaDB servers for integration tests: each [`Server`] owns a temporary
//! directory, the data directory initialized in it and the `mariadbd` process running
//! on it.
//!
//! A server runs the MariaDB installed on the machine (`mariadbd` and
//! `mariadb-install-db` on the `PATH` or in `/usr/sbin`, `/usr/bin`; Debian 12's
//! `mariadb-server` package). It listens on a free port of 127.0.0.1 only (and on a Unix
//! socket in its directory), with the account `root@127.0.0.1` and no password
//! ([`Server::url`]). Without the binaries, [`Server::start`] panics: a test that needs
//! MariaDB never passes by skipping.
//!
//! `mariadbd` refuses to run as root: when the tests run as root, it runs as the
//! `mysql` system user (`--user=mysql`) and the temporary directory belongs to that
//! user; otherwise it runs as the current user.
//!
//! Only std is used: the commands are MariaDB's own (`mariadb-install-db`, `mariadbd`,
//! the `mariadb` client for [`Server::sql`]), `id` and `chown`. The server is this
//! process's child, so [`Server::kill9`] is a SIGKILL of a process whose id is known.
//!
//! Dropping a [`Server`] kills it and removes its directory, also when a test panics.
//! Every wait is bounded.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset of it

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The system user that runs the server when the tests run as root.
const USER: &str = "mysql";
/// How often a wait loop looks again.
const POLL: Duration = Duration::from_millis(20);
/// How long `mariadb-install-db` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a start may take until the server answers.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a clean stop (SIGTERM) may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one statement of [`Server::sql`] may take.
const SQL_TIMEOUT: Duration = Duration::from_secs(60);
/// How many ports a first start tries when the one it picked was taken meanwhile.
const START_ATTEMPTS: u32 = 3;
/// How many lines of the server's log a panic message shows.
const LOG_TAIL_LINES: usize = 40;

/// A MariaDB server of its own, in a temporary directory, for one test or a test
/// binary's tests.
///
/// The data lives in `data` inside [`Server::dir`], which also holds the server's log
/// (`server.err`), its Unix socket (`sock`) and its temporary files (`tmp`). The server
/// can be stopped ([`Server::stop`]), crashed ([`Server::kill9`]) and started again on
/// the same port and data ([`Server::restart`]). Dropping it kills whatever runs and
/// removes the directory.
pub struct Server {
    /// The temporary directory.
    dir: PathBuf,
    /// The TCP port on 127.0.0.1.
    port: u16,
    /// The extra `--name=value` options, given again at every start.
    options: Vec<String>,
    /// The running server, while it runs.
    child: Option<Child>,
}

impl Server {
    /// Starts a server with the default options; see [`Server::start_with`].
    ///
    /// # Panics
    ///
    /// When the MariaDB binaries are missing, or the install or the start fails; the
    /// message tells why, with the command's output or the tail of the server's log.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Initializes a data directory in a fresh temporary directory and starts a server on
    /// it with the extra options `options`, each passed as `--name=value` (for example
    /// `("innodb_flush_log_at_trx_commit", "2")`), after this module's own: listening on
    /// 127.0.0.1 only, a small buffer pool, 600 connections. Returns once the server
    /// answers a query.
    ///
    /// # Panics
    ///
    /// When an option's name is not a plain identifier, when the binaries are missing
    /// (or, as root, the `mysql` user), or when the install or the start fails.
    pub fn start_with(options: &[(&str, &str)]) -> Server {
        for (name, _) in options {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "invalid MariaDB option name {name:?}"
            );
        }
        let mut server = Server {
            dir: make_dir(),
            port: 0,
            options: options
                .iter()
                .map(|(name, value)| format!("--{name}={value}"))
                .collect(),
            child: None,
        };
        // From here on, a panic drops `server`, which kills whatever was started and
        // removes the directory.
        server.install();
        let mut attempt = 1;
        loop {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(failure) if failure.port_taken && attempt < START_ATTEMPTS => attempt += 1,
                Err(failure) => panic!("starting MariaDB failed: {}", failure.message),
            }
        }
    }

    /// The URL of the database `db` on this server, as `root` without a password:
    /// `mysql://root@127.0.0.1:PORT/db`.
    pub fn url_of(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of the server without a database: `mysql://root@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// The TCP port the server listens on; the same across [`Server::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temporary directory, holding `data`, the log `server.err`, the
    /// socket `sock` and the temporary files `tmp`. Removed on drop.
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The server's process id.
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    /// Runs `sql` (one or more statements) as `root` over the Unix socket with the
    /// `mariadb` client, and returns what it printed: one line per row, columns
    /// separated by tabs, no header.
    ///
    /// # Panics
    ///
    /// When the client fails or the statements do; the message has the client's output.
    pub fn sql(&self, sql: &str) -> String {
        let mut command = Command::new(binary("mariadb"));
        command
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["--user=root", "--batch", "--skip-column-names", "--execute"])
            .arg(sql);
        match run(command, SQL_TIMEOUT) {
            Ok(output) => output,
            Err(e) => panic!("mariadb -e {sql:?}: {e}"),
        }
    }

    /// Crashes the server: SIGKILL, so that it neither flushes nor cleans up. When this
    /// returns the process is gone and the port refuses connections; [`Server::restart`]
    /// then runs InnoDB's crash recovery.
    ///
    /// # Panics
    ///
    /// When the server is not running, or its port still answers 10 s later.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("kill9: the server is not running");
        let _ = child.kill();
        let _ = child.wait();
        wait_until(Duration::from_secs(10), || !port_answers(self.port))
            .unwrap_or_else(|()| panic!("kill9: port {} still answers", self.port));
    }

    /// Stops the server cleanly (SIGTERM), killing it when it takes longer than 30 s.
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn stop(&mut self) {
        let child = self.child.take().expect("stop: the server is not running");
        terminate(child);
    }

    /// Starts the server again on the same port and data, after [`Server::kill9`] or
    /// [`Server::stop`]; returns once it answers a query.
    ///
    /// # Panics
    ///
    /// When the server is running, or the start fails.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the server is running");
        if let Err(failure) = self.launch() {
            panic!("restarting MariaDB failed: {}", failure.message);
        }
    }

    /// A primary and its replica on loopback, durable for a failover: the binary log
    /// synced at each commit, and semi-synchronous replication waiting `AFTER_SYNC` (a
    /// commit is answered once the replica has it, and the primary never falls back to
    /// asynchronous replication during a test). The replica runs `read_only`. Returns
    /// once the replica acknowledges and holds the empty database `db`.
    ///
    /// # Panics
    ///
    /// When a server does not start, or the replica does not acknowledge within 30 s.
    pub fn semi_synchronous_pair(db: &str) -> (Server, Server) {
        let durable = [
            ("log-bin", "mariadb-bin"),
            ("sync_binlog", "1"),
            ("binlog_format", "ROW"),
            ("rpl_semi_sync_master_wait_point", "AFTER_SYNC"),
            ("rpl_semi_sync_master_timeout", "600000"),
        ];
        let mut primary_options = durable.to_vec();
        primary_options.extend([("server-id", "1"), ("rpl_semi_sync_master_enabled", "ON")]);
        let primary = Server::start_with(&primary_options);
        let mut replica_options = durable.to_vec();
        replica_options.extend([
            ("server-id", "2"),
            ("rpl_semi_sync_slave_enabled", "ON"),
            ("relay-log", "relay-bin"),
            ("read_only", "ON"),
        ]);
        let replica = Server::start_with(&replica_options);
        replica.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = 'root', \
               MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos; START SLAVE",
            primary.port()
        ));
        wait_until(Duration::from_secs(30), || {
            primary
                .sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
                .contains("\t1")
        })
        .expect("the replica acknowledges within 30 s");
        primary.sql(&format!("CREATE DATABASE {db}"));
        wait_until(Duration::from_secs(30), || {
            replica
                .sql(&format!("SHOW DATABASES LIKE '{db}'"))
                .contains(db)
        })
        .expect("the database reaches the replica within 30 s");
        (primary, replica)
    }

    /// A Galera cluster of `nodes` servers on loopback (the `galera-4` provider),
    /// each with its own group, state-transfer and data ports; the first starts the
    /// cluster, the others join it and receive its data by `rsync`. Returns once every
    /// node is synced.
    ///
    /// # Panics
    ///
    /// When the provider or `rsync` is missing, a node does not start, or the cluster
    /// is not synced within 60 s.
    pub fn galera_cluster(nodes: usize) -> Vec<Server> {
        let provider = [
            "/usr/lib/galera/libgalera_smm.so",
            "/usr/lib/libgalera_smm.so",
        ]
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
        .expect(
            "the Galera provider libgalera_smm.so: install galera-4 \
                 (scripts/test-all.sh does)",
        );
        binary("rsync");
        let group: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
        let members = group
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster: Vec<Server> = Vec::new();
        for (n, port) in group.iter().enumerate() {
            // The first node starts the cluster (an empty address); the others join.
            let address = if n == 0 {
                "gcomm://".to_owned()
            } else {
                format!("gcomm://{members}")
            };
            let node = format!("127.0.0.1:{port}");
            let provider_options = format!(
                "gmcast.listen_addr=tcp://127.0.0.1:{port};ist.recv_addr=127.0.0.1:{}",
                free_port()
            );
            let receive = format!("127.0.0.1:{}", free_port());
            let server = Server::start_with(&[
                ("wsrep_on", "ON"),
                ("wsrep_provider", provider),
                ("wsrep_cluster_name", "idem"),
                ("wsrep_cluster_address", &address),
                ("wsrep_node_address", &node),
                ("wsrep_provider_options", &provider_options),
                ("wsrep_sst_method", "rsync"),
                ("wsrep_sst_receive_address", &receive),
                ("binlog_format", "ROW"),
                ("innodb_autoinc_lock_mode", "2"),
            ]);
            cluster.push(server);
            for member in &cluster {
                wait_until(Duration::from_secs(60), || member.galera_synced())
                    .expect("every node synced within 60 s");
            }
        }
        cluster
    }

    /// True when this Galera node is synced with its cluster.
    fn galera_synced(&self) -> bool {
        self.sql("SHOW STATUS LIKE 'wsrep_local_state_comment'")
            .contains("Synced")
    }

    /// Promotes this replica after its primary died: it applies every event it
    /// received, stops replicating, and takes writes (`read_only` off).
    ///
    /// # Panics
    ///
    /// When the relay log is not applied within 60 s.
    pub fn promote(&self) {
        self.sql("STOP SLAVE IO_THREAD");
        wait_until(Duration::from_secs(60), || {
            self.slave_status("Read_Master_Log_Pos") == self.slave_status("Exec_Master_Log_Pos")
                && self.slave_status("Master_Log_File")
                    == self.slave_status("Relay_Master_Log_File")
        })
        .expect("the replica applies its relay log within 60 s");
        self.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF");
    }

    /// The value of `field` in this replica's `SHOW SLAVE STATUS`.
    fn slave_status(&self, field: &str) -> String {
        let text = self.sql("SHOW SLAVE STATUS\\G");
        text.lines()
            .find_map(|line| {
                let (name, value) = line.trim().split_once(": ")?;
                (name == field).then(|| value.to_owned())
            })
            .unwrap_or_default()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.err")
    }

    /// The server's own directory for temporary files: servers (and installs) that
    /// share one collide on the names of their temporary tables.
    fn tmp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn install(&self) {
        let mut command = Command::new(binary("mariadb-install-db"));
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--tmpdir={}", self.tmp_dir().display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ]);
        if running_as_root() {
            command.arg(format!("--user={USER}"));
        }
        if let Err(e) = run(command, INSTALL_TIMEOUT) {
            panic!("mariadb-install-db failed: {e}");
        }
    }

    /// Starts `mariadbd` on the port and waits until it answers; on failure, the server
    /// is killed and the message has the log's tail.
    fn launch(&mut self) -> Result<(), StartFailure> {
        let _ = fs::remove_file(self.socket());
        let mut command = Command::new(binary("mariadbd"));
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--tmpdir={}", self.tmp_dir().display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!("--log-error={}", self.log().display()))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                "--max-connections=600",
            ])
            .args(&self.options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if running_as_root() {
            command.arg(format!("--user={USER}"));
        }
        let log_start = fs::metadata(self.log()).map_or(0, |m| m.len());
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting mariadbd: {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("just started");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                let log = self.log_tail(log_start);
                return Err(StartFailure {
                    port_taken: log.contains("Address already in use"),
                    message: format!("mariadbd exited with {status}; its log:\n{log}"),
                });
            }
            if self.socket().exists() && port_answers(self.port) && self.answers() {
                return Ok(());
            }
            if Instant::now() > deadline {
                if let Some(child) = self.child.take() {
                    kill(child);
                }
                return Err(StartFailure {
                    port_taken: false,
                    message: format!(
                        "mariadbd did not answer within {START_TIMEOUT:?}; its log:\n{}",
                        self.log_tail(log_start)
                    ),
                });
            }
            sleep(POLL);
        }
    }

    /// True when the server answers `SELECT 1` on its socket.
    fn answers(&self) -> bool {
        let mut command = Command::new(binary("mariadb"));
        command
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["--user=root", "--execute", "SELECT 1"]);
        run(command, Duration::from_secs(10)).is_ok()
    }

    /// The last lines of the server's log written since byte `from`.
    fn log_tail(&self, from: u64) -> String {
        let text = fs::read(self.log()).unwrap_or_default();
        let text =
            String::from_utf8_lossy(&text[usize::try_from(from).unwrap_or(0).min(text.len())..])
                .into_owned();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            kill(child);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

struct StartFailure {
    port_taken: bool,
    message: String,
}

/// SIGKILL, then the wait that reaps it.
fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGTERM, a bounded wait, then SIGKILL.
fn terminate(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        sleep(POLL);
    }
    kill(child);
}

/// The path of a MariaDB binary: on the `PATH`, or in `/usr/sbin` or `/usr/bin`.
fn binary(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")]);
    dirs.into_iter()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found on PATH, /usr/sbin or /usr/bin: install MariaDB \
                 (apt-get install mariadb-server; scripts/test-all.sh does)"
            )
        })
}

/// Runs `command` to its end within `timeout`: its standard output, or what went wrong
/// with both outputs.
fn run(mut command: Command, timeout: Duration) -> Result<String, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{command:?}: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => sleep(POLL),
            _ => {
                kill(child);
                return Err(format!("{command:?} took longer than {timeout:?}"));
            }
        }
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if status.success() {
        Ok(out)
    } else {
        Err(format!("{command:?} exited with {status}:\n{out}{err}"))
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A fresh temporary directory, owned by the server's user when running as root.
fn make_dir() -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "idem-maria-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(dir.join("tmp"))
        .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    if running_as_root() {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{USER}:{USER}"))
            .arg(&dir)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "chown {USER} {}: is there a `{USER}` user? (the mariadb-server package makes it)",
            dir.display()
        );
    }
    dir
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a free port");
    listener.local_addr().expect("its address").port()
}

fn port_answers(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
}

/// Waits until `done` holds, at most `timeout`.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return Ok(());
        }
        sleep(POLL);
    }
    if done() { Ok(()) } else { Err(()) }
}
