//! The persisted decoders of idem-core on arbitrary bytes: they never panic; what
//! decodes encodes back and decodes to the same value; and a decoded value can be used,
//! at any time, without a panic (a damaged file or a tampered snapshot is input too).

use idem_core::ledger::{BackoffRng, Ledger, LedgerConfig};
use idem_core::memory::MemoryReceiver;
use idem_core::protocol::Resolution;
use idem_core::{
    Fingerprint, Intent, Outcome, Record, RecordId, Reply, Timestamp, Verdict, protocol,
};

/// Times at which a decoded value is used: the epoch, an ordinary day, the end of time.
const TIMES: [Timestamp; 3] = [
    Timestamp(0),
    Timestamp(1_700_000_000_000),
    Timestamp(u64::MAX),
];

/// Replies of every class: created, conflict, in progress, retry, definitive failure.
const STATUSES: [u16; 6] = [201, 422, 409, 503, 404, 0];

/// `Record::decode` and `RecordId::from_key_bytes`.
pub fn record(data: &[u8]) {
    if let Ok(record) = Record::decode(data) {
        assert_eq!(Record::decode(&record.encode()), Ok(record.clone()));
        let config = idem_core::Config::default();
        for now in TIMES {
            let _ = record.is_expired(now);
            let _ = protocol::sweepable(&record, now);
            if let protocol::Swept::Tombstone(tombstone) = protocol::sweep(&record, now, &config) {
                // A tombstone keeps what identifies the request, and reads back.
                assert_eq!(
                    (tombstone.fingerprint, tombstone.generation),
                    (record.fingerprint, record.generation)
                );
                assert_eq!(Record::decode(&tombstone.encode()), Ok(tombstone));
            }
            let _ = protocol::begin(
                Some(&record),
                record.fingerprint,
                idem_core::Generation(record.generation.0.saturating_add(1)),
                now,
                &config,
            );
            let _ = protocol::heartbeat(Some(&record), record.generation, now, &config);
            let _ = protocol::complete(
                Some(&record),
                record.generation,
                Verdict::Succeeded,
                Outcome::new(200, "ok"),
                now,
                &config,
            );
            let _ = protocol::mark_unknown(Some(&record), record.generation, now);
            let _ = protocol::resolve(
                Some(&record),
                Resolution::Failed(Outcome::new(500, "no")),
                now,
                &config,
            );
        }
    }
    if let Ok(id) = RecordId::from_key_bytes(data) {
        // The key bytes of an id are exactly its encoding: one id, one key.
        assert_eq!(id.to_key_bytes(), data);
        assert_eq!(RecordId::new(id.tenant(), id.operation(), id.key()), Ok(id));
    }
}

/// `Intent::decode`, then every transition of the sender at every time.
pub fn intent(data: &[u8]) {
    let Ok(intent) = Intent::decode(data) else {
        return;
    };
    assert_eq!(Intent::decode(&intent.encode()), Ok(intent.clone()));
    let config = LedgerConfig::with_seed(7);
    for now in TIMES {
        let mut rng = BackoffRng::new(now.0);
        let _ = intent.wakeup(&config);
        let mut polled = intent.clone();
        let _ = polled.poll(now, &config);
        for status in STATUSES {
            let mut replied = polled.clone();
            let reply = Reply {
                status,
                body: b"reply".to_vec(),
                retry_at: Some(now),
            };
            let _ = replied.on_reply(reply, now, &config, &mut rng);
            let _ = replied.wakeup(&config);
        }
        let mut failed = polled.clone();
        let _ = failed.on_transport_error(now, &config, &mut rng);
        let _ = failed.restart();
        assert_eq!(Intent::decode(&failed.encode()), Ok(failed.clone()));
    }
}

/// `Ledger::restore`: a restored ledger snapshots to bytes that restore to it, and works.
pub fn ledger_snapshot(data: &[u8]) {
    let Ok(ledger) = Ledger::restore(data) else {
        return;
    };
    assert_eq!(Ledger::restore(&ledger.snapshot()), Ok(ledger.clone()));
    for now in TIMES {
        let mut used = ledger.clone();
        let _ = used.next_wakeup();
        let sent = used.due(now);
        for (attempt, status) in sent.iter().zip(STATUSES.iter().cycle()) {
            let reply = Reply {
                status: *status,
                body: Vec::new(),
                retry_at: None,
            };
            let _ = used.on_reply(&attempt.key, reply, now);
        }
        let keys: Vec<String> = used.iter().map(|i| i.key.clone()).collect();
        for key in &keys {
            let _ = used.on_transport_error(key, now);
            let _ = used.forget(key);
        }
        let _ = used.begin(
            "fuzz.operation",
            b"payload".to_vec(),
            Fingerprint::of_bytes(b"payload"),
            now,
            [7; 16],
        );
        used.restart();
        assert_eq!(Ledger::restore(&used.snapshot()), Ok(used.clone()));
    }
}

/// `MemoryReceiver::restore`: a restored receiver snapshots to the same bytes, and
/// answers every input on its records and on a new key.
pub fn receiver_snapshot(data: &[u8]) {
    let Ok(receiver) = MemoryReceiver::restore(data) else {
        return;
    };
    let snapshot = receiver.snapshot();
    assert_eq!(MemoryReceiver::restore(&snapshot), Ok(receiver.clone()));
    let fresh = RecordId::new("fuzz", "operation", "a-key-no-snapshot-has").unwrap();
    for now in TIMES {
        let mut used = receiver.clone();
        let records: Vec<(RecordId, Record)> = used
            .iter()
            .map(|(id, record)| (id.clone(), record.clone()))
            .collect();
        for (id, record) in &records {
            let _ = used.begin(id, record.fingerprint, now);
            let _ = used.heartbeat(id, record.generation, now);
            let _ = used.complete(
                id,
                record.generation,
                Verdict::Succeeded,
                Outcome::new(200, "done"),
                now,
            );
            let _ = used.mark_unknown(id, record.generation, now);
            let _ = used.resolve(id, Resolution::NotExecuted, now);
        }
        let _ = used.begin(&fresh, Fingerprint::of_bytes(b"fresh"), now);
        let _ = used.sweep(now, usize::MAX);
        assert_eq!(MemoryReceiver::restore(&used.snapshot()), Ok(used.clone()));
    }
}
