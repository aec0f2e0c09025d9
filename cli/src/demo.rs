//! `idem demo`: the mission's story, played on a fresh store file in a temporary directory.
//!
//! It is printed step by step as it happens.
//!
//! A terminal takes sales offline; replies are lost and retried under the same key; the
//! terminal restarts; a card reader sends one request twice at once; an executor dies
//! mid-flight and its record is reconciled; retention ends and sweep cleans up. The
//! closing numbers are counted, not written down: effects from the business table that
//! the atomic path writes (`demo.effects`, one row per sale with how often it ran) plus
//! the acquirer's own ledger for the two-phase payment.

use idem_store::Receiver;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::thread;

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Fingerprint, Outcome, RecordId, Timestamp, Verdict};
use idem_store::any::BlockingStore;
use idem_store::redb::{ReadableTable, TableDefinition, WriteTransaction};
use idem_store::{Executed, ListFilter};

use crate::exit::{Ending, Exit, Failure};
use crate::session::{
    Access, Session, maintain_failure, open_failure, store_builder, store_failure,
};
use crate::time::format_span;

/// The terminal's business table: how many times each sale's effect was applied.
const EFFECTS: TableDefinition<&str, u64> = TableDefinition::new("demo.effects");

const TENANT: &str = "shop-7";
const SALE: &str = "sale";
const PAYMENT: &str = "card-payment";
const SECOND: u64 = 1_000;
const HOUR: u64 = 3_600 * SECOND;

/// The demo's own bookkeeping: what the terminal asked for and what really happened.
struct Story {
    store: Option<BlockingStore>,
    now: Timestamp,
    /// Distinct intents the terminal created (one key each).
    intents: u64,
    /// Every request sent, first tries and retries.
    requests: u64,
    /// The acquirer's ledger: card charges per payment key, outside the store file.
    acquirer: BTreeMap<String, u64>,
}

/// Plays the story on a temporary file; `--db` is never touched.
pub(crate) fn run(session: &Session) -> Ending {
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::runtime(format!("demo: temporary directory: {e}")))?;
    let path = dir.path().join("terminal.redb");
    let mut story = Story {
        store: Some(open(&path)?),
        now: session.now(),
        intents: 0,
        requests: 0,
        acquirer: BTreeMap::new(),
    };
    say("idem demo: a point-of-sale terminal keeps its sales in an embedded idem store");
    say(&format!(
        "  store file: {} (fresh, deleted afterwards)",
        path.display()
    ));
    story.offline_sales()?;
    story.lost_reply()?;
    story.restart(&path)?;
    story.double_send()?;
    story.executor_dies()?;
    story.retention_ends()?;
    story.summary()
}

fn say(line: &str) {
    println!("{line}");
}

fn sale_payload(item: &str, cents: u64) -> Vec<u8> {
    format!("{{\"item\":\"{item}\",\"cents\":{cents}}}").into_bytes()
}

/// Opens (or makes) the demo's store file at `path`.
fn open(path: &std::path::Path) -> Result<BlockingStore, Failure> {
    store_builder(Config::default(), Access::Create)?
        .open_blocking(path)
        .map_err(open_failure)
}

fn id(operation: &str, key: &str) -> Result<RecordId, Failure> {
    RecordId::new(TENANT, operation, key).map_err(|e| Failure::runtime(format!("demo: {e}")))
}

/// The atomic path: the sale's row in `demo.effects` and its settled record commit together.
fn record_sale(
    store: &BlockingStore,
    key: &str,
    payload: &[u8],
    now: Timestamp,
) -> Result<Executed<u64>, Failure> {
    let id = id(SALE, key)?;
    let fingerprint = Fingerprint::of_bytes(payload);
    let receipt = format!("receipt {key}, {} bytes of sale", payload.len());
    store
        .file("execute")
        .map_err(store_failure)?
        .execute(&id, fingerprint, now, |txn: &WriteTransaction| {
            let mut effects = txn.open_table(EFFECTS)?;
            let runs = effects.get(key)?.map_or(0, |v| v.value()) + 1;
            effects.insert(key, runs)?;
            Ok::<_, idem_store::redb::Error>((
                Verdict::Succeeded,
                Outcome::new(201, receipt.into_bytes()),
                runs,
            ))
        })
        .map_err(|e| Failure::runtime(format!("demo: {key}: {e}")))
}

fn describe(executed: &Executed<u64>) -> String {
    match executed {
        Executed::Ran { record, .. } => format!("executed, generation {}", record.generation),
        Executed::NotRun(Decision::Replay { outcome, .. }) => {
            format!(
                "replayed \"{}\", not executed again",
                String::from_utf8_lossy(&outcome.body)
            )
        }
        Executed::NotRun(Decision::Conflict { state, .. }) => {
            format!("conflict: the key is already {state} with another payload, refused")
        }
        Executed::NotRun(other) => format!("not run: {other:?}"),
    }
}

impl Story {
    fn store(&self) -> &BlockingStore {
        // `store` is None only between the drop and the reopen inside `restart`.
        self.store
            .as_ref()
            .expect("the demo store is open outside restart")
    }

    fn sale(&mut self, key: &str, payload: &[u8]) -> Result<Executed<u64>, Failure> {
        self.requests += 1;
        record_sale(self.store(), key, payload, self.now)
    }

    fn offline_sales(&mut self) -> Result<(), Failure> {
        say(
            "\n1. Offline, the terminal rings up three sales; each sale gets its key when it is rung up.",
        );
        for (key, item, cents) in [
            ("s-0001", "coffee", 480),
            ("s-0002", "bagel", 250),
            ("s-0003", "tea", 300),
        ] {
            self.intents += 1;
            let done = self.sale(key, &sale_payload(item, cents))?;
            say(&format!(
                "   {key} {item:<7} {cents:>4} cents -> {}",
                describe(&done)
            ));
        }
        Ok(())
    }

    fn lost_reply(&mut self) -> Result<(), Failure> {
        say(
            "\n2. Back online, the reply to s-0002 is lost; the terminal retries under the same key, twice.",
        );
        for attempt in 1..=2 {
            self.now = self.now.plus_millis(2 * SECOND);
            let done = self.sale("s-0002", &sale_payload("bagel", 250))?;
            say(&format!(
                "   retry {attempt} of s-0002 -> {}",
                describe(&done)
            ));
        }
        Ok(())
    }

    fn restart(&mut self, path: &Path) -> Result<(), Failure> {
        say(
            "\n3. Power loss: the terminal restarts; the store is dropped and opened again from the file.",
        );
        let before = self
            .store()
            .file("generation")
            .and_then(|file| file.generation())
            .map_err(store_failure)?;
        self.store = None;
        self.store = Some(open(path)?);
        let after = self
            .store()
            .file("generation")
            .and_then(|file| file.generation())
            .map_err(store_failure)?;
        say(&format!(
            "   reopened: generation counter {after} (was {before}), nothing lost"
        ));
        let done = self.sale("s-0003", &sale_payload("tea", 300))?;
        say(&format!("   retry of s-0003 -> {}", describe(&done)));
        Ok(())
    }

    fn double_send(&mut self) -> Result<(), Failure> {
        say("\n4. The card reader sends s-0004 twice at the same moment (two threads).");
        self.intents += 1;
        self.requests += 2;
        let payload = sale_payload("muffin", 320);
        let (store, now) = (self.store(), self.now);
        let results: Vec<Result<Executed<u64>, Failure>> = thread::scope(|scope| {
            let sends: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| record_sale(store, "s-0004", &payload, now)))
                .collect();
            sends
                .into_iter()
                .map(|send| {
                    send.join()
                        .unwrap_or_else(|_| Err(Failure::runtime("demo: a sender panicked")))
                })
                .collect()
        });
        for (n, done) in results.into_iter().enumerate() {
            say(&format!(
                "   send {} of s-0004 -> {}",
                n + 1,
                describe(&done?)
            ));
        }
        say("   A buggy peripheral then reuses key s-0004 for another amount:");
        let done = self.sale("s-0004", &sale_payload("muffin", 9_999))?;
        say(&format!("   s-0004 with 9999 cents -> {}", describe(&done)));
        Ok(())
    }

    fn executor_dies(&mut self) -> Result<(), Failure> {
        say(
            "\n5. A card payment goes to the acquirer on the two-phase path; its executor dies mid-flight.",
        );
        let key = "p-0005";
        let payment = id(PAYMENT, key)?;
        let fingerprint = Fingerprint::of_bytes(&sale_payload("card 4.80", 480));
        self.intents += 1;
        self.requests += 1;
        let decision = self
            .store()
            .call(|s| s.begin(&payment, fingerprint, self.now))
            .map_err(store_failure)?;
        let Decision::Claimed {
            generation,
            lease_until,
        } = decision
        else {
            return Err(Failure::runtime(format!(
                "demo: {key}: expected a claim, got {decision:?}"
            )));
        };
        say(&format!(
            "   begin {key} -> claimed, generation {generation}, lease {}",
            format_span(lease_until.millis_since(self.now))
        ));
        *self.acquirer.entry(key.into()).or_default() += 1;
        say("   the executor charges the card at the acquirer ... and dies before it can complete");
        self.now = lease_until.plus_millis(SECOND);
        self.requests += 1;
        let retry = self
            .store()
            .call(|s| s.begin(&payment, fingerprint, self.now))
            .map_err(store_failure)?;
        let Decision::NeedsReconciliation {
            generation: unknown,
        } = retry
        else {
            return Err(Failure::runtime(format!(
                "demo: {key}: expected unknown, got {retry:?}"
            )));
        };
        say(&format!(
            "   retry after the lease ran out -> unknown (generation {unknown}): not run again, a human must look"
        ));
        let charged = self.acquirer.get(key).copied().unwrap_or(0);
        let resolution = if charged > 0 {
            Resolution::Succeeded(Outcome::new(200, b"approved".to_vec()))
        } else {
            Resolution::NotExecuted
        };
        let verdict = if charged > 0 {
            "succeeded (the charge is there)"
        } else {
            "not executed"
        };
        self.store()
            .call(|s| s.resolve(&payment, resolution, self.now))
            .map_err(store_failure)?;
        say(&format!(
            "   operator reads the acquirer's log: {charged} charge -> resolve {verdict}"
        ));
        self.requests += 1;
        let replay = self
            .store()
            .call(|s| s.begin(&payment, fingerprint, self.now))
            .map_err(store_failure)?;
        if let Decision::Replay {
            verdict, outcome, ..
        } = &replay
        {
            say(&format!(
                "   retry -> replay: {verdict} \"{}\", the card is not charged again",
                String::from_utf8_lossy(&outcome.body)
            ));
        }
        Ok(())
    }

    fn retention_ends(&mut self) -> Result<(), Failure> {
        say(
            "\n6. A day later the retention of every outcome has ended; sweep cleans up,\n   keeping a tombstone of each so a very late retry is answered forgotten.",
        );
        self.now = self.now.plus_millis(24 * HOUR + SECOND);
        let store = self.store();
        let before = store
            .call(|s| s.stats(self.now))
            .map_err(maintain_failure)?;
        say(&format!(
            "   before: {} records, {} past retention",
            before.records(),
            before.expired
        ));
        let report = store
            .call(|s| s.sweep(self.now, usize::MAX, false))
            .map_err(store_failure)?;
        let after = store
            .call(|s| s.stats(self.now))
            .map_err(maintain_failure)?;
        say(&format!(
            "   sweep removed {} outcomes and kept {} tombstones; after: {} records, {} of them tombstones",
            report.removed + report.tombstoned,
            report.tombstoned,
            after.records(),
            after.forgotten
        ));
        let mut left = 0;
        store
            .list(&ListFilter::default(), |_, _| {
                left += 1;
                ControlFlow::Continue(())
            })
            .map_err(store_failure)?;
        if left != after.records() {
            return Err(Failure::runtime(
                "demo: stats and list disagree after sweep",
            ));
        }
        Ok(())
    }

    fn summary(&self) -> Ending {
        let per_sale: Vec<u64> = self
            .store()
            .file("read")
            .map_err(store_failure)?
            .read(|txn| -> Result<Vec<u64>, idem_store::redb::Error> {
                let table = txn.open_table(EFFECTS)?;
                table.iter()?.map(|row| Ok(row?.1.value())).collect()
            })
            .map_err(store_failure)?
            .map_err(|e| Failure::runtime(format!("demo: reading demo.effects: {e}")))?;
        let runs = per_sale.iter().chain(self.acquirer.values());
        let effects: u64 = runs.clone().sum();
        let duplicates: u64 = runs.map(|n| n.saturating_sub(1)).sum();
        say(&format!(
            "\nResult: {} intents, {} requests sent, {effects} effects executed, {duplicates} duplicates.",
            self.intents, self.requests
        ));
        say(
            "Every retry got the first outcome back, byte for byte. Try it on a real file: idem --help",
        );
        if effects == self.intents && duplicates == 0 {
            Ok(Exit::Done.code())
        } else {
            Err(Failure::runtime(
                "demo: effects and intents differ: this is a bug in idem",
            ))
        }
    }
}
