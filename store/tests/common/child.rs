//! Child processes of a test binary: a test starts its own binary again to run one
//! ignored entry as a child it may kill, and they talk over stdin and `@@` report lines.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
