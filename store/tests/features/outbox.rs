//! The outbox in the store file: intents created with the caller's writes, due intents
//! from the next-attempt index, replies and restarts that survive reopening, and the
//! same transitions as idem-core's in-memory ledger.

use crate::common::{Rng, T0};
use idem_core::ledger::Effect;
use idem_core::{
    Fingerprint, IntentState, Ledger, LedgerConfig, LedgerError, Outcome, RecordId, Reply,
    ResolvedAs, Timestamp, Verdict,
};
use idem_store::outbox::EnqueueError;
use idem_store::outbox::IntentFilter;
use idem_store::outbox::OutboxError;
use idem_store::redb::{TableDefinition, WriteTransaction};
use idem_store::{ExecuteError, Executed, Store};

const SALES: TableDefinition<&str, &[u8]> = TableDefinition::new("shop.sales");

fn config() -> LedgerConfig {
    LedgerConfig::with_seed(42)
}

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        body: body.as_bytes().to_vec(),
        retry_at: None,
    }
}

fn random(n: u8) -> [u8; 16] {
    [n; 16]
}

fn sale_count(store: &Store) -> u64 {
    use idem_store::redb::ReadableTableMetadata;
    store
        .read(|txn| match txn.open_table(SALES) {
            Ok(sales) => sales.len().unwrap(),
            Err(_) => 0,
        })
        .unwrap()
}

fn record_sale(
    payload: &[u8],
) -> impl FnOnce(&WriteTransaction, &idem_core::Intent) -> Result<(), idem_store::redb::Error> + '_
{
    move |txn, intent| {
        txn.open_table(SALES)?
            .insert(intent.key.as_str(), payload)?;
        Ok(())
    }
}

#[test]
fn a_sale_and_its_intent_commit_together_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("terminal.redb");
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let payload = b"sale 1".to_vec();

    // The sale's own write fails after the intent was written: both roll back.
    let failed = outbox.enqueue_with(
        "sale.forward",
        payload.clone(),
        Fingerprint::of_bytes(&payload),
        Timestamp(T0),
        random(1),
        |txn, intent| {
            txn.open_table(SALES)
                .unwrap()
                .insert(intent.key.as_str(), payload.as_slice())
                .unwrap();
            Err::<(), _>("printer out of paper")
        },
    );
    assert!(matches!(
        failed,
        Err(EnqueueError::Work("printer out of paper"))
    ));
    assert!(outbox.intents(&IntentFilter::default()).unwrap().is_empty());
    assert_eq!(sale_count(&store), 0);

    let (intent, ()) = outbox
        .enqueue_with(
            "sale.forward",
            payload.clone(),
            Fingerprint::of_bytes(&payload),
            Timestamp(T0),
            random(1),
            record_sale(&payload),
        )
        .unwrap();
    drop(store);

    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let stored = outbox.intent(&intent.key).unwrap().unwrap();
    assert_eq!(stored, intent);
    assert_eq!(stored.state, IntentState::Queued);
    assert_eq!(sale_count(&store), 1);
    let sale = store
        .read(|txn| {
            let sales = txn.open_table(SALES).unwrap();
            sales
                .get(intent.key.as_str())
                .unwrap()
                .map(|v| v.value().to_vec())
        })
        .unwrap();
    assert_eq!(sale.as_deref(), Some(&payload[..]));
}

#[test]
fn bad_input_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    assert!(
        store
            .outbox(LedgerConfig {
                safety_margin_ms: 0,
                ..config()
            })
            .is_err()
    );
    let outbox = store.outbox(config()).unwrap();
    let fp = Fingerprint::of_bytes(b"x");

    let bad = outbox.enqueue("bad\noperation", vec![], fp, Timestamp(T0), random(1));
    assert!(matches!(
        bad,
        Err(OutboxError::Ledger(LedgerError::Operation(_)))
    ));

    let first = outbox
        .enqueue("op", vec![], fp, Timestamp(T0), random(1))
        .unwrap();
    let again = outbox.enqueue("op", vec![], fp, Timestamp(T0), random(1));
    assert!(
        matches!(again, Err(OutboxError::Ledger(LedgerError::DuplicateKey { ref key })) if *key == first.key)
    );
    let unknown = outbox.record_reply("no-such-key", reply(200, ""), Timestamp(T0));
    assert!(matches!(
        unknown,
        Err(OutboxError::Ledger(LedgerError::UnknownKey { .. }))
    ));
    let live = outbox.forget(&first.key);
    assert!(matches!(
        live,
        Err(OutboxError::Ledger(LedgerError::NotTerminal { .. }))
    ));
    assert_eq!(
        outbox.intents(&IntentFilter::default()).unwrap(),
        vec![first]
    );
}

#[test]
fn due_intents_come_from_the_next_attempt_index_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let fp = Fingerprint::of_bytes(b"p");
    assert_eq!(outbox.next_wakeup().unwrap(), None);
    assert!(outbox.due(Timestamp(T0), 10).unwrap().is_empty());

    // Three intents, created 0, 10 and 20 ms after T0, each sent once and answered 503
    // with a Retry-After: due again at +900, +300 and +600.
    let mut keys = Vec::new();
    for (n, retry) in [(0u8, 900u64), (1, 300), (2, 600)] {
        let now = Timestamp(T0 + u64::from(n) * 10);
        let intent = outbox.enqueue("op", vec![n], fp, now, random(n)).unwrap();
        let sent = outbox.due(now, 10).unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].key, intent.key);
        let effect = outbox
            .record_reply(
                &intent.key,
                Reply {
                    status: 503,
                    body: vec![],
                    retry_at: Some(Timestamp(T0 + retry)),
                },
                now,
            )
            .unwrap();
        assert_eq!(
            effect,
            Effect::Requeued {
                at: Timestamp(T0 + retry)
            }
        );
        keys.push(intent.key);
    }
    assert_eq!(outbox.next_wakeup().unwrap(), Some(Timestamp(T0 + 300)));
    assert!(outbox.due(Timestamp(T0 + 299), 10).unwrap().is_empty());

    // At +1000 all three are due: oldest next_attempt_at first, two at a time.
    let first = outbox.due(Timestamp(T0 + 1000), 2).unwrap();
    let keys_sent: Vec<_> = first.iter().map(|a| a.key.clone()).collect();
    assert_eq!(keys_sent, vec![keys[1].clone(), keys[2].clone()]);
    assert!(first.iter().all(|a| a.attempt == 2));
    assert_eq!(outbox.next_wakeup().unwrap(), Some(Timestamp(T0 + 900)));
    let rest = outbox.due(Timestamp(T0 + 1000), 2).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].key, keys[0]);
    assert_eq!(outbox.next_wakeup().unwrap(), None, "all in flight");
    let in_flight = outbox
        .intents(&IntentFilter {
            state: Some(IntentState::InFlight),
            limit: None,
        })
        .unwrap();
    assert_eq!(in_flight.len(), 3);
}

#[test]
fn intents_past_their_deadline_expire_instead_of_being_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let intent = outbox
        .enqueue(
            "op",
            vec![],
            Fingerprint::of_bytes(b""),
            Timestamp(T0),
            random(3),
        )
        .unwrap();
    assert_eq!(outbox.next_wakeup().unwrap(), Some(Timestamp(T0)));
    // The terminal was off for a day: the receiver may have forgotten the key.
    let late = intent.deadline;
    assert!(outbox.due(late, 10).unwrap().is_empty());
    let stored = outbox.intent(&intent.key).unwrap().unwrap();
    assert_eq!(stored.state, IntentState::Expired);
    assert_eq!(stored.attempts, 0);
    assert_eq!(outbox.next_wakeup().unwrap(), None);
    let expired = outbox
        .intents(&IntentFilter {
            state: Some(IntentState::Expired),
            limit: Some(5),
        })
        .unwrap();
    assert_eq!(expired, vec![stored.clone()]);
    // Its fate is unknown: it is not forgotten before someone resolves it.
    let refused = outbox.forget(&intent.key);
    assert!(
        matches!(refused, Err(OutboxError::Ledger(LedgerError::Unresolved { ref key })) if *key == intent.key),
        "{refused:?}"
    );
    assert_eq!(outbox.intent(&intent.key).unwrap(), Some(stored.clone()));
    let resolved = outbox
        .resolve(
            &intent.key,
            ResolvedAs::NotExecuted,
            "not on the acquirer's statement",
            late,
        )
        .unwrap();
    assert_eq!(outbox.intent(&intent.key).unwrap(), Some(resolved.clone()));
    assert_eq!(resolved.state, IntentState::Expired);
    assert_eq!(outbox.forget(&intent.key).unwrap(), resolved);
    assert_eq!(outbox.intent(&intent.key).unwrap(), None);
}

#[test]
fn resolve_refuses_what_is_not_an_unresolved_expired_intent_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let fp = Fingerprint::of_bytes(b"");
    let expired = outbox
        .enqueue("op", vec![], fp, Timestamp(T0), random(2))
        .unwrap();
    let late = expired.deadline;
    assert!(outbox.due(late, 10).unwrap().is_empty());
    let live = outbox.enqueue("op", vec![], fp, late, random(3)).unwrap();
    let before = outbox.intents(&IntentFilter::default()).unwrap();
    let states: Vec<IntentState> = before.iter().map(|i| i.state).collect();
    assert_eq!(states, [IntentState::Expired, IntentState::Queued]);
    let refusals = [
        (
            live.key.as_str(),
            "x",
            "intent is queued, only an expired or unknown intent is resolved",
        ),
        ("no-such-key", "x", "no intent with this key"),
        (expired.key.as_str(), "", "reason: 0 bytes, empty"),
        (expired.key.as_str(), "a\tb", "control character"),
    ];
    for (key, reason, words) in refusals {
        let err = outbox
            .resolve(key, ResolvedAs::Failed, reason, late)
            .unwrap_err();
        assert!(err.to_string().contains(words), "{err} lacks {words}");
    }
    assert_eq!(outbox.intents(&IntentFilter::default()).unwrap(), before);
    outbox
        .resolve(&expired.key, ResolvedAs::Failed, "card declined", late)
        .unwrap();
    let again = outbox.resolve(&expired.key, ResolvedAs::Completed, "on second look", late);
    assert!(
        matches!(
            again,
            Err(OutboxError::Ledger(LedgerError::NotExpired {
                resolved: Some(ResolvedAs::Failed),
                ..
            }))
        ),
        "{again:?}"
    );
}

#[test]
fn a_resolution_is_never_dated_behind_the_clock_floor() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let intent = outbox
        .enqueue(
            "op",
            vec![],
            Fingerprint::of_bytes(b""),
            Timestamp(T0),
            random(1),
        )
        .unwrap();
    assert!(outbox.due(intent.deadline, 10).unwrap().is_empty());
    // A record written later raises the floor; then the clock jumps back.
    let floor = Timestamp(intent.deadline.0 + 60_000);
    let id = RecordId::new("t", "o", "k").unwrap();
    store
        .begin(&id, Fingerprint::of_bytes(b"k"), floor)
        .unwrap();
    assert_eq!(store.clock_floor().unwrap(), floor);
    let resolved = outbox
        .resolve(
            &intent.key,
            ResolvedAs::Completed,
            "receipt 17",
            Timestamp(T0),
        )
        .unwrap();
    assert_eq!(resolved.resolution.unwrap().resolved_at, floor);
    assert_eq!(store.clock_floor().unwrap(), floor, "read, not raised");
}

#[test]
fn replies_and_retries_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let fp = Fingerprint::of_bytes(b"p");
    let (done, retried) = {
        let store = Store::open(&path).unwrap();
        let outbox = store.outbox(config()).unwrap();
        let done = outbox
            .enqueue("op", vec![1], fp, Timestamp(T0), random(1))
            .unwrap();
        let retried = outbox
            .enqueue("op", vec![2], fp, Timestamp(T0), random(2))
            .unwrap();
        assert_eq!(outbox.due(Timestamp(T0), 10).unwrap().len(), 2);
        let effect = outbox
            .record_reply(&done.key, reply(201, "receipt 1"), Timestamp(T0 + 5))
            .unwrap();
        assert_eq!(effect, Effect::Finished(IntentState::Completed));
        let effect = outbox
            .record_transport_error(&retried.key, Timestamp(T0 + 5))
            .unwrap();
        assert!(matches!(effect, Effect::Requeued { .. }));
        (done.key, retried.key)
    };
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let done = outbox.intent(&done).unwrap().unwrap();
    assert_eq!(done.state, IntentState::Completed);
    assert_eq!(done.outcome, Some(Outcome::new(201, "receipt 1")));
    let retried = outbox.intent(&retried).unwrap().unwrap();
    assert_eq!((retried.state, retried.attempts), (IntentState::Queued, 1));
    assert_eq!(outbox.next_wakeup().unwrap(), Some(retried.next_attempt_at));
    // A late duplicate of the reply changes nothing.
    let again = outbox
        .record_reply(&done.key, reply(201, "receipt 1"), Timestamp(T0 + 9))
        .unwrap();
    assert_eq!(again, Effect::Ignored);
}

#[test]
fn restart_queues_in_flight_intents_again_with_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let fp = Fingerprint::of_bytes(b"p");
    let keys: Vec<String> = {
        let store = Store::open(&path).unwrap();
        let outbox = store.outbox(config()).unwrap();
        for n in 0..3 {
            outbox
                .enqueue("op", vec![n], fp, Timestamp(T0), random(n))
                .unwrap();
        }
        // Sent, then the process dies before any reply.
        outbox
            .due(Timestamp(T0), 10)
            .unwrap()
            .into_iter()
            .map(|a| a.key)
            .collect()
    };
    assert_eq!(keys.len(), 3);
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    // Opening alone changes nothing: another process may have requests in flight.
    assert_eq!(outbox.next_wakeup().unwrap(), None);
    assert_eq!(outbox.restart().unwrap(), 3);
    assert_eq!(outbox.restart().unwrap(), 0);
    let resent = outbox.due(Timestamp(T0 + 1), 10).unwrap();
    let mut resent_keys: Vec<_> = resent.iter().map(|a| a.key.clone()).collect();
    resent_keys.sort();
    let mut keys = keys;
    keys.sort();
    assert_eq!(resent_keys, keys, "the same keys, never new ones");
    assert!(resent.iter().all(|a| a.attempt == 2));
}

#[test]
fn a_receiver_forwards_what_it_executed_in_the_same_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.redb")).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let id = RecordId::new("shop", "sale", "incoming-1").unwrap();
    let fp = Fingerprint::of_bytes(b"sale");
    let outbox = &outbox;
    let forward = |fail: bool| {
        move |txn: &WriteTransaction| -> Result<_, &'static str> {
            let intent = outbox
                .enqueue_in(
                    txn,
                    "sale.forward",
                    b"sale".to_vec(),
                    fp,
                    Timestamp(T0),
                    random(7),
                )
                .map_err(|_| "enqueue")?;
            if fail {
                return Err("ledger full");
            }
            Ok((
                Verdict::Succeeded,
                Outcome::new(201, "forwarded"),
                intent.key,
            ))
        }
    };
    let failed = store.execute(&id, fp, Timestamp(T0), forward(true));
    assert!(matches!(failed, Err(ExecuteError::Work("ledger full"))));
    assert!(outbox.intents(&IntentFilter::default()).unwrap().is_empty());
    assert_eq!(store.get(&id).unwrap(), None);

    let Executed::Ran { value: key, .. } = store
        .execute(&id, fp, Timestamp(T0), forward(false))
        .unwrap()
    else {
        panic!("the first execute runs");
    };
    let intent = outbox.intent(&key).unwrap().unwrap();
    assert_eq!(intent.state, IntentState::Queued);
    assert!(store.get(&id).unwrap().is_some());
}

/// One input to both the in-memory ledger and the outbox.
fn drive(rng: &mut Rng, now: Timestamp, keys: &[String]) -> Option<(usize, Reply)> {
    if keys.is_empty() {
        return None;
    }
    let key = rng.below(keys.len() as u64) as usize;
    let status = [200, 201, 409, 422, 404, 500, 503, 429, 0][rng.below(9) as usize];
    let retry_at = (rng.below(3) == 0).then(|| now.plus_millis(rng.below(5_000)));
    Some((
        key,
        Reply {
            status,
            body: vec![rng.below(256) as u8],
            retry_at,
        },
    ))
}

#[test]
fn the_outbox_makes_the_same_transitions_as_the_in_memory_ledger() {
    let seed = crate::common::seed("the_outbox_makes_the_same_transitions_as_the_in_memory_ledger");
    let mut rng = Rng::new(seed);
    let config = LedgerConfig {
        server_retention_ms: 60_000,
        safety_margin_ms: 10_000,
        base_backoff_ms: 100,
        max_backoff_ms: 5_000,
        ..LedgerConfig::with_seed(seed)
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let mut ledger = Ledger::new(config.clone()).unwrap();
    let mut store = Store::open(&path).unwrap();
    let mut keys: Vec<String> = Vec::new();
    let mut now = Timestamp(T0);
    for step in 0..400 {
        now = now.plus_millis(rng.below(2_000));
        let outbox = store.outbox(config.clone()).unwrap();
        match rng.below(10) {
            0 | 1 => {
                let payload = vec![rng.below(256) as u8];
                let fp = Fingerprint::of_bytes(&payload);
                let random: [u8; 16] = std::array::from_fn(|_| rng.below(256) as u8);
                let a = ledger
                    .begin("op", payload.clone(), fp, now, random)
                    .unwrap()
                    .clone();
                let b = outbox.enqueue("op", payload, fp, now, random).unwrap();
                assert_eq!(a, b, "step {step}");
                keys.push(a.key);
            }
            2 | 3 => {
                let a = ledger.due(now);
                let mut b = outbox.due(now, usize::MAX).unwrap();
                // The ledger goes by key, the outbox by next attempt: compare as sets.
                let mut a = a;
                a.sort_by(|x, y| x.key.cmp(&y.key));
                b.sort_by(|x, y| x.key.cmp(&y.key));
                assert_eq!(a, b, "step {step}");
            }
            4..=6 => {
                if let Some((i, reply)) = drive(&mut rng, now, &keys) {
                    let a = ledger.on_reply(&keys[i], reply.clone(), now).unwrap();
                    let b = outbox.record_reply(&keys[i], reply, now).unwrap();
                    assert_eq!(a, b, "step {step}");
                }
            }
            7 | 8 => {
                if !keys.is_empty() {
                    let key = &keys[rng.below(keys.len() as u64) as usize];
                    let a = ledger.on_transport_error(key, now).unwrap();
                    let b = outbox.record_transport_error(key, now).unwrap();
                    assert_eq!(a, b, "step {step}");
                }
            }
            _ => {
                // Crash and restart both.
                drop(store);
                ledger = Ledger::restore(&ledger.snapshot()).unwrap();
                store = Store::open(&path).unwrap();
                store.outbox(config.clone()).unwrap().restart().unwrap();
            }
        }
        let outbox = store.outbox(config.clone()).unwrap();
        let stored = outbox.intents(&IntentFilter::default()).unwrap();
        let held: Vec<_> = ledger.iter().cloned().collect();
        assert_eq!(stored, held, "step {step}, seed {seed}");
        assert_eq!(
            outbox.next_wakeup().unwrap(),
            ledger.next_wakeup(),
            "step {step}"
        );
    }
}

/// A store with records in every state and intents in every state.
fn every_state(store: &Store) {
    use idem_core::protocol::Decision;
    use idem_core::{Fingerprint, Outcome, RecordId, Verdict};
    let at = |ms: u64| Timestamp(T0 + ms);
    let key = |k: &str| RecordId::new("shop", "charge", k).unwrap();
    let claim = |k: &str| match store.begin(&key(k), Fingerprint::of_bytes(k.as_bytes()), at(0)) {
        Ok(Decision::Claimed { generation, .. }) => generation,
        other => panic!("{other:?}"),
    };
    claim("pending");
    let g = claim("succeeded");
    store
        .complete(
            &key("succeeded"),
            g,
            Verdict::Succeeded,
            Outcome::new(201, "r"),
            at(1),
        )
        .unwrap();
    let g = claim("failed");
    store
        .complete(
            &key("failed"),
            g,
            Verdict::Failed,
            Outcome::new(402, "no"),
            at(1),
        )
        .unwrap();
    let g = claim("unknown");
    store.mark_unknown(&key("unknown"), g, at(1)).unwrap();

    let outbox = store.outbox(config()).unwrap();
    let enqueue = |n: u8| {
        outbox
            .enqueue(
                "sale.forward",
                vec![n; 3],
                Fingerprint::of_bytes(&[n]),
                at(2),
                random(n),
            )
            .unwrap()
            .key
    };
    let keys: Vec<String> = (1..=7).map(enqueue).collect();
    // Six go in flight; one stays queued.
    let sent = outbox.due(at(3), 6).unwrap();
    assert_eq!(sent.len(), 6);
    let answer = |i: usize, status: u16| {
        outbox
            .record_reply(&keys[i], reply(status, "body"), at(4))
            .unwrap();
    };
    answer(0, 201);
    answer(1, 400);
    answer(2, 422);
    // keys[3] stays in flight; keys[4] gets a transport error past its deadline: expired.
    let deadline = outbox.intent(&keys[4]).unwrap().unwrap().deadline;
    outbox
        .record_transport_error(&keys[4], Timestamp(deadline.0 + 1))
        .unwrap();
    // keys[5] expires the same way and is resolved.
    outbox
        .record_transport_error(&keys[5], Timestamp(deadline.0 + 1))
        .unwrap();
    outbox
        .resolve(
            &keys[5],
            ResolvedAs::NotExecuted,
            "not in the receiver's records",
            Timestamp(deadline.0 + 2),
        )
        .unwrap();
}

#[test]
fn export_and_import_carry_the_outbox_in_every_state() {
    let dir = tempfile::tempdir().unwrap();
    let source = Store::open(dir.path().join("source.redb")).unwrap();
    every_state(&source);
    let now = Timestamp(T0 + 10);
    let stats = source.stats(now).unwrap();
    assert_eq!(
        (
            stats.intents.queued,
            stats.intents.in_flight,
            stats.intents.completed,
            stats.intents.failed,
            stats.intents.conflict,
            stats.intents.expired
        ),
        (1, 1, 1, 1, 1, 2)
    );
    let mut exported = Vec::new();
    let sent = source.export(&mut exported).unwrap();
    assert_eq!((sent.records, sent.intents), (4, 7));
    let text = String::from_utf8_lossy(&exported);
    assert!(
        text.contains(r#""resolved_as":"not_executed","resolution_reason":"not in the receiver's records","resolved_at":"#),
        "{text}"
    );
    let header = String::from_utf8_lossy(&exported);
    assert!(
        header.starts_with(&format!(
            r#"{{"idem_export":3,"generation":4,"clock_floor":{},"records":4,"intents":7,"entities":0,"unique":0,"tokens":0}}"#,
            T0 + 1
        )),
        "{header}"
    );

    let target = Store::open(dir.path().join("target.redb")).unwrap();
    let read = target.import(exported.as_slice()).unwrap();
    assert_eq!(read, sent);
    let all = IntentFilter::default();
    let outbox = |store: &Store| store.outbox(config()).unwrap().intents(&all).unwrap();
    assert_eq!(outbox(&target), outbox(&source));
    let records = |store: &Store| {
        let mut out = Vec::new();
        store
            .list(&idem_store::ListFilter::default(), |id, record| {
                out.push((id, record));
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        out
    };
    assert_eq!(records(&target), records(&source));
    let mut target_stats = target.stats(now).unwrap();
    target_stats.file_bytes = stats.file_bytes;
    assert_eq!(target_stats.intents, stats.intents);
    assert_eq!(target_stats.generation, stats.generation);
    // The restored terminal's clock never goes behind what it restored.
    assert_eq!(target.clock_floor().unwrap(), Timestamp(T0 + 1));
    let check = target.check().unwrap();
    assert!(check.is_ok(), "{:?}", check.problems);
    assert_eq!((check.records, check.intents), (4, 7));
    // Importing the same again changes nothing; a different intent under a key is named.
    assert_eq!(target.import(exported.as_slice()).unwrap(), sent);
    let text = String::from_utf8(exported).unwrap();
    let changed = text.replacen(r#""payload_b64":"AQEB""#, r#""payload_b64":"AQEC""#, 1);
    assert_ne!(changed, text);
    let err = target.import(changed.as_bytes()).unwrap_err();
    assert!(
        err.to_string()
            .contains("a different intent under this key"),
        "{err}"
    );
}

#[test]
fn a_version_1_export_still_imports_and_bad_intent_lines_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("idem.redb")).unwrap();
    let v1 = concat!(
        r#"{"idem_export":1,"generation":3,"records":1}"#,
        "\n",
        r#"{"tenant":"t","operation":"o","key":"k","state":"pending","generation":3,"fingerprint":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","created_at":1,"updated_at":1,"lease_until":2}"#,
        "\n"
    );
    assert_eq!(store.import(v1.as_bytes()).unwrap().records, 1);
    let intent = |fields: &str| {
        format!(
            r#"{{"intent":{{"key":"0190b7c2-0000-7000-8000-000000000001","operation":"sale","state":"queued","attempts":0,"created_at":1,"next_attempt_at":1,"deadline":9,"fingerprint":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","payload_b64":""{fields}}}}}"#
        )
    };
    for (line, words) in [
        (intent(r#","code":1"#), "outcome_b64: missing"),
        (intent(r#","colour":1"#), "unknown field `colour`"),
        (intent("").replace("queued", "lost"), "state: \"lost\""),
        (intent("").replace("\"sale\"", "\"\""), "operation: empty"),
        (
            intent(r#","resolved_as":"failed""#),
            "resolved_as: resolved_as, resolution_reason and resolved_at go together",
        ),
        (
            intent(r#","resolved_as":"failed","resolution_reason":"r","resolved_at":9"#),
            "intent is queued, only an expired or unknown intent is resolved",
        ),
        (
            intent(r#","resolved_as":"failed","resolution_reason":" ","resolved_at":9"#)
                .replace("queued", "expired"),
            "resolution_reason: reason: 1 bytes, empty",
        ),
        (
            intent(r#","resolved_as":"lost","resolution_reason":"r","resolved_at":9"#)
                .replace("queued", "expired"),
            "resolved_as: \"lost\"",
        ),
    ] {
        let err = store.import(line.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("import line 1"), "{err}");
        assert!(err.to_string().contains(words), "{err} lacks {words}");
    }
    let store_intents = store
        .outbox(config())
        .unwrap()
        .intents(&IntentFilter::default())
        .unwrap();
    assert!(store_intents.is_empty(), "a bad import wrote");
    assert_eq!(store.import(intent("").as_bytes()).unwrap().intents, 1);
}

/// An outbox shares the store's file: it lives beside the store in one struct, works on
/// after the store is dropped, and the file closes with the last of them.
#[test]
fn an_outbox_lives_beside_its_store_and_outlives_it() {
    struct Terminal {
        store: Store,
        outbox: idem_store::outbox::Outbox,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("terminal.redb");
    let store = Store::open(&path).unwrap();
    let outbox = store.outbox(config()).unwrap();
    let terminal = Terminal { store, outbox };
    let (t0, fp) = (Timestamp(T0), Fingerprint::of_bytes(b"sale"));
    let intent = terminal
        .outbox
        .enqueue("forward-sale", b"sale".to_vec(), fp, t0, random(1))
        .unwrap();
    assert_eq!(terminal.store.stats(t0).unwrap().records(), 0);
    let Terminal { store, outbox } = terminal;
    drop(store);
    let attempts = outbox.due(t0, 10).unwrap();
    assert_eq!(attempts.len(), 1);
    outbox
        .record_reply(&intent.key, reply(201, "ok"), t0.plus_millis(5))
        .unwrap();
    drop(outbox);
    let reopened = Store::open(&path).unwrap();
    let state = reopened
        .outbox(config())
        .unwrap()
        .intent(&intent.key)
        .unwrap()
        .map(|i| i.state);
    assert_eq!(state, Some(IntentState::Completed));
}

/// Intents made without the caller's random bytes take them from the store's generator:
/// every key differs, within a run, across a reopen (the generator is kept in the file)
/// and inside a transaction the caller already has; a failed transaction uses none.
#[test]
fn the_store_draws_the_random_bytes_of_keys_and_never_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("terminal.redb");
    let t0 = Timestamp(T0);
    let fp = Fingerprint::of_bytes(b"sale");
    let mut keys = std::collections::BTreeSet::new();
    for _ in 0..2 {
        let store = Store::open(&path).unwrap();
        let outbox = store.outbox(config()).unwrap();
        for _ in 0..50 {
            // The same millisecond every time: only the random bytes tell keys apart.
            let intent = outbox.submit("forward", b"sale".to_vec(), fp, t0).unwrap();
            assert!(keys.insert(intent.key.clone()), "{} twice", intent.key);
        }
        let (intent, ()) = outbox
            .submit_with("forward", b"sale".to_vec(), fp, t0, |txn, intent| {
                txn.open_table(SALES)?
                    .insert(intent.key.as_str(), b"sale".as_slice())?;
                Ok::<_, idem_store::redb::Error>(())
            })
            .unwrap();
        assert!(keys.insert(intent.key));
        let id = RecordId::new("t", "sale", &format!("s-{}", keys.len())).unwrap();
        let ran = store
            .execute(&id, fp, t0, |txn| {
                let intent = outbox
                    .submit_in(txn, "forward", b"sale".to_vec(), fp, t0)
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((
                    Verdict::Succeeded,
                    Outcome::new(201, intent.key.clone()),
                    intent.key,
                ))
            })
            .unwrap();
        let Executed::Ran { value: key, .. } = ran else {
            panic!("a fresh key runs")
        };
        assert!(keys.insert(key));
        let refused =
            outbox.submit_with("forward", b"x".to_vec(), fp, t0, |_, _| Err::<(), _>("no"));
        assert!(matches!(refused, Err(EnqueueError::Work("no"))));
    }
    assert_eq!(keys.len(), 2 * 52);
    let store = Store::open(&path).unwrap();
    let listed = store
        .outbox(config())
        .unwrap()
        .intents(&IntentFilter::default())
        .unwrap();
    assert_eq!(listed.len(), 2 * 52, "the refused one left nothing");
}
