//! Helpers shared by the integration tests: ids, a seeded PRNG, child processes.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::collections::BTreeMap;

pub mod disk;
pub mod machines;
pub mod workload;

use idem_core::{Fingerprint, RecordId};
use idem_store::Store;
use idem_store::redb::{ReadableTable, TableDefinition, WriteTransaction};

/// A fixed base time, so records never expire by accident during a test.
pub const T0: u64 = 1_700_000_000_000;

pub fn id(tenant: &str, operation: &str, key: &str) -> RecordId {
    RecordId::new(tenant, operation, key).unwrap()
}

pub fn fp(text: &str) -> Fingerprint {
    Fingerprint::of_bytes(text.as_bytes())
}

/// splitmix64: small, seeded, good enough to pick delays and keys.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The seed of a randomized test: `IDEM_SEED` when set, else from the clock. Printed, so
/// a failure can be repeated.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("IDEM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {seed} (rerun with IDEM_SEED={seed})");
    seed
}

/// Starts this test binary again, running only the ignored test `entry` of `module`
/// (its `module_path!()`), with `env`.
/// The child's report lines are those starting with `@@`; its stdin is a pipe, for
/// [`tell`].
pub fn spawn_child(module: &str, entry: &str, env: &[(&str, String)]) -> Child {
    // The test's name in its binary: its module path without the binary's own name.
    let name = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{entry}"),
        None => entry.to_owned(),
    };
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().unwrap()
}

/// Forwards the child's complete `@@` report lines (without the marker) to a channel.
pub fn reports(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                // A line cut by a kill has no newline: it was never fully reported.
                Ok(_) if !line.ends_with('\n') => return,
                Ok(_) => {
                    if let Some(at) = line.find("@@") {
                        let report = line[at + 2..].trim_end().to_string();
                        if sender.send(report).is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    receiver
}

/// Waits for a report starting with `prefix`, failing after `timeout`.
pub fn expect_report(receiver: &mpsc::Receiver<String>, prefix: &str, timeout: Duration) -> String {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match receiver.recv_timeout(left) {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(_) => {}
            Err(e) => panic!("no report {prefix:?} from the child: {e}"),
        }
    }
}

/// Sends a line to a child's stdin, which it reads with [`told`].
pub fn tell(child: &mut Child, text: &str) {
    use std::io::Write;
    let stdin = child
        .stdin
        .as_mut()
        .expect("a child of spawn_child has a piped stdin");
    writeln!(stdin, "{text}").unwrap();
    stdin.flush().unwrap();
}

/// In a child: waits for a line from the parent ([`tell`]), at most `timeout`; `None`
/// when none came (the parent also closes the pipe when it drops the child, or dies).
pub fn told(timeout: Duration) -> Option<String> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = sender.send(line.trim_end().to_string());
        }
    });
    receiver.recv_timeout(timeout).ok()
}

/// Prints a report line for the parent: the marker, the text, a newline, flushed.
pub fn report(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@{text}").unwrap();
    out.flush().unwrap();
}

/// The business table of the credit tests: credits per account.
pub const ACCOUNTS: TableDefinition<&str, u64> = TableDefinition::new("test.accounts");
/// The running total of every credit, under the key "credits".
pub const TOTAL: TableDefinition<&str, u64> = TableDefinition::new("test.total");

/// Credits `account` once and adds one to the running total; returns the account's
/// credits after this one. The writes happen in the caller's transaction.
pub fn add_credit(txn: &WriteTransaction, account: &str) -> Result<u64, String> {
    let mut accounts = txn.open_table(ACCOUNTS).map_err(|e| e.to_string())?;
    let credits = accounts
        .get(account)
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value())
        + 1;
    accounts
        .insert(account, credits)
        .map_err(|e| e.to_string())?;
    let mut total = txn.open_table(TOTAL).map_err(|e| e.to_string())?;
    let sum = total
        .get("credits")
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value());
    total
        .insert("credits", sum + 1)
        .map_err(|e| e.to_string())?;
    Ok(credits)
}

/// Credits per account and the running total, as committed.
pub fn accounts(store: &Store) -> (BTreeMap<String, u64>, u64) {
    store
        .read(|txn| {
            let accounts = match txn.open_table(ACCOUNTS) {
                Ok(table) => table
                    .iter()
                    .unwrap()
                    .map(|e| {
                        let (k, v) = e.unwrap();
                        (k.value().to_string(), v.value())
                    })
                    .collect(),
                Err(_) => BTreeMap::new(),
            };
            let total = match txn.open_table(TOTAL) {
                Ok(table) => table.get("credits").unwrap().map_or(0, |v| v.value()),
                Err(_) => 0,
            };
            (accounts, total)
        })
        .unwrap()
}
