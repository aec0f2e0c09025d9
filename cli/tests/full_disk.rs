//! `idem proxy` on a store file on a small filesystem that fills up (a tmpfs the test
//! mounts; it needs root, as the test command has): fresh keys with 20 KB receipts from
//! 16 clients until claims are refused, then the filesystem grown without restarting
//! anything. Every order answered 2xx replays byte for byte, no answered key is left
//! Pending or Unknown, new keys are claimed again within a second or so of the space
//! coming back, nothing runs twice, and `idem check` is clean. Once with the reserve
//! kept for settles (claims refused before the disk is full, `/healthz` saying why), once
//! without (the disk really full: ENOSPC, and the store reopens itself).

mod common;

#[path = "../../store/tests/common/tmpfs.rs"]
mod tmpfs;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::Idem;
use common::http::{Answer, Proxy, Upstream, get, try_post};
use tmpfs::Tmpfs;

fn order(address: std::net::SocketAddr, key: &str) -> Option<Answer> {
    try_post(
        address,
        "/receipt",
        &[("Idempotency-Key", &format!("\"{key}\""))],
        "{\"item\":\"tea\"}",
    )
    .ok()
}

#[test]
fn below_the_reserve_claims_are_refused_and_come_back_with_the_space() {
    fill_and_grow("256KiB", Some("below the reserve"));
}

#[test]
fn a_disk_full_to_the_last_byte_recovers_by_itself_when_space_comes_back() {
    fill_and_grow("0", None);
}

/// The disk fills and stays full: the proxy keeps answering (503 for new claims, the
/// health check saying why, every answered order replayed byte for byte), stops cleanly,
/// and a proxy started again on the still-full disk replays them all: nothing answered
/// 2xx is lost, nothing runs twice, no answered key is Pending or Unknown.
#[test]
fn a_disk_that_stays_full_keeps_replaying_and_loses_nothing_across_a_restart() {
    let disk = Tmpfs::mount("12m");
    let idem = Idem {
        db: disk.path().join("idem.redb"),
        ..Idem::new()
    };
    let upstream = Upstream::start(Duration::ZERO);
    // The default reserve, 4 MiB: room for the settles of every claim in flight.
    let flags = ["--tenant", "shop"];
    let proxy = Proxy::start(&idem, &upstream.url(), &flags);
    let answered = fill(proxy.address, "4MiB");
    assert!(!answered.is_empty(), "some orders went through first");
    let replays = |address| {
        for (key, first) in &answered {
            let replay = order(address, key).expect("an answer");
            assert_eq!(replay.status, first.status, "{key}: {}", replay.body);
            assert!(replay.body == first.body, "{key}: the replay differs");
            assert_eq!(
                replay.header("idempotent-replayed").as_deref(),
                Some("true"),
                "{key}"
            );
        }
    };
    replays(proxy.address);
    let health = get(proxy.admin, "/healthz");
    assert_eq!(health.status, 503, "{}", health.body);
    assert!(health.body.contains("below the reserve"), "{}", health.body);
    let fresh = order(proxy.address, "fresh-1").expect("an answer");
    assert_eq!(fresh.status, 503, "a new claim while full: {}", fresh.body);
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "nothing left unsettled: {stderr}");

    let again = Proxy::start(&idem, &upstream.url(), &flags);
    replays(again.address);
    let fresh = order(again.address, "fresh-2").expect("an answer");
    assert_eq!(fresh.status, 503, "still full: {}", fresh.body);
    let (code, stderr) = again.terminate();
    assert_eq!(code, 0, "{stderr}");
    let counts = upstream.counts.lock().unwrap();
    for (key, runs) in &counts.executions {
        assert!(*runs <= 1, "{key} ran {runs} times");
    }
    drop(counts);
    for state in ["pending", "unknown"] {
        let listed = idem.run(&["list", "--state", state, "--json"]);
        listed.code(0);
        for line in listed.json_lines() {
            let key = line["key"].as_str().unwrap().to_owned();
            assert!(
                !answered.contains_key(&key),
                "{key} was answered and is {state}"
            );
        }
    }
}

/// Fills a 2 MiB tmpfs through a proxy keeping `reserve`, then grows it; `cause`: what
/// `/healthz` names while claims are refused, when it must.
fn fill_and_grow(reserve: &str, cause: Option<&str>) {
    let disk = Tmpfs::mount("2m");
    let idem = Idem {
        db: disk.path().join("idem.redb"),
        ..Idem::new()
    };
    let upstream = Upstream::start(Duration::ZERO);
    let proxy = Proxy::start(
        &idem,
        &upstream.url(),
        &["--tenant", "shop", "--space-reserve", reserve],
    );
    let address = proxy.address;

    let answered = fill(address, reserve);
    assert!(!answered.is_empty(), "some orders went through first");
    if let Some(cause) = cause {
        let health = get(proxy.admin, "/healthz");
        assert_eq!(health.status, 503, "{}", health.body);
        assert!(
            health.body.contains(cause),
            "the health check names the cause: {}",
            health.body
        );
    }

    // Space comes back, nothing restarted: new keys are claimed again within the
    // store's backoff.
    disk.resize("64m");
    let grown = Instant::now();
    let mut fresh = 0;
    loop {
        match order(address, &format!("after-{fresh}")) {
            Some(answer) if answer.status == 201 => break,
            _ => fresh += 1,
        }
        assert!(
            grown.elapsed() < Duration::from_secs(5),
            "no claim within 5 s of the space coming back"
        );
        thread::sleep(Duration::from_millis(50));
    }
    println!(
        "a fresh key claimed {:?} after the space came back",
        grown.elapsed()
    );
    let health = get(proxy.admin, "/healthz");
    assert_eq!(health.status, 200, "{}", health.body);

    // The outcomes the store could not take while it was full are stored by the
    // proxy itself: none is left waiting in its memory.
    let stored = Instant::now();
    loop {
        let metrics = get(proxy.admin, "/metrics").body;
        let waiting = metrics
            .lines()
            .find_map(|line| line.strip_prefix("idem_proxy_unsettled_keys "))
            .map(|n| n.trim().to_owned());
        if waiting.as_deref() == Some("0") {
            break;
        }
        assert!(
            stored.elapsed() < Duration::from_secs(5),
            "outcomes still waiting to be stored: {waiting:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }

    // Every answered order replays byte for byte, and ran once.
    for (key, first) in &answered {
        let replay = order(address, key).expect("an answer");
        assert_eq!(replay.status, first.status, "{key}");
        assert!(replay.body == first.body, "{key}: the replay differs");
        assert_eq!(
            replay.header("idempotent-replayed").as_deref(),
            Some("true"),
            "{key}"
        );
    }
    let counts = upstream.counts.lock().unwrap();
    for (key, runs) in &counts.executions {
        assert!(*runs <= 1, "{key} ran {runs} times");
    }
    drop(counts);
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, 0, "{stderr}");

    // No answered key is left Pending or Unknown, and the file is sound.
    for state in ["pending", "unknown"] {
        let listed = idem.run(&["list", "--state", state, "--json"]);
        listed.code(0);
        for line in listed.json_lines() {
            let key = line["key"].as_str().unwrap().to_owned();
            assert!(
                !answered.contains_key(&key),
                "{key} was answered and is {state}"
            );
        }
    }
    idem.run(&["check"]).code(0);
}

/// Orders from 16 clients, fresh keys, until the store has refused 50 of them; the
/// orders answered 2xx, by key.
fn fill(address: std::net::SocketAddr, reserve: &str) -> BTreeMap<String, Answer> {
    let next = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let answered: Arc<Mutex<BTreeMap<String, Answer>>> = Arc::default();
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (next, refused, stop, answered) = (
                Arc::clone(&next),
                Arc::clone(&refused),
                Arc::clone(&stop),
                Arc::clone(&answered),
            );
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("k{}", next.fetch_add(1, Ordering::SeqCst));
                    match order(address, &key) {
                        Some(answer) if (200..300).contains(&answer.status) => {
                            answered.lock().unwrap().insert(key, answer);
                        }
                        Some(answer) => {
                            assert_eq!(answer.status, 503, "{key}: {}", answer.body);
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                        None => {}
                    }
                }
            })
        })
        .collect();
    let filling = Instant::now();
    while refused.load(Ordering::SeqCst) < 50 {
        assert!(
            filling.elapsed() < Duration::from_secs(120),
            "the disk never filled: {} answered",
            answered.lock().unwrap().len()
        );
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    let answered = std::mem::take(&mut *answered.lock().unwrap());
    println!(
        "reserve {reserve}: {} orders answered 2xx, {} refused with 503 as the disk filled",
        answered.len(),
        refused.load(Ordering::SeqCst)
    );
    answered
}
