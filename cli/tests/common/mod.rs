//! Runs the built `idem` binary against a store file in a fresh temporary directory.
#![allow(dead_code)] // each test binary uses its own part of these helpers

pub(crate) mod fleet;
pub(crate) mod http;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// 2025-03-01T12:00:00Z in ms.
pub(crate) const T0: u64 = 1_740_830_400_000;
/// SHA-256 of "abc" (FIPS 180-2).
pub(crate) const SHA_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
/// SHA-256 of no bytes.
pub(crate) const SHA_EMPTY: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A temporary directory with a store path in it.
pub(crate) struct Idem {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) db: PathBuf,
}

/// What one run printed and how it exited.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Idem {
    pub(crate) fn new() -> Idem {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = dir.path().join("idem.redb");
        Idem { dir, db }
    }

    /// `idem --db <db> ARGS...`, with `IDEM_DB` and `IDEM_DB_PASSWORD_FILE` removed from
    /// the environment.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
        command
            .env_remove("IDEM_DB")
            .env_remove("IDEM_DB_PASSWORD_FILE")
            .arg("--db")
            .arg(&self.db)
            .args(args);
        command.current_dir(self.dir.path());
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Run {
        self.run_with(self.command(args), b"")
    }

    pub(crate) fn run_stdin(&self, args: &[&str], input: &[u8]) -> Run {
        self.run_with(self.command(args), input)
    }

    pub(crate) fn run_with(&self, mut command: Command, input: &[u8]) -> Run {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn idem");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
        Run::of(child.wait_with_output().expect("wait for idem"))
    }

    /// `--now MS` followed by ARGS.
    pub(crate) fn at(&self, now: u64, args: &[&str]) -> Run {
        let now = now.to_string();
        let mut all = vec!["--json", "--now", now.as_str()];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// Writes `bytes` to a file in the temporary directory; returns its path.
    pub(crate) fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.dir.path().join(name);
        fs::write(&path, bytes).expect("write file");
        path.to_string_lossy().into_owned()
    }

    pub(crate) fn db_bytes(&self) -> Vec<u8> {
        fs::read(&self.db).expect("read db")
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Run {
    pub(crate) fn of(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Asserts the exit status, showing everything on failure.
    #[track_caller]
    pub(crate) fn code(&self, expected: i32) -> &Run {
        assert_eq!(
            self.code, expected,
            "exit status; stdout: {}; stderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    /// The single JSON line on stdout.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        let lines = self.json_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one JSON line, got: {}",
            self.stdout
        );
        lines.into_iter().next().unwrap_or(Value::Null)
    }

    #[track_caller]
    pub(crate) fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
            })
            .collect()
    }

    /// Asserts stderr is exactly one line `idem: ...` that contains every one of `words`.
    #[track_caller]
    pub(crate) fn one_error_line(&self, words: &[&str]) -> &Run {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one stderr line, got: {:?}",
            self.stderr
        );
        assert!(lines[0].starts_with("idem: "), "stderr: {:?}", self.stderr);
        for word in words {
            assert!(lines[0].contains(word), "{word:?} not in {:?}", lines[0]);
        }
        self
    }
}

/// Claims `t o k` at `now` and returns the generation.
#[track_caller]
pub(crate) fn claim(idem: &Idem, now: u64, key: &str) -> u64 {
    let run = idem.at(now, &["begin", "t", "o", key]);
    run.code(0);
    let json = run.json();
    assert_eq!(json["decision"], "claimed", "{json}");
    json["generation"].as_u64().expect("generation")
}

/// Runs `sql` on the PostgreSQL database at `url`; true when it ran.
pub(crate) fn run_sql(url: &str, sql: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.batch_execute(sql).await.is_ok()
    })
}
