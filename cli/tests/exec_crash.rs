//! `idem exec` killed at random moments, then `idem reconcile`: nothing is lost and no
//! effect happens twice.
//!
//! Thirty keys, each run by `idem exec` around a program that appends its key to an
//! effect log, then prints a receipt. Most of the execs are killed with SIGKILL at a
//! random moment, together with their program (the whole process group: a power cut of
//! the terminal), before, during or after the effect. Then `idem reconcile` asks a
//! checker that reads the effect log, and every key is retried with the same command
//! line. Afterwards: no key is unknown whose effect the log shows, every effect is in
//! the log exactly once, and every run that was acknowledged replays byte for byte.
//!
//! `IDEM_SEED=<n>` repeats a run; the seed is printed.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::Idem;

const KEYS: usize = 30;
const KILLED: usize = 24;

/// splitmix64, seeded.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// The program of one key: wait, append the key to the effect log, wait, print the
/// receipt. The waits are its arguments, so each key's command line is its own.
const PROGRAM: &str =
    r#"sleep "$1"; echo "$2" >> effects.log; sleep "$3"; printf 'receipt %s' "$2""#;

/// The checker: the effect log says whether a key's effect happened.
const CHECKER: &str = "#!/bin/sh
if grep -qx \"$IDEM_KEY\" effects.log 2>/dev/null; then printf 'receipt %s' \"$IDEM_KEY\"; exit 0; fi
exit 11
";

fn exec_args(key: &str, before: &str, after: &str) -> Vec<String> {
    [
        "exec", "t", "pay", key, "--lease", "1s", "--", "sh", "-c", PROGRAM, "sh",
    ]
    .into_iter()
    .map(String::from)
    .chain([before.to_string(), key.to_string(), after.to_string()])
    .collect()
}

fn spawn(idem: &Idem, args: &[String]) -> Child {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = idem.command(&args);
    // Its own process group, so a kill takes the program with it.
    command
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.spawn().expect("spawn idem exec")
}

/// SIGKILL to the exec and its program, unless the exec already ended. A leader that
/// ends after the check is not reaped yet, so its group is still there to kill.
fn kill_group(child: &mut Child) {
    if child.try_wait().expect("try_wait").is_some() {
        return;
    }
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status()
        .expect("kill");
}

fn effects(idem: &Idem) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for line in std::fs::read_to_string(idem.path("effects.log"))
        .unwrap_or_default()
        .lines()
    {
        *count.entry(line.to_string()).or_insert(0) += 1;
    }
    count
}

#[test]
fn killed_execs_are_reconciled_and_no_effect_happens_twice() {
    let seed = std::env::var("IDEM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    eprintln!("exec crash test: seed {seed} (rerun with IDEM_SEED={seed})");
    let mut rng = Rng(seed);
    let idem = Idem::new();
    // The first exec creates the store before the others race for it.
    let store = idem.run(&["exec", "t", "pay", "setup", "--", "true"]);
    store.code(0);

    let mut runs = Vec::new();
    for n in 0..KEYS {
        let key = format!("k{n:02}");
        let (before, after) = (rng.below(400), rng.below(400));
        let args = exec_args(&key, &format!("0.{before:03}"), &format!("0.{after:03}"));
        // Within the program's own run time, so the kill always finds it running: before
        // the claim, during the program, around the effect, or before the completion.
        let kill_after =
            (n < KILLED).then(|| Duration::from_millis(rng.below(before + after + 50)));
        runs.push((key, args, kill_after));
    }
    let started = Instant::now();
    let mut children: Vec<(usize, Child)> = runs
        .iter()
        .enumerate()
        .map(|(n, (_, args, _))| (n, spawn(&idem, args)))
        .collect();
    // Kill each doomed exec at its moment, in time order.
    let mut order: Vec<usize> = (0..KILLED).collect();
    order.sort_by_key(|&n| runs[n].2);
    for n in order {
        let at = runs[n].2.expect("doomed");
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            thread::sleep(wait);
        }
        kill_group(&mut children[n].1);
    }
    // What the survivors and the killed answered.
    let mut acknowledged = BTreeMap::new();
    let mut kills = 0;
    for (n, child) in children.drain(..) {
        let output = child.wait_with_output().expect("wait");
        kills += usize::from(output.status.signal() == Some(9));
        if n >= KILLED {
            assert_eq!(
                output.status.code(),
                Some(0),
                "{}: {}",
                runs[n].0,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        if output.status.code() == Some(0) {
            acknowledged.insert(runs[n].0.clone(), output.stdout);
        }
    }
    assert!(kills >= 20, "only {kills} execs were killed while running");
    // Every program that was not killed has ended (each runs under 0.6 s): the effect
    // log is final.
    let checker = idem.file("check.sh", CHECKER.as_bytes());
    let mut permissions = std::fs::metadata(&checker).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&checker, permissions).unwrap();
    // The claims of killed execs are abandoned once their 1 s lease ran out: reconcile
    // at a clock 10 s on (within what a command that writes accepts).
    let later = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        + 10_000;
    let reconcile = idem.run(&[
        "--json",
        "--now",
        &later.to_string(),
        "reconcile",
        "--with",
        &checker,
    ]);
    reconcile.code(0);
    eprintln!("{}", reconcile.stdout.trim());
    let effects_before_retry = effects(&idem);
    assert!(
        effects_before_retry.values().all(|&n| n == 1),
        "an effect ran twice: {effects_before_retry:?}"
    );
    // No key is unknown, least of all one whose effect happened.
    let unknown = idem.run(&["--json", "list", "--state", "unknown"]);
    unknown.code(0);
    assert_eq!(unknown.stdout, "", "unknown keys remain");
    let pending = idem.run(&["--json", "list", "--state", "pending"]);
    assert_eq!(pending.stdout, "", "pending keys remain");

    // Every key retried with its own command line: a settled key replays, a key whose
    // effect never happened runs now.
    for (key, args, _) in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let retry = idem.run(&args);
        retry.code(0);
        assert_eq!(retry.stdout, format!("receipt {key}"), "{key}");
        if let Some(first) = acknowledged.get(key) {
            assert_eq!(
                retry.stdout.as_bytes(),
                first.as_slice(),
                "{key} replays byte for byte"
            );
        }
    }
    let effects = effects(&idem);
    for (key, _, _) in &runs {
        assert_eq!(
            effects.get(key),
            Some(&1),
            "{key}: effect count {effects:?}"
        );
    }
    eprintln!(
        "{kills} kills; {} effects before the retries, {} acknowledged runs",
        effects_before_retry.len(),
        acknowledged.len()
    );
}
