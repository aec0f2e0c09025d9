//! Clients of a fleet of `idem proxy` replicas: orders sent to random replicas with the
//! retries a client makes, and what every fleet test checks at the end (each order ran at
//! most once, each acknowledged one exactly once and replayed by every replica).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::Duration;

use super::http::{Answer, Proxy, Upstream, try_post};

/// splitmix64, seeded and printed, so a failing run can be told apart.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The run's seed: `IDEM_SEED`, else the clock and the process id.
pub(crate) fn seed() -> u64 {
    std::env::var("IDEM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| millis_now() ^ u64::from(std::process::id()))
}

fn millis_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sends one attempt of `key` to a random live replica, and to another when the one it
/// picked is gone (killed, or restarting); `None` when none answered 20 times.
pub(crate) fn attempt(
    replicas: &RwLock<Vec<SocketAddr>>,
    rng: &mut Rng,
    key: &str,
) -> Option<Answer> {
    let header = format!("\"{key}\"");
    for _ in 0..20 {
        let address = {
            let live = replicas.read().unwrap();
            live[(rng.next() % live.len() as u64) as usize]
        };
        match try_post(
            address,
            "/orders",
            &[("Idempotency-Key", &header)],
            &format!("{{\"key\":\"{key}\"}}"),
        ) {
            Ok(answer) => return Some(answer),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
    None
}

/// Clients sending the orders `{prefix}-0` to `{prefix}-{keys - 1}` to random replicas,
/// each order until it is answered 201, retrying 409 and 503 (a failover's window) for
/// at most 20 s.
pub(crate) struct Orders {
    done: Arc<AtomicUsize>,
    acknowledged: Arc<Mutex<BTreeMap<String, Answer>>>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl Orders {
    /// Starts `clients` clients on `replicas`.
    pub(crate) fn start(
        prefix: &'static str,
        keys: usize,
        clients: usize,
        replicas: &[Proxy],
        seed: u64,
    ) -> Orders {
        let replicas = Arc::new(RwLock::new(
            replicas.iter().map(|p| p.address).collect::<Vec<_>>(),
        ));
        let next = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let acknowledged: Arc<Mutex<BTreeMap<String, Answer>>> = Arc::default();
        let workers = (0..clients)
            .map(|w| {
                let (next, done, acknowledged, replicas) = (
                    Arc::clone(&next),
                    Arc::clone(&done),
                    Arc::clone(&acknowledged),
                    Arc::clone(&replicas),
                );
                let mut rng = Rng(seed ^ (w as u64 + 1));
                thread::spawn(move || {
                    loop {
                        let k = next.fetch_add(1, Ordering::SeqCst);
                        if k >= keys {
                            return;
                        }
                        let key = format!("{prefix}-{k}");
                        for _ in 0..200 {
                            match attempt(&replicas, &mut rng, &key) {
                                Some(answer) if answer.status == 201 => {
                                    acknowledged.lock().unwrap().insert(key.clone(), answer);
                                    break;
                                }
                                Some(answer) if [409, 503].contains(&answer.status) => {
                                    thread::sleep(Duration::from_millis(100));
                                }
                                other => {
                                    panic!("{key}: {:?}", other.map(|a| (a.status, a.body)))
                                }
                            }
                        }
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Orders {
            done,
            acknowledged,
            workers,
        }
    }

    /// Waits until `orders` orders are done (answered, or given up on).
    pub(crate) fn wait_done(&self, orders: usize) {
        while self.done.load(Ordering::SeqCst) < orders {
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for every client; the orders answered 201, with their answers.
    pub(crate) fn finish(self) -> BTreeMap<String, Answer> {
        for worker in self.workers {
            worker.join().unwrap();
        }
        std::mem::take(&mut *self.acknowledged.lock().unwrap())
    }
}

/// Every key of `prefix` took effect at most once, every acknowledged one exactly once,
/// at least half of them were acknowledged, and every replica replays each acknowledged
/// answer byte for byte.
pub(crate) fn assert_at_most_once_and_replayed(
    prefix: &str,
    keys: usize,
    upstream: &Upstream,
    acknowledged: &BTreeMap<String, Answer>,
    proxies: &[Proxy],
) {
    for k in 0..keys {
        let key = format!("{prefix}-{k}");
        let runs = upstream.executions(&format!("\"{key}\""));
        assert!(runs <= 1, "{key} took effect {runs} times");
        if acknowledged.contains_key(&key) {
            assert_eq!(runs, 1, "{key}: acknowledged, so it ran");
        }
    }
    assert!(acknowledged.len() >= keys / 2, "too few keys acknowledged");
    for (key, first) in acknowledged {
        for proxy in proxies {
            let replay = try_post(
                proxy.address,
                "/orders",
                &[("Idempotency-Key", &format!("\"{key}\""))],
                &format!("{{\"key\":\"{key}\"}}"),
            )
            .unwrap();
            assert_eq!(
                (replay.status, &replay.body),
                (first.status, &first.body),
                "{key} on {}",
                proxy.address
            );
            assert_eq!(
                replay.header("idempotent-replayed").as_deref(),
                Some("true")
            );
        }
    }
}

/// No order of `prefix` is stranded: a claim whose answer a failover lost was given back
/// by its replica (docs/design.md §16), so every order ran, once, without an operator. A
/// key the upstream never saw would have kept answering 409, then 503 unknown.
pub(crate) fn assert_none_stranded(prefix: &str, keys: usize, upstream: &Upstream) {
    let stranded: Vec<String> = (0..keys)
        .map(|k| format!("{prefix}-{k}"))
        .filter(|key| upstream.executions(&format!("\"{key}\"")) == 0)
        .collect();
    assert!(
        stranded.is_empty(),
        "never executed, so stranded: {stranded:?}"
    );
}
