//! The deterministic simulation: several senders and one receiver joined by a faulty
//! network, run from a seed, checked by an oracle once everything has quiesced.
//!
//! Each sender is an outbox ([`sender::Outbox`]) that takes sales and forwards each as
//! an intent with its own idempotency key, retrying until a definitive answer or its
//! deadline. The receiver ([`receiver::Receiver`]) runs each intent's business effect
//! at most once: most operations on the atomic path, some on the two-phase path with
//! an external provider. The network drops, duplicates, delays and reorders; senders
//! and the receiver crash and restart, clocks jump back and forward, links partition,
//! the receiver sweeps; in one scenario the receiver's clock is also reset days back for
//! a while. Time jumps to the next event, so a run covers days of simulated
//! time in a moment. [`run`] returns a [`Report`], or a [`Failure`] naming the seed,
//! the broken checks and the log of every intent concerned.
//!
//! A receiver crash loses the two-phase executors in flight, before or after their
//! provider call; their Pending records turn Unknown (on the next begin after the lease,
//! or when the reconciler finds them abandoned), and the reconciler settles each from
//! the business table: the effect ran → its recorded outcome, it did not → not executed,
//! so a retry claims a fresh generation. An executor checks that it still holds its
//! generation (a heartbeat) right before the provider call, so one that was slow past
//! its lease never runs after the reconciler decided.
//!
//! Two backends: [`Durable`] (each sender's outbox and the receiver on idem-store, in
//! their own redb files) and [`InMemory`] (idem-core's `Ledger` and `MemoryReceiver`),
//! behind the [`sender::Outbox`] and [`receiver::Receiver`] traits. The oracle's checks
//! are listed in the source of `oracle.rs`.
//!
//! Everything random comes from the seed: the same seed replays the same run.

pub(crate) mod business;
mod events;
pub(crate) mod faults;
pub(crate) mod history;
pub(crate) mod network;
mod oracle;
pub(crate) mod receiver;
pub(crate) mod rng;
pub(crate) mod sender;
mod server;
pub(crate) mod store_outbox;
pub(crate) mod store_receiver;
mod world;

use std::fmt;

use idem_core::{Config, LeaseExpiry, LedgerConfig};

pub(crate) use faults::{FaultConfig, FaultStats};
pub(crate) use history::Violation;
pub(crate) use network::{NetworkConfig, NetworkStats};
pub(crate) use oracle::Tally;
use receiver::{MemoryStore, Receiver};
use rng::SimRng;
use sender::{MemoryOutbox, Outbox};
pub(crate) use store_outbox::Durable;
use world::{START, World};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// Everything that shapes one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SimConfig {
    /// How many senders.
    pub senders: usize,
    /// Sales each sender takes (each becomes an intent unless its write fails).
    pub sales_per_sender: usize,
    /// Sales and faults happen in the first `window_ms` of the run.
    pub window_ms: u64,
    /// Share of intents executed on the two-phase path.
    pub two_phase_share: f64,
    /// The senders' settings (each sender gets its own seed).
    pub ledger: LedgerConfig,
    /// The receiver's settings.
    pub receiver: Config,
    /// The receiver keeps its clock floor (idem-store does, always, except in a
    /// test-only build that can turn it off; idem-core's in-memory receiver keeps none).
    pub clock_floor: bool,
    /// The network.
    pub network: NetworkConfig,
    /// The faults.
    pub faults: FaultConfig,
    /// A sender gives an attempt up after this long without a reply.
    pub request_timeout_ms: u64,
    /// The receiver sweeps this often.
    pub sweep_every_ms: u64,
    /// Records per periodic sweep at most.
    pub sweep_limit: usize,
    /// The reconciler runs this often.
    pub reconcile_every_ms: u64,
    /// The receivers sharing the store: one, or a fleet.
    pub fleet: Fleet,
}

/// Several receivers on one shared store, as replicas of a service on one database are:
/// each request reaches one of them at random, each has a clock of its own (skewed from
/// true time, as every clock here) and crashes on its own, losing its executors in
/// flight, while the store stays up. The first receiver is the one of a single-receiver
/// run: its crash is the store's, and takes every receiver's executors with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fleet {
    /// How many receivers (1: no fleet).
    pub replicas: usize,
    /// How often each receiver after the first crashes, on average (0: never).
    pub crash_every_ms: u64,
    /// How long such a receiver stays down at most.
    pub down_max_ms: u64,
}

impl SimConfig {
    /// The default run for `seed`: a day and a half of sales on three to five
    /// terminals, every fault on, network quality and fault rates drawn from the seed.
    #[must_use]
    pub(crate) fn for_seed(seed: u64) -> SimConfig {
        let mut knobs = SimRng::new(seed ^ 0x0c0f_1a65);
        let receiver = Config {
            lease_ms: 30_000,
            success_retention_ms: 24 * HOUR,
            failure_retention_ms: 24 * HOUR,
            max_outcome_bytes: 4096,
            on_lease_expiry: LeaseExpiry::Unknown,
            tombstone_retention_ms: 30 * 24 * HOUR,
        };
        SimConfig {
            senders: 3 + knobs.below(3),
            sales_per_sender: 20 + knobs.below(30),
            window_ms: 36 * HOUR,
            two_phase_share: 0.3,
            // A terminal backs off up to five minutes: hours-long outages cost a few dozen
            // retries per intent, not hundreds.
            ledger: LedgerConfig {
                max_backoff_ms: 5 * MINUTE,
                ..LedgerConfig::with_seed(0)
            },
            receiver,
            clock_floor: true,
            network: NetworkConfig {
                drop: 0.25 * knobs.unit(),
                duplicate: 0.15 * knobs.unit(),
                max_delay_ms: 2 * MINUTE,
            },
            faults: FaultConfig {
                sender_crash_every_ms: knobs.range(2, 8) * HOUR,
                sender_down_max_ms: 20 * MINUTE,
                long_outage_share: 0.04,
                long_outage_ms: (20 * HOUR, 30 * HOUR),
                receiver_crash_every_ms: knobs.range(1, 6) * HOUR,
                receiver_down_max_ms: 5 * MINUTE,
                clock_jump_every_ms: knobs.range(30, 180) * MINUTE,
                max_skew_ms: 10 * MINUTE,
                clock_reset_every_ms: 0,
                clock_reset_back_ms: (0, 0),
                clock_reset_for_ms: (0, 0),
                clock_reset_quiet_ms: 0,
                partition_every_ms: knobs.range(2, 8) * HOUR,
                partition_mean_ms: 15 * MINUTE,
                long_partition_share: 0.05,
                long_partition_ms: (HOUR, 4 * HOUR),
                sweep_every_ms: 2 * HOUR,
                sale_failure: 0.03,
                work_failure: 0.02,
                slow_execution: 0.05,
                crash_mid_execution: 0.08,
            },
            request_timeout_ms: 20_000,
            sweep_every_ms: 30 * MINUTE,
            sweep_limit: 50 + knobs.below(200),
            reconcile_every_ms: 5 * MINUTE,
            fleet: Fleet {
                replicas: 1,
                crash_every_ms: 0,
                down_max_ms: 0,
            },
        }
    }

    /// The default run of `seed` with a fleet: three receivers on one store, each with
    /// its own skewed clock, each crashing every two hours or so for up to ten minutes.
    #[must_use]
    pub(crate) fn fleet_scenario(seed: u64) -> SimConfig {
        SimConfig {
            fleet: Fleet {
                replicas: 3,
                crash_every_ms: 2 * HOUR,
                down_max_ms: 10 * MINUTE,
            },
            ..SimConfig::for_seed(seed)
        }
    }

    /// The run that shows the deadline guard is load-bearing: replies lost or links cut
    /// for longer than the receiver keeps outcomes, and frequent sweeps. With
    /// `guarded == false` the senders' test-only knob turns the guard off.
    ///
    /// The receiver keeps no tombstones here: they are a second layer that catches the
    /// same late retry (see [`SimConfig::with_tombstones`]), and this run shows the guard
    /// alone.
    #[must_use]
    pub(crate) fn deadline_scenario(seed: u64, guarded: bool) -> SimConfig {
        let mut config = SimConfig::for_seed(seed);
        config.receiver.tombstone_retention_ms = 0;
        config.senders = 2;
        config.sales_per_sender = 15;
        config.window_ms = 12 * HOUR;
        config.ledger.max_backoff_ms = HOUR;
        config.ledger.unguarded_deadline = !guarded;
        config.faults.partition_every_ms = 6 * HOUR;
        config.faults.long_partition_share = 0.6;
        config.faults.long_partition_ms = (24 * HOUR, 30 * HOUR);
        config.sweep_every_ms = 10 * MINUTE;
        config
    }

    /// The run that shows the clock floor is load-bearing: about every hour the
    /// receiver's clock is reset half a day to a day and a half back, for five minutes to
    /// half an hour, while three senders keep sending. Without the floor, an outcome
    /// settled at such a clock expires as much too early as the clock was behind, often
    /// before the clock is even corrected;
    /// a retry after the correction, still within its sender's deadline, finds it expired
    /// or swept and runs the effect again. With `floored == false` the receiver's store
    /// runs without its clock floor (idem-store's test-only switch).
    ///
    /// The senders' safety margin is two hours: it covers the skew, the time in flight
    /// and what a reset costs with the floor (see [`FaultConfig::margin_needed_ms`]),
    /// not a reset without it.
    ///
    /// Two-phase executions are neither slow nor lost in a crash here. A lease is
    /// compared with the receiver's clock as it is, so a Pending record stays in progress
    /// while that clock is reset, and its sender, told to retry at a lease end already
    /// past on its own clock, retries at once: such a record costs thousands of round
    /// trips until the correction, and shows nothing about the floor.
    ///
    /// The receiver keeps no tombstones here, as in [`SimConfig::deadline_scenario`], so
    /// that the run shows the floor alone.
    #[must_use]
    pub(crate) fn clock_reset_scenario(seed: u64, floored: bool) -> SimConfig {
        let mut config = SimConfig::for_seed(seed);
        config.receiver.tombstone_retention_ms = 0;
        config.senders = 3;
        config.sales_per_sender = 40;
        config.window_ms = 12 * HOUR;
        config.clock_floor = floored;
        config.ledger.safety_margin_ms = 2 * HOUR;
        config.faults.clock_reset_every_ms = HOUR;
        config.faults.clock_reset_back_ms = (12 * HOUR, 36 * HOUR);
        config.faults.clock_reset_for_ms = (5 * MINUTE, 30 * MINUTE);
        config.faults.clock_reset_quiet_ms = 15 * MINUTE;
        config.faults.crash_mid_execution = 0.0;
        config.faults.slow_execution = 0.0;
        config
    }

    /// This run with the receiver keeping tombstones for 30 days (the default): a retry
    /// that arrives after the outcome was swept is answered 410 Gone and does not run;
    /// its sender's intent expires, to be reconciled.
    #[must_use]
    pub(crate) fn with_tombstones(mut self) -> SimConfig {
        self.receiver.tombstone_retention_ms = Config::default().tombstone_retention_ms;
        self
    }

    /// The mean time between two sales of one sender.
    #[must_use]
    pub(crate) fn sale_gap_ms(&self) -> u64 {
        self.window_ms / u64::try_from(self.sales_per_sender.max(1)).unwrap_or(u64::MAX)
    }

    /// Refuses settings under which exactly-once is not promised, so that a failure
    /// always means a bug: the senders must stop before the receiver can forget.
    ///
    /// # Errors
    ///
    /// What is wrong, in words.
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.ledger.validate().map_err(|e| e.to_string())?;
        self.receiver.validate().map_err(|e| e.to_string())?;
        let kept = self
            .receiver
            .success_retention_ms
            .min(self.receiver.failure_retention_ms);
        if self.ledger.server_retention_ms > kept {
            return Err(format!(
                "the senders assume {} ms of retention, the receiver keeps {kept} ms",
                self.ledger.server_retention_ms
            ));
        }
        let needed = self
            .faults
            .margin_needed_ms(self.network.max_delay_ms, self.clock_floor);
        if self.ledger.safety_margin_ms <= needed {
            return Err(format!(
                "safety margin {} ms does not cover clock skew, resets and time in flight ({needed} ms)",
                self.ledger.safety_margin_ms
            ));
        }
        if self.senders == 0 || self.sales_per_sender == 0 {
            return Err("a run needs senders and sales".to_owned());
        }
        Ok(())
    }
}

/// Makes the senders' and the receiver's storage for a run.
pub(crate) trait Backend {
    /// The senders' outbox.
    type Sender: Outbox;
    /// The receiver's store.
    type Receiver: Receiver;
    /// The outbox of sender `index`.
    fn sender(&mut self, index: usize, config: LedgerConfig) -> Self::Sender;
    /// The receiver's store, with `config.receiver` and, where it has one, the clock
    /// floor as `config.clock_floor` says.
    fn receiver(&mut self, config: &SimConfig) -> Self::Receiver;
}

/// idem-core's in-memory ledger and receiver: fast, for many seeds.
#[derive(Debug, Default)]
pub(crate) struct InMemory;

impl Backend for InMemory {
    type Sender = MemoryOutbox;
    type Receiver = MemoryStore;

    fn sender(&mut self, _index: usize, config: LedgerConfig) -> MemoryOutbox {
        MemoryOutbox::new(config)
    }

    /// # Panics
    ///
    /// When `config` resets the receiver's clock and counts on a clock floor: this
    /// receiver keeps none.
    fn receiver(&mut self, config: &SimConfig) -> MemoryStore {
        assert!(
            config.faults.clock_reset_every_ms == 0 || !config.clock_floor,
            "idem-core's in-memory receiver keeps no clock floor: run clock resets on idem-store"
        );
        MemoryStore::new(config.receiver.clone())
    }
}

/// What happened in a run, as counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    /// Intents created (sales committed).
    pub intents: u64,
    /// Sales lost because their sender was down.
    pub missed_sales: u64,
    /// Requests sent (attempts, retries included).
    pub attempts: u64,
    /// Request copies that reached the receiver (duplicates included).
    pub arrivals: u64,
    /// Of those, refused because the receiver was down.
    pub refused: u64,
    /// Replies the receiver sent.
    pub answers: u64,
    /// Replies a sender took into account.
    pub replies: u64,
    /// Replies that found their sender crashed or restarted.
    pub stale_replies: u64,
    /// Attempts given up after the request timeout.
    pub timeouts: u64,
    /// Business effects run.
    pub executions: u64,
    /// Unknown records the reconciler settled as run (from the business table).
    pub reconciled_ran: u64,
    /// Unknown records the reconciler settled as not executed.
    pub reconciled_not_run: u64,
    /// Records swept.
    pub swept: u64,
    /// Events processed.
    pub events: u64,
}

/// A run that kept every promise.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// Its seed.
    pub seed: u64,
    /// Traffic counts.
    pub traffic: Traffic,
    /// What the network did.
    pub network: NetworkStats,
    /// Which faults struck.
    pub faults: FaultStats,
    /// How the intents ended.
    pub tally: Tally,
    /// Simulated time from the start to quiescence, in ms.
    pub simulated_ms: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.traffic;
        write!(
            f,
            "seed {}: {:.1} days, {} intents ({} completed, {} failed, {} expired after running, {} expired unrun), \
             {} requests, {} arrivals, {} executions, {} faults ({} executions lost in crashes), \
             {}+{} reconciled (ran+not run), {} swept, {} events",
            self.seed,
            self.simulated_ms as f64 / 86_400_000.0,
            t.intents,
            self.tally.completed,
            self.tally.failed,
            self.tally.expired_ran,
            self.tally.expired_not_run,
            t.attempts,
            t.arrivals,
            t.executions,
            self.faults.total(),
            self.faults.lost_executions,
            t.reconciled_ran,
            t.reconciled_not_run,
            t.swept,
            t.events
        )
    }
}

/// A run that broke a promise.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// Its seed.
    pub seed: u64,
    /// What broke.
    pub violations: Vec<Violation>,
    /// The counts of the run.
    pub report: Report,
    /// The log of every intent concerned, and the faults.
    pub logs: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} broke {} promise(s); rerun with IDEM_SIM_SEED={}",
            self.seed,
            self.violations.len(),
            self.seed
        )?;
        let mut checks: Vec<&str> = self.violations.iter().map(|v| v.check).collect();
        checks.sort_unstable();
        checks.dedup();
        for check in checks {
            let n = self.violations.iter().filter(|v| v.check == check).count();
            writeln!(f, "  {check}: {n}")?;
        }
        for violation in self.violations.iter().take(20) {
            writeln!(f, "  {violation}")?;
        }
        writeln!(f, "{}", self.report)?;
        f.write_str(&self.logs)
    }
}

/// Runs the simulation of `seed` with `config` on `backend` and checks it.
///
/// # Errors
///
/// A [`Failure`] when the oracle finds a broken promise (boxed: it carries the logs).
///
/// # Panics
///
/// When `config` fails [`SimConfig::validate`] with its deadline guard and clock floor
/// on: such a run could fail without a bug. (A run with a safeguard off is there to
/// show what breaks without it.)
pub(crate) fn run<B: Backend>(
    seed: u64,
    config: &SimConfig,
    backend: &mut B,
) -> Result<Report, Box<Failure>> {
    if !config.ledger.unguarded_deadline && config.clock_floor {
        if let Err(e) = config.validate() {
            panic!("simulation config cannot promise exactly-once: {e}");
        }
    }
    let mut world = World::new(seed, config.clone(), backend);
    world.run();
    let tally = oracle::check(&mut world);
    let report = Report {
        seed,
        traffic: world.traffic.clone(),
        network: world.network.stats.clone(),
        faults: world.faults.clone(),
        tally,
        simulated_ms: world.now - START,
    };
    let violations = world.history.violations().to_vec();
    if violations.is_empty() {
        return Ok(report);
    }
    let mut logs = String::new();
    for key in oracle::keys_of(&violations).into_iter().take(5) {
        logs.push_str(&format!(
            "  log of {key}:\n{}",
            world.history.log_of(&key, START)
        ));
    }
    logs.push_str(&format!("  faults:\n{}", world.history.faults_log(START)));
    Err(Box::new(Failure {
        seed,
        violations,
        report,
        logs,
    }))
}
