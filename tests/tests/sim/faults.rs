//! Fault injection: which faults a run suffers, drawn from its seed up front, and what
//! each one does to the world.
//!
//! Clock jumps keep every clock within `max_skew_ms` of true time, so a clock may jump
//! back by up to twice that and forward by up to twice that. The senders' safety margin
//! must cover four times the skew plus the longest time in flight (see
//! [`FaultConfig::margin_needed_ms`]); within that bound exactly-once must hold.
//!
//! Clock resets, off unless a scenario turns them on, go far beyond the skew: the
//! receiver's clock is set back by hours or days (a terminal whose real-time clock lost
//! its time) and stays there until it is corrected. What bounds their harm is the
//! receiver's clock floor: a write never uses a time behind the latest one a write used.
//! The floor is only as recent as the receiver's latest write, so a reset strikes while
//! the receiver is busy: within `clock_reset_quiet_ms` of a claim it made with a good
//! clock, or else right after its next such claim. (A receiver idle for hours before its
//! clock went back would settle at that old time; then the margin has to cover the idle
//! time too, as docs/design.md §2 says: retention covers the longest offline period plus the
//! clock error.)

use super::events::{Event, Queue};
use super::network::Cut;
use super::receiver::Receiver;
use super::rng::SimRng;
use super::sender::Outbox;
use super::world::World;

/// How often each fault strikes. Intervals are means of exponential waits; 0 turns a
/// fault off.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FaultConfig {
    /// Mean time between crashes of one sender.
    pub sender_crash_every_ms: u64,
    /// A crashed sender stays down up to this long.
    pub sender_down_max_ms: u64,
    /// Share of sender crashes that are long outages (a terminal off for a weekend).
    pub long_outage_share: f64,
    /// Length range of a long outage: past the deadline, so intents expire.
    pub long_outage_ms: (u64, u64),
    /// Mean time between receiver crashes.
    pub receiver_crash_every_ms: u64,
    /// A crashed receiver stays down up to this long.
    pub receiver_down_max_ms: u64,
    /// Mean time between clock jumps (of any node).
    pub clock_jump_every_ms: u64,
    /// Every clock stays within this of true time.
    pub max_skew_ms: u64,
    /// Mean time between partitions of one sender's link.
    pub partition_every_ms: u64,
    /// Mean length of an ordinary partition.
    pub partition_mean_ms: u64,
    /// Share of partitions that are long.
    pub long_partition_share: f64,
    /// Length range of a long partition.
    pub long_partition_ms: (u64, u64),
    /// Mean time between resets of the receiver's clock; 0 (the default scenarios) turns
    /// them off.
    pub clock_reset_every_ms: u64,
    /// How far back a reset sets the receiver's clock, a range.
    pub clock_reset_back_ms: (u64, u64),
    /// How long a reset lasts before the clock is corrected, a range.
    pub clock_reset_for_ms: (u64, u64),
    /// A reset strikes only when the receiver made a claim with a good clock within this
    /// long; otherwise it waits for the next such claim.
    pub clock_reset_quiet_ms: u64,
    /// Mean time between extra receiver sweeps, besides the periodic one.
    pub sweep_every_ms: u64,
    /// Probability that a sale's own write fails, rolling back the sale and its intent.
    pub sale_failure: f64,
    /// Probability that the atomic path's business work fails and rolls back.
    pub work_failure: f64,
    /// Probability that a two-phase execution takes longer than the lease.
    pub slow_execution: f64,
    /// Probability that the receiver crashes while a two-phase execution is in flight
    /// (before the provider call, or between it and complete), for each of the two
    /// windows: the executions such a crash loses are what the reconciler must settle.
    pub crash_mid_execution: f64,
}

impl FaultConfig {
    /// The safety margin that covers these clock faults and `max_delay_ms` in flight:
    /// a sender clock behind by the skew at creation and ahead at the last send, and the
    /// receiver's ahead at that send's arrival and behind at the completion.
    ///
    /// A reset puts the receiver's clock further behind at a completion. With the
    /// `clock_floor`, the completion uses the floor instead, the time of a claim at most
    /// `clock_reset_quiet_ms` before the reset, which lasts at most
    /// `clock_reset_for_ms.1`: behind by those two more. Without it, behind by the whole
    /// reset.
    #[must_use]
    pub(crate) fn margin_needed_ms(&self, max_delay_ms: u64, clock_floor: bool) -> u64 {
        let reset = if self.clock_reset_every_ms == 0 {
            0
        } else if clock_floor {
            self.clock_reset_for_ms.1 + self.clock_reset_quiet_ms
        } else {
            self.clock_reset_back_ms.1
        };
        4 * self.max_skew_ms + max_delay_ms + reset
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A sender process dies; what it had not committed is lost.
    SenderCrash {
        /// Which.
        sender: usize,
    },
    /// The sender starts again from its file.
    SenderRestart {
        /// Which.
        sender: usize,
    },
    /// The receiver process dies with its executors in flight.
    ReceiverCrash,
    /// The receiver starts again from its file.
    ReceiverRestart,
    /// One more receiver of a fleet (not the first, which is [`Fault::ReceiverCrash`]'s)
    /// dies with its executors in flight; the shared store stays up.
    ReplicaCrash {
        /// Which: 1 for the second receiver, and so on.
        replica: usize,
    },
    /// That receiver starts again.
    ReplicaRestart {
        /// Which.
        replica: usize,
    },
    /// A clock is set to `offset_ms` from true time (a jump forward or back).
    ClockJump {
        /// 0 for the receiver, 1 + i for sender i.
        node: usize,
        /// The new offset.
        offset_ms: i64,
    },
    /// The receiver's clock is to be reset `back_ms` behind true time for `for_ms`, as
    /// soon as the receiver is busy (see the module doc); when it strikes, it is logged
    /// as a [`Fault::ClockJump`] of node 0. Nothing happens while a reset is already in
    /// force or waiting.
    ClockReset {
        /// How far back.
        back_ms: u64,
        /// For how long.
        for_ms: u64,
    },
    /// The reset that was to last until `until` (true time) ends: the receiver's clock is
    /// set within the skew again.
    ClockCorrected {
        /// The end time it was scheduled with.
        until: u64,
    },
    /// A sender's link is cut until `until` (true time).
    Partition {
        /// Which sender.
        sender: usize,
        /// What is cut.
        cut: Cut,
        /// When it heals.
        until: u64,
    },
    /// The partition that was to end at `until` ends (unless a later one replaced it).
    Heal {
        /// Which sender.
        sender: usize,
        /// The end time it was scheduled with.
        until: u64,
    },
    /// An operator sweeps by hand.
    Sweep {
        /// Records at most.
        limit: usize,
    },
}

/// How many faults of each kind struck.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FaultStats {
    /// Sender crashes.
    pub sender_crashes: u64,
    /// Of those, long outages.
    pub long_outages: u64,
    /// Receiver crashes.
    pub receiver_crashes: u64,
    /// Crashes of the other receivers of a fleet (the store stays up).
    pub replica_crashes: u64,
    /// Two-phase executions lost with a crashed receiver.
    pub lost_executions: u64,
    /// Clock jumps backwards.
    pub clock_jumps_back: u64,
    /// Clock jumps forwards.
    pub clock_jumps_forward: u64,
    /// Resets of the receiver's clock (each also counted as a jump back).
    pub clock_resets: u64,
    /// Claims the receiver made while its clock was reset: the outcomes a reset could
    /// make expire early.
    pub claims_in_reset: u64,
    /// Partitions of any length.
    pub partitions: u64,
    /// Partitions longer than an hour.
    pub long_partitions: u64,
    /// Extra sweeps.
    pub extra_sweeps: u64,
    /// Sales whose write failed (neither sale nor intent may exist).
    pub failed_sales: u64,
    /// Atomic executions whose work failed and rolled back.
    pub rolled_back_work: u64,
    /// Two-phase executions slower than the lease.
    pub slow_executions: u64,
}

impl FaultStats {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &FaultStats) {
        self.sender_crashes += other.sender_crashes;
        self.long_outages += other.long_outages;
        self.receiver_crashes += other.receiver_crashes;
        self.replica_crashes += other.replica_crashes;
        self.lost_executions += other.lost_executions;
        self.clock_jumps_back += other.clock_jumps_back;
        self.clock_jumps_forward += other.clock_jumps_forward;
        self.clock_resets += other.clock_resets;
        self.claims_in_reset += other.claims_in_reset;
        self.partitions += other.partitions;
        self.long_partitions += other.long_partitions;
        self.extra_sweeps += other.extra_sweeps;
        self.failed_sales += other.failed_sales;
        self.rolled_back_work += other.rolled_back_work;
        self.slow_executions += other.slow_executions;
    }

    /// Every fault counted once.
    #[must_use]
    pub(crate) fn total(&self) -> u64 {
        self.sender_crashes
            + self.receiver_crashes
            + self.replica_crashes
            + self.clock_jumps_back
            + self.clock_jumps_forward
            + self.partitions
            + self.extra_sweeps
            + self.failed_sales
            + self.rolled_back_work
            + self.slow_executions
    }
}

/// Draws the run's faults in `[start, start + window)` and schedules them.
/// Crashes of the receivers of a fleet after the first, each on its own, through the
/// window.
pub(crate) fn schedule_replicas(
    rng: &mut SimRng,
    every_ms: u64,
    replicas: usize,
    start: u64,
    window: u64,
    queue: &mut Queue,
) {
    for replica in 1..replicas {
        for at in arrivals(rng, every_ms, start, start + window) {
            queue.push(at, Event::Fault(Fault::ReplicaCrash { replica }));
        }
    }
}

pub(crate) fn schedule(
    rng: &mut SimRng,
    config: &FaultConfig,
    senders: usize,
    start: u64,
    window: u64,
    queue: &mut Queue,
) {
    let end = start + window;
    for sender in 0..senders {
        for at in arrivals(rng, config.sender_crash_every_ms, start, end) {
            queue.push(at, Event::Fault(Fault::SenderCrash { sender }));
        }
        for at in arrivals(rng, config.partition_every_ms, start, end) {
            let len = if rng.chance(config.long_partition_share) {
                rng.range(config.long_partition_ms.0, config.long_partition_ms.1)
            } else {
                rng.exponential(config.partition_mean_ms)
            };
            let cut = match rng.below(3) {
                0 => Cut::Both,
                1 => Cut::Requests,
                _ => Cut::Replies,
            };
            let until = at + len;
            queue.push(at, Event::Fault(Fault::Partition { sender, cut, until }));
        }
    }
    for at in arrivals(rng, config.receiver_crash_every_ms, start, end) {
        queue.push(at, Event::Fault(Fault::ReceiverCrash));
    }
    let skew = i64::try_from(config.max_skew_ms).unwrap_or(i64::MAX);
    for at in arrivals(rng, config.clock_jump_every_ms, start, end) {
        let node = rng.below(senders + 1);
        let offset_ms = offset_within(rng, skew);
        queue.push(at, Event::Fault(Fault::ClockJump { node, offset_ms }));
    }
    for at in arrivals(rng, config.sweep_every_ms, start, end) {
        let limit = rng.below(200) + 1;
        queue.push(at, Event::Fault(Fault::Sweep { limit }));
    }
    // Last, and drawing nothing when off: the default scenarios draw what they drew
    // before resets existed.
    for at in arrivals(rng, config.clock_reset_every_ms, start, end) {
        let (back, lasts) = (config.clock_reset_back_ms, config.clock_reset_for_ms);
        let back_ms = rng.range(back.0, back.1);
        let for_ms = rng.range(lasts.0, lasts.1);
        queue.push(at, Event::Fault(Fault::ClockReset { back_ms, for_ms }));
    }
}

/// The times of a Poisson process with mean interval `mean` in `[start, end)`; none
/// when `mean` is 0.
fn arrivals(rng: &mut SimRng, mean: u64, start: u64, end: u64) -> Vec<u64> {
    let mut times = Vec::new();
    if mean == 0 {
        return times;
    }
    let mut at = start + rng.exponential(mean);
    while at < end {
        times.push(at);
        at += rng.exponential(mean);
    }
    times
}

/// A clock offset uniform in `[-skew, skew]`.
pub(crate) fn offset_within(rng: &mut SimRng, skew: i64) -> i64 {
    let span = u64::try_from(skew).unwrap_or(0).saturating_mul(2);
    i64::try_from(rng.range(0, span)).unwrap_or(0) - skew
}

impl<S: Outbox, R: Receiver> World<S, R> {
    /// Applies one fault.
    pub(super) fn apply_fault(&mut self, fault: Fault) {
        self.history.fault(self.now, &fault);
        match fault {
            Fault::SenderCrash { sender } => {
                let node = &mut self.senders[sender];
                if !node.up {
                    return;
                }
                node.up = false;
                node.incarnation += 1;
                node.wake_at = None;
                node.outbox.crash();
                self.faults.sender_crashes += 1;
                let c = &self.config.faults;
                let down = if self.rng.chance(c.long_outage_share) {
                    self.faults.long_outages += 1;
                    self.rng.range(c.long_outage_ms.0, c.long_outage_ms.1)
                } else {
                    self.rng.range(1, c.sender_down_max_ms.max(1))
                };
                self.queue.push(
                    self.now + down,
                    Event::Fault(Fault::SenderRestart { sender }),
                );
            }
            Fault::SenderRestart { sender } => {
                let node = &mut self.senders[sender];
                node.outbox.restart();
                node.up = true;
                self.reschedule_wake(sender);
            }
            Fault::ReceiverCrash => {
                if !self.receiver.up {
                    return;
                }
                self.receiver.up = false;
                self.receiver.incarnation += 1;
                // The store went down under every receiver of a fleet: their executors in
                // flight are lost with it.
                for replica in &mut self.replicas {
                    replica.incarnation += 1;
                }
                self.receiver.store.crash();
                self.faults.receiver_crashes += 1;
                let down = self
                    .rng
                    .range(1, self.config.faults.receiver_down_max_ms.max(1));
                self.queue
                    .push(self.now + down, Event::Fault(Fault::ReceiverRestart));
            }
            Fault::ReceiverRestart => {
                self.receiver.store.restart();
                self.receiver.up = true;
            }
            Fault::ReplicaCrash { replica } => {
                let node = &mut self.replicas[replica - 1];
                if !node.up {
                    return;
                }
                node.up = false;
                node.incarnation += 1;
                self.faults.replica_crashes += 1;
                let down = self.rng.range(1, self.config.fleet.down_max_ms.max(1));
                self.queue.push(
                    self.now + down,
                    Event::Fault(Fault::ReplicaRestart { replica }),
                );
            }
            Fault::ReplicaRestart { replica } => {
                self.replicas[replica - 1].up = true;
            }
            Fault::ClockJump { node, offset_ms } => {
                let old = std::mem::replace(&mut self.clocks[node], offset_ms);
                if offset_ms < old {
                    self.faults.clock_jumps_back += 1;
                } else {
                    self.faults.clock_jumps_forward += 1;
                }
                if node > 0 {
                    // The sender's next wake-up moved in true time.
                    self.senders[node - 1].wake_at = None;
                    self.reschedule_wake(node - 1);
                }
            }
            Fault::ClockReset { back_ms, for_ms } => {
                let receiver = &mut self.receiver;
                if receiver.reset_until.is_some() || receiver.pending_reset.is_some() {
                    // Already reset, or about to be.
                    return;
                }
                let busy = receiver
                    .last_good_claim
                    .is_some_and(|at| self.now - at <= self.config.faults.clock_reset_quiet_ms);
                if busy {
                    self.reset_receiver_clock(back_ms, for_ms);
                } else {
                    receiver.pending_reset = Some((back_ms, for_ms));
                }
            }
            Fault::ClockCorrected { until } => {
                if self.receiver.reset_until == Some(until) {
                    self.receiver.reset_until = None;
                    let skew = i64::try_from(self.config.faults.max_skew_ms).unwrap_or(i64::MAX);
                    let offset_ms = offset_within(&mut self.rng, skew);
                    self.apply_fault(Fault::ClockJump { node: 0, offset_ms });
                }
            }
            Fault::Partition { sender, cut, until } => {
                self.network.partition(sender, cut);
                self.senders[sender].partition_until = Some(until);
                self.faults.partitions += 1;
                if until - self.now > 3_600_000 {
                    self.faults.long_partitions += 1;
                }
                self.queue
                    .push(until, Event::Fault(Fault::Heal { sender, until }));
            }
            Fault::Heal { sender, until } => {
                if self.senders[sender].partition_until == Some(until) {
                    self.network.partition(sender, Cut::None);
                    self.senders[sender].partition_until = None;
                }
            }
            Fault::Sweep { limit } => {
                self.faults.extra_sweeps += 1;
                self.sweep(limit);
            }
        }
    }

    /// Sets the receiver's clock `back_ms` behind true time, until a correction `for_ms`
    /// from now.
    fn reset_receiver_clock(&mut self, back_ms: u64, for_ms: u64) {
        let until = self.now + for_ms;
        self.receiver.reset_until = Some(until);
        self.faults.clock_resets += 1;
        let offset_ms = -i64::try_from(back_ms).unwrap_or(i64::MAX);
        self.apply_fault(Fault::ClockJump { node: 0, offset_ms });
        self.queue
            .push(until, Event::Fault(Fault::ClockCorrected { until }));
    }

    /// The receiver claimed a key at `self.now`; with a good clock, that claim raised its
    /// clock floor to within the skew of true time, and a reset waiting for a busy
    /// receiver strikes now.
    pub(super) fn receiver_claimed(&mut self) {
        if self.receiver.reset_until.is_some() {
            self.faults.claims_in_reset += 1;
            return;
        }
        self.receiver.last_good_claim = Some(self.now);
        if let Some((back_ms, for_ms)) = self.receiver.pending_reset.take() {
            self.reset_receiver_clock(back_ms, for_ms);
        }
    }
}
