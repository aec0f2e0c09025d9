//! The outbox's sender against a real HTTP receiver on loopback that answers 201, 409
//! with `Retry-After`, 500, too late (after acting) and not at all (after acting) at
//! random, while the sending process is killed twice mid-drain: every intent's effect
//! happens once, every intent completes, none is stranded, and completed ones are
//! forgotten after their retention.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::Rng;
use crate::common::child::{seed, spawn_child};
use idem_core::{Fingerprint, IntentState, LedgerConfig, Timestamp};
use idem_store::outbox::{HttpTransport, IntentFilter, Sender};
use idem_store::redb::{ReadableTableMetadata, TableDefinition, WriteTransaction};
use idem_store::{Store, now};

const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");
const INTENTS: usize = 500;
/// How long a completed intent is kept after it was created.
const RETENTION: Duration = Duration::from_secs(2);
/// The transport's timeout; a "too late" answer comes after it.
const TIMEOUT: Duration = Duration::from_millis(200);

fn config() -> LedgerConfig {
    let mut config = LedgerConfig::with_seed(7);
    config.base_backoff_ms = 20;
    config.max_backoff_ms = 200;
    config
}

/// What the receiver did, by key: the effect's count, and every request.
#[derive(Default)]
struct Seen {
    effects: HashMap<String, usize>,
    requests: usize,
    answers: HashMap<&'static str, usize>,
}

/// An idempotent receiver: the first request under a key acts (counted) and is
/// answered 201, unless the fault drawn for it says otherwise; later ones get the first
/// answer. Faults, drawn per request: 409 with `Retry-After: 0` or `1` (nothing done),
/// 500 (nothing done), acting and answering after the sender's timeout, acting and
/// closing without an answer.
fn receiver(seed: u64) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = Arc::clone(&seen);
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (seen, rng) = (Arc::clone(&shared), Arc::clone(&rng));
            thread::spawn(move || serve(stream, &seen, &rng));
        }
    });
    (address, seen)
}

fn serve(stream: TcpStream, seen: &Mutex<Seen>, rng: &Mutex<Rng>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut reader = BufReader::new(&stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let key = header("idempotency-key").expect("every attempt has a key");
        assert!(
            key.starts_with('"') && key.ends_with('"'),
            "a String: {key}"
        );
        let fault = rng.lock().unwrap().below(100);
        let answer = {
            let mut seen = seen.lock().unwrap();
            seen.requests += 1;
            let done = seen.effects.contains_key(&key);
            let (kind, acts) = match fault {
                _ if done => ("replay", false),
                0..=9 => ("409", false),
                10..=24 => ("500", false),
                25..=29 => ("late", true),
                30..=39 => ("dropped", true),
                _ => ("201", true),
            };
            if acts {
                *seen.effects.entry(key.clone()).or_default() += 1;
            }
            *seen.answers.entry(kind).or_default() += 1;
            kind
        };
        let reply = match answer {
            "409" => format!(
                "HTTP/1.1 409 Conflict\r\nRetry-After: {}\r\nContent-Length: 0\r\n\r\n",
                fault % 2
            ),
            "500" => "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_owned(),
            "dropped" => return,
            _ => {
                let text = format!("{{\"sale\":{key}}}");
                format!(
                    "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                )
            }
        };
        if answer == "late" {
            thread::sleep(TIMEOUT + Duration::from_millis(150));
        }
        if (&stream).write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn sales(store: &Store) -> u64 {
    store
        .read(|txn| match txn.open_table(SALES) {
            Ok(sales) => sales.len().unwrap(),
            Err(_) => 0,
        })
        .unwrap()
}

/// The child: sends the file's intents until none is left (each completed, then
/// forgotten after its retention).
#[test]
#[ignore = "run by sender_child's parent"]
fn sender_child() {
    let path = std::env::var("IDEM_SENDER_FILE").unwrap();
    let url = std::env::var("IDEM_SENDER_URL").unwrap();
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let transport = HttpTransport::new(url)
        .header("Content-Type", "application/json")
        .timeout(TIMEOUT);
    let mut sender = Sender::new(transport)
        .batch(8)
        .forget_completed_after(RETENTION);
    sender
        .run(&outbox, Duration::from_millis(50), |_| {
            outbox.intents(&IntentFilter::default()).unwrap().is_empty()
        })
        .unwrap();
}

/// Waits until the receiver has seen `requests`, then kills the sender.
fn kill_after(child: &mut std::process::Child, seen: &Mutex<Seen>, requests: usize) {
    let started = Instant::now();
    while seen.lock().unwrap().requests < requests {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the sender stalled before {requests} requests"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sender ended early"
        );
        thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn every_intent_takes_effect_once_through_faults_and_two_kills() {
    let seed = seed("every_intent_takes_effect_once_through_faults_and_two_kills");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("terminal.redb");
    {
        let store = Store::open(&path).unwrap();
        let outbox = store.outbox(config()).unwrap();
        let mut random = Rng::new(seed ^ 1);
        for n in 0..INTENTS {
            let payload = format!("{{\"sale\":{n}}}").into_bytes();
            let mut bytes = [0; 16];
            for chunk in bytes.chunks_mut(8) {
                chunk.copy_from_slice(&random.next_u64().to_le_bytes());
            }
            outbox
                .enqueue_with(
                    "forward-sale",
                    payload.clone(),
                    Fingerprint::of_bytes(&payload),
                    now(),
                    bytes,
                    |txn: &WriteTransaction, intent| {
                        txn.open_table(SALES)?
                            .insert(intent.key.as_str(), payload.as_slice())?;
                        Ok::<_, idem_store::redb::Error>(())
                    },
                )
                .unwrap();
        }
        assert_eq!(sales(&store), INTENTS as u64);
    }
    let (address, seen) = receiver(seed);
    let env = [
        ("IDEM_SENDER_FILE", path.display().to_string()),
        ("IDEM_SENDER_URL", format!("http://{address}/sales")),
    ];
    let child = || spawn_child(module_path!(), "sender_child", &env);
    for kill_at in [120, 330] {
        kill_after(&mut child(), &seen, kill_at);
    }
    let mut last = child();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = last.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the last sender did not finish"
        );
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the last sender: {status}");

    let seen = seen.lock().unwrap();
    eprintln!(
        "{} requests for {INTENTS} intents: {:?}",
        seen.requests, seen.answers
    );
    assert_eq!(
        seen.effects.len(),
        INTENTS,
        "every intent reached the receiver"
    );
    let twice: Vec<_> = seen.effects.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "effects not once: {twice:?}");
    for kind in ["409", "500", "late", "dropped", "replay"] {
        assert!(
            seen.answers.get(kind).copied().unwrap_or(0) > 0,
            "no {kind}"
        );
    }
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    assert_eq!(
        outbox.intents(&IntentFilter::default()).unwrap(),
        Vec::new(),
        "every intent completed and was forgotten"
    );
    assert_eq!(sales(&store), INTENTS as u64, "the sales stay");
}

/// A completed intent younger than the retention is kept; an older one is forgotten;
/// a failed one is kept whatever its age.
#[test]
fn only_completed_intents_past_their_retention_are_forgotten() {
    use idem_core::Attempt;
    use idem_store::outbox::{NoReply, Reply, Transport};

    /// Answers by operation: `ok` 201, anything else 400.
    struct ByOperation;
    impl Transport for ByOperation {
        fn send(&mut self, attempt: &Attempt, _: Timestamp) -> Result<Reply, NoReply> {
            let status = if attempt.operation == "ok" { 201 } else { 400 };
            Ok(Reply {
                status,
                body: Vec::new(),
                retry_at: None,
            })
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let t0 = Timestamp(1_800_000_000_000);
    let fp = Fingerprint::of_bytes(b"x");
    let old = outbox
        .enqueue("ok", b"x".to_vec(), fp, t0, [1; 16])
        .unwrap();
    let bad = outbox
        .enqueue("bad", b"x".to_vec(), fp, t0, [2; 16])
        .unwrap();
    let young = outbox
        .enqueue("ok", b"x".to_vec(), fp, t0.plus_millis(5_000), [3; 16])
        .unwrap();
    let mut sender = Sender::new(ByOperation).forget_completed_after(Duration::from_secs(10));
    let at = t0.plus_millis(12_000);
    let drained = sender.drain(&outbox, || at).unwrap();
    assert_eq!(
        (drained.sent, drained.finished, drained.forgotten),
        (3, 3, 1)
    );
    assert_eq!(
        outbox.intent(&old.key).unwrap(),
        None,
        "completed, 12 s old"
    );
    assert_eq!(
        outbox.intent(&young.key).unwrap().map(|i| i.state),
        Some(IntentState::Completed),
        "completed, 7 s old"
    );
    assert_eq!(
        outbox.intent(&bad.key).unwrap().map(|i| i.state),
        Some(IntentState::Failed),
        "failed intents stay for a person"
    );
    let later = sender.drain(&outbox, || t0.plus_millis(15_000)).unwrap();
    assert_eq!((later.sent, later.forgotten), (0, 1));
}

/// One canned answer to every request on a loopback port; the request lines it got.
fn canned(answer: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&seen);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            kept.lock().unwrap().push(line.trim_end().to_owned());
            let mut length = 0;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream.write_all(&answer);
        }
    });
    (address, seen)
}

/// The HTTP transport brings back a redirect as the reply (a followed one would turn
/// the POST into a GET), and the first MiB of a long body with its status.
#[test]
fn a_redirect_is_the_reply_and_a_long_body_is_kept_in_part() {
    use idem_core::Attempt;
    use idem_store::outbox::Transport;

    let attempt = Attempt {
        key: "01890a5d-ac96-774b-bcce-b302099a8057".into(),
        operation: "forward-sale".into(),
        payload: b"{}".to_vec(),
        attempt: 1,
    };
    let (address, seen) = canned(
        b"HTTP/1.1 303 See Other\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n".to_vec(),
    );
    let mut transport = HttpTransport::new(format!("http://{address}/sales"));
    let reply = transport.send(&attempt, now()).unwrap();
    assert_eq!(reply.status, 303);
    assert_eq!(*seen.lock().unwrap(), ["POST /sales HTTP/1.1"]);

    let body = vec![b'r'; 2 << 20];
    let mut answer = format!(
        "HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let (address, _) = canned(answer);
    let reply = HttpTransport::new(format!("http://{address}/sales"))
        .send(&attempt, now())
        .unwrap();
    assert_eq!((reply.status, reply.body.len()), (201, 1 << 20));
}
