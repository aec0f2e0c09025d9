//! The simulated world: nodes, clocks, network and the event loop; the senders' side of
//! every event. The receiver's side is in `server.rs`, faults in `faults.rs`.

use std::collections::BTreeSet;
use std::sync::Arc;

use idem_core::{Attempt, IntentState, Timestamp};

use super::events::{Event, Queue, Request, Response};
use super::faults::{self, FaultStats};
use super::history::{History, Note};
use super::network::{Direction, Network};
use super::receiver::{ATOMIC_OP, Receiver, TWO_PHASE_OP, intent_name};
use super::rng::SimRng;
use super::sender::Outbox;
use super::{Backend, SimConfig, Traffic};

/// True time at the start of every run: 2023-11-14, so clocks never go below zero.
pub(crate) const START: u64 = 1_700_000_000_000;

/// A run that has not quiesced after this many events is stuck.
const MAX_EVENTS: u64 = 20_000_000;

/// Nor after this much simulated time.
const MAX_SIMULATED_MS: u64 = 60 * 86_400_000;

/// One sender process and what the world knows about it.
pub(crate) struct SenderNode<S> {
    /// Its tenant name at the receiver.
    pub(crate) name: String,
    /// Its durable outbox.
    pub(crate) outbox: S,
    /// False while crashed.
    pub(crate) up: bool,
    /// Grows at every crash: replies and timeouts of an earlier process are not for it.
    pub(crate) incarnation: u32,
    /// The (true) time of the wake-up event in force.
    pub(crate) wake_at: Option<u64>,
    /// When its current partition heals.
    pub(crate) partition_until: Option<u64>,
    /// Sales still to come.
    sales_left: usize,
    /// Keys of every intent whose sale committed.
    pub(crate) created: BTreeSet<String>,
}

/// The receiver process.
pub(crate) struct ReceiverNode<R> {
    /// Its durable store.
    pub(crate) store: R,
    /// False while crashed.
    pub(crate) up: bool,
    /// Grows at every crash: executors of an earlier process are gone.
    pub(crate) incarnation: u32,
    /// While its clock is reset: when the correction is due (true time).
    pub(crate) reset_until: Option<u64>,
    /// A reset (how far back, for how long) waiting for the receiver's next claim.
    pub(crate) pending_reset: Option<(u64, u64)>,
    /// The (true) time of its latest claim made while its clock was not reset.
    pub(crate) last_good_claim: Option<u64>,
}

/// A receiver of a fleet after the first: it shares the first one's store.
pub(crate) struct Replica {
    /// False while crashed.
    pub(crate) up: bool,
    /// Grows at every crash (its own, or the store's).
    pub(crate) incarnation: u32,
    /// Offset of its clock from true time.
    pub(crate) clock: i64,
}

/// Everything in one run.
pub(crate) struct World<S, R> {
    pub(crate) config: SimConfig,
    pub(crate) rng: SimRng,
    pub(crate) now: u64,
    pub(crate) queue: Queue,
    /// Offset of each clock from true time: index 0 the receiver, 1 + i sender i.
    pub(crate) clocks: Vec<i64>,
    pub(crate) senders: Vec<SenderNode<S>>,
    pub(crate) receiver: ReceiverNode<R>,
    /// The receivers of a fleet after the first (none for a single receiver).
    pub(crate) replicas: Vec<Replica>,
    pub(crate) network: Network,
    pub(crate) history: History,
    pub(crate) faults: FaultStats,
    pub(crate) traffic: Traffic,
}

impl<S: Outbox, R: Receiver> World<S, R> {
    /// A world for `seed`, with its faults drawn and its first events scheduled.
    pub(crate) fn new<B>(seed: u64, config: SimConfig, backend: &mut B) -> World<S, R>
    where
        B: Backend<Sender = S, Receiver = R>,
    {
        let mut root = SimRng::new(seed);
        let mut setup = root.fork();
        let mut fault_rng = root.fork();
        let rng = root.fork();
        let skew = i64::try_from(config.faults.max_skew_ms).unwrap_or(i64::MAX);
        let clocks = (0..=config.senders)
            .map(|_| faults::offset_within(&mut setup, skew))
            .collect();
        let senders = (0..config.senders)
            .map(|i| {
                let ledger = idem_core::LedgerConfig {
                    seed: setup.next_u64(),
                    ..config.ledger.clone()
                };
                SenderNode {
                    name: format!("terminal-{i}"),
                    outbox: backend.sender(i, ledger),
                    up: true,
                    incarnation: 0,
                    wake_at: None,
                    partition_until: None,
                    sales_left: config.sales_per_sender,
                    created: BTreeSet::new(),
                }
            })
            .collect();
        let receiver = ReceiverNode {
            store: backend.receiver(&config),
            up: true,
            incarnation: 0,
            reset_until: None,
            pending_reset: None,
            last_good_claim: None,
        };
        let mut queue = Queue::default();
        let gap = config.sale_gap_ms();
        for sender in 0..config.senders {
            queue.push(START + setup.exponential(gap), Event::Sale { sender });
        }
        queue.push(START + config.sweep_every_ms, Event::Sweep);
        queue.push(START + config.reconcile_every_ms, Event::Reconcile);
        faults::schedule(
            &mut fault_rng,
            &config.faults,
            config.senders,
            START,
            config.window_ms,
            &mut queue,
        );
        // Drawn after everything else, so a single receiver's runs are what they were.
        let replicas = (1..config.fleet.replicas)
            .map(|_| Replica {
                up: true,
                incarnation: 0,
                clock: faults::offset_within(&mut setup, skew),
            })
            .collect();
        faults::schedule_replicas(
            &mut fault_rng,
            config.fleet.crash_every_ms,
            config.fleet.replicas,
            START,
            config.window_ms,
            &mut queue,
        );
        World {
            network: Network::new(config.network.clone(), config.senders),
            config,
            rng,
            now: START,
            queue,
            clocks,
            senders,
            receiver,
            replicas,
            history: History::default(),
            faults: FaultStats::default(),
            traffic: Traffic::default(),
        }
    }

    /// Runs until nothing is left to happen, then lets the reconciler settle what the
    /// lost executors left open.
    pub(crate) fn run(&mut self) {
        while let Some((at, event)) = self.queue.pop() {
            debug_assert!(at >= self.now, "time never runs backwards in the queue");
            self.now = at;
            self.traffic.events += 1;
            if self.traffic.events > MAX_EVENTS || at - START > MAX_SIMULATED_MS {
                let detail = format!(
                    "still busy after {} events and {} simulated days",
                    self.traffic.events,
                    (at - START) / 86_400_000
                );
                self.history.violate("quiesces", None, detail);
                return;
            }
            self.dispatch(event);
        }
        // Quiet: every intent is finished. An operator reconciles what is still open,
        // once every lease has surely run out. (A reset of the receiver's clock ends with
        // a correction event of its own, so by now that clock is within the skew again.)
        self.now += 2 * (self.config.receiver.lease_ms + self.config.faults.max_skew_ms);
        self.reconcile();
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Sale { sender } => self.sale(sender),
            Event::Wake { sender, at } => self.wake(sender, at),
            Event::Timeout {
                sender,
                incarnation,
                key,
                attempt,
            } => self.timeout(sender, incarnation, &key, attempt),
            Event::Request(request) => self.request(request),
            Event::Reply(response) => self.reply(response),
            Event::Charge(job) => self.charge(job),
            Event::Settle {
                job,
                verdict,
                outcome,
            } => self.settle(job, verdict, outcome),
            Event::Sweep => {
                self.sweep(self.config.sweep_limit);
                if self.queue.has_work() {
                    self.queue
                        .push(self.now + self.config.sweep_every_ms, Event::Sweep);
                }
            }
            Event::Reconcile => {
                self.reconcile();
                if self.queue.has_work() {
                    self.queue
                        .push(self.now + self.config.reconcile_every_ms, Event::Reconcile);
                }
            }
            Event::Fault(fault) => self.apply_fault(fault),
        }
    }

    /// The time on `node`'s clock (0 the receiver, 1 + i sender i).
    pub(crate) fn clock(&self, node: usize) -> Timestamp {
        Timestamp(self.now.saturating_add_signed(self.clocks[node]))
    }

    /// The time on the clock of the fleet's receiver `replica` (0 the first).
    pub(crate) fn replica_clock(&self, replica: usize) -> Timestamp {
        match replica {
            0 => self.clock(0),
            r => Timestamp(self.now.saturating_add_signed(self.replicas[r - 1].clock)),
        }
    }

    /// Whether the fleet's receiver `replica` is up and can reach the store.
    pub(crate) fn replica_up(&self, replica: usize) -> bool {
        self.receiver.up && (replica == 0 || self.replicas[replica - 1].up)
    }

    /// The incarnation of the fleet's receiver `replica`.
    pub(crate) fn replica_incarnation(&self, replica: usize) -> u32 {
        match replica {
            0 => self.receiver.incarnation,
            r => self.replicas[r - 1].incarnation,
        }
    }

    /// Schedules the sender's next wake-up, if its outbox has one earlier than the one
    /// in force.
    pub(crate) fn reschedule_wake(&mut self, sender: usize) {
        let offset = self.clocks[sender + 1];
        let now = self.now;
        let node = &mut self.senders[sender];
        if !node.up {
            return;
        }
        let Some(wake) = node.outbox.next_wakeup() else {
            return;
        };
        let at = wake.as_millis().saturating_add_signed(-offset).max(now);
        if node.wake_at.is_none_or(|scheduled| at < scheduled) {
            node.wake_at = Some(at);
            self.queue.push(at, Event::Wake { sender, at });
        }
    }

    fn sale(&mut self, sender: usize) {
        let node = &mut self.senders[sender];
        if node.sales_left == 0 {
            return;
        }
        node.sales_left -= 1;
        if node.sales_left > 0 {
            let gap = self.config.sale_gap_ms();
            self.queue
                .push(self.now + self.rng.exponential(gap), Event::Sale { sender });
        }
        if !node.up {
            self.traffic.missed_sales += 1;
            return;
        }
        let operation = if self.rng.chance(self.config.two_phase_share) {
            TWO_PHASE_OP
        } else {
            ATOMIC_OP
        };
        let len = self.rng.range(4, 48);
        let payload: Vec<u8> = (0..len)
            .map(|_| self.rng.next_u64().to_le_bytes()[0])
            .collect();
        let fail = self.rng.chance(self.config.faults.sale_failure);
        let random = self.rng.bytes16();
        let now = self.clock(sender + 1);
        let node = &mut self.senders[sender];
        match node
            .outbox
            .create_sale(operation, payload, now, random, fail)
        {
            Some(intent) => {
                self.traffic.intents += 1;
                let name = intent_name(&node.name, &intent.key);
                node.created.insert(intent.key);
                self.history.note(&name, self.now, Note::Created);
            }
            None => {
                assert!(fail, "a sale without a failure must commit");
                self.faults.failed_sales += 1;
            }
        }
        self.reschedule_wake(sender);
    }

    fn wake(&mut self, sender: usize, at: u64) {
        let now = self.clock(sender + 1);
        let node = &mut self.senders[sender];
        if !node.up || node.wake_at != Some(at) {
            return;
        }
        node.wake_at = None;
        let attempts = node.outbox.due(now);
        for attempt in attempts {
            self.send(sender, attempt);
        }
        self.reschedule_wake(sender);
    }

    fn send(&mut self, sender: usize, attempt: Attempt) {
        self.traffic.attempts += 1;
        let node = &self.senders[sender];
        let request = Request {
            sender,
            incarnation: node.incarnation,
            key: Arc::from(attempt.key.as_str()),
            operation: Arc::from(attempt.operation.as_str()),
            payload: Arc::from(attempt.payload),
            attempt: attempt.attempt,
        };
        let name = intent_name(&node.name, &attempt.key);
        self.history
            .note(&name, self.now, Note::Sent(attempt.attempt));
        for delay in self
            .network
            .transmit(&mut self.rng, sender, Direction::Request)
        {
            self.queue
                .push(self.now + delay, Event::Request(request.clone()));
        }
        self.queue.push(
            self.now + self.config.request_timeout_ms,
            Event::Timeout {
                sender,
                incarnation: request.incarnation,
                key: request.key,
                attempt: request.attempt,
            },
        );
    }

    fn timeout(&mut self, sender: usize, incarnation: u32, key: &str, attempt: u32) {
        let now = self.clock(sender + 1);
        let node = &mut self.senders[sender];
        if !node.up || node.incarnation != incarnation {
            return;
        }
        let current = node
            .outbox
            .intent(key)
            .is_some_and(|i| i.state == IntentState::InFlight && i.attempts == attempt);
        if !current {
            return;
        }
        let _ = node.outbox.on_transport_error(key, now);
        self.traffic.timeouts += 1;
        let name = intent_name(&node.name, key);
        self.history.note(&name, self.now, Note::TimedOut(attempt));
        self.reschedule_wake(sender);
    }

    fn reply(&mut self, response: Response) {
        let now = self.clock(response.sender + 1);
        let node = &mut self.senders[response.sender];
        if !node.up || node.incarnation != response.incarnation {
            self.traffic.stale_replies += 1;
            return;
        }
        self.traffic.replies += 1;
        let name = intent_name(&node.name, &response.key);
        self.history
            .note(&name, self.now, Note::Delivered(response.reply.status));
        let _ = node.outbox.on_reply(&response.key, response.reply, now);
        self.reschedule_wake(response.sender);
    }
}
