//! The receiver's side of every event: requests on the atomic and two-phase paths, the
//! two-phase executor's steps, sweeps and the reconciler.
//!
//! A two-phase executor checks that it still holds the key (a heartbeat with its
//! generation) right before it calls the provider, and settles after; a receiver crash
//! loses it between any two steps. The reconciler settles Unknown records by asking the
//! business table whether the effect ran, as an operator would.

use idem_core::http::{self, AnswerConfig};
use idem_core::protocol::{Decision, Resolution};
use idem_core::{Fingerprint, Outcome, RecordId, Reply, State, Timestamp, Verdict};

use super::events::{Event, Job, Request, Response};
use super::faults::Fault;
use super::history::Note;
use super::network::Direction;
use super::receiver::{Atomic, Receiver, TWO_PHASE_OP, effect_key};
use super::sender::Outbox;
use super::world::World;

/// The reply that carries a settled outcome.
fn outcome_reply(outcome: Outcome) -> Reply {
    Reply {
        status: u16::try_from(outcome.code).unwrap_or(500),
        body: outcome.body,
        retry_at: None,
    }
}

/// The crash of the fleet's receiver `replica`: the first one's is the store's.
fn crash_of(replica: usize) -> Fault {
    match replica {
        0 => Fault::ReceiverCrash,
        replica => Fault::ReplicaCrash { replica },
    }
}

/// A reply without a body.
fn status(status: u16) -> Reply {
    Reply {
        status,
        ..Reply::default()
    }
}

/// The HTTP answer to a decision that did not claim: the status and body of the shared
/// mapping (`idem_core::http`, docs/design.md §10). `retry_at` is the lease end of a 409, as the
/// receiver knows it; the simulated senders take it as is (a real sender reads the
/// `Retry-After` seconds against its own clock).
fn decision_reply(decision: Decision) -> Reply {
    let retry_at = match &decision {
        Decision::InProgress { lease_until, .. } => Some(*lease_until),
        _ => None,
    };
    // `now` only sets the 409's Retry-After header, which the simulation does not read.
    let answer = http::answer(&decision, Timestamp(0), &AnswerConfig::default())
        // Callers handle a claim before asking for a reply.
        .expect("a claim is executed, not answered");
    Reply {
        status: answer.status,
        body: answer.body,
        retry_at,
    }
}

/// The answer when the outcome of a request is unknown (a fenced or refused executor).
fn unknown_reply() -> Reply {
    let answer = http::Problem::unknown(AnswerConfig::default().unknown_retry_after_s).answer();
    Reply {
        status: answer.status,
        body: answer.body,
        retry_at: None,
    }
}

impl<S: Outbox, R: Receiver> World<S, R> {
    pub(crate) fn request(&mut self, request: Request) {
        self.traffic.arrivals += 1;
        // In a fleet, the load balancer hands the request to any receiver.
        let replica = if self.replicas.is_empty() {
            0
        } else {
            self.rng.below(self.replicas.len() + 1)
        };
        if !self.replica_up(replica) {
            self.traffic.refused += 1;
            return;
        }
        let tenant = &self.senders[request.sender].name;
        let id = RecordId::new(tenant, &request.operation, &request.key)
            .expect("the senders make valid ids");
        let key = effect_key(&id);
        self.history
            .note(&key, self.now, Note::Arrived(request.attempt));
        let fingerprint = Fingerprint::of_bytes(&request.payload);
        let now = self.replica_clock(replica);
        if &*request.operation == TWO_PHASE_OP {
            match self.receiver.store.begin(&id, fingerprint, now) {
                Decision::Claimed { generation, .. } => {
                    self.history.claimed(&key, self.now, generation);
                    self.receiver_claimed();
                    let lease = self.config.receiver.lease_ms;
                    let took = if self.rng.chance(self.config.faults.slow_execution) {
                        self.faults.slow_executions += 1;
                        self.rng.range(lease, 3 * lease)
                    } else {
                        self.rng.range(5, 3_000)
                    };
                    let job = Job {
                        request,
                        id,
                        generation,
                        replica,
                        incarnation: self.replica_incarnation(replica),
                    };
                    self.queue.push(self.now + took, Event::Charge(job));
                    if self.rng.chance(self.config.faults.crash_mid_execution) {
                        // Dies before the provider call: nothing ran.
                        let at = self.now + self.rng.range(0, took - 1);
                        self.queue.push(at, Event::Fault(crash_of(replica)));
                    }
                }
                decision => self.answer(&request, &key, decision_reply(decision)),
            }
            return;
        }
        let fail = self.rng.chance(self.config.faults.work_failure);
        let atomic = self
            .receiver
            .store
            .execute(&id, fingerprint, &request.payload, now, fail);
        match atomic {
            Atomic::Ran {
                run,
                outcome,
                generation,
                ..
            } => {
                self.history.claimed(&key, self.now, generation);
                self.receiver_claimed();
                self.history.note(&key, self.now, Note::Ran(run));
                self.traffic.executions += 1;
                self.answer(&request, &key, outcome_reply(outcome));
            }
            Atomic::NotRun(decision) => self.answer(&request, &key, decision_reply(decision)),
            Atomic::RolledBack => {
                self.faults.rolled_back_work += 1;
                self.answer(&request, &key, status(500));
            }
        }
    }

    /// The executor of `job` calls the provider, if it still holds the key.
    pub(crate) fn charge(&mut self, job: Job) {
        let key = effect_key(&job.id);
        if !self.executor_alive(&job, &key) {
            return;
        }
        let now = self.replica_clock(job.replica);
        if !self.receiver.store.heartbeat(&job.id, job.generation, now) {
            // Fenced: the key was reconciled or claimed again while this executor was
            // slow. It must not touch the provider.
            self.history.note(&key, self.now, Note::Fenced);
            self.answer(&job.request, &key, unknown_reply());
            return;
        }
        let (run, verdict, outcome) = self.receiver.store.charge(&job.id, &job.request.payload);
        self.history.note(&key, self.now, Note::Ran(run));
        self.traffic.executions += 1;
        let after = self.rng.range(1, 200);
        if self.rng.chance(self.config.faults.crash_mid_execution) {
            // Dies after the provider call, before complete: it ran, nobody was told.
            let at = self.now + self.rng.range(0, after - 1);
            self.queue.push(at, Event::Fault(crash_of(job.replica)));
        }
        self.queue.push(
            self.now + after,
            Event::Settle {
                job,
                verdict,
                outcome,
            },
        );
    }

    /// The executor of `job` settles the key with the provider's answer.
    pub(crate) fn settle(&mut self, job: Job, verdict: Verdict, outcome: Outcome) {
        let key = effect_key(&job.id);
        if !self.executor_alive(&job, &key) {
            return;
        }
        let now = self.replica_clock(job.replica);
        let settled =
            self.receiver
                .store
                .complete(&job.id, job.generation, verdict, outcome.clone(), now);
        let reply = if settled {
            outcome_reply(outcome)
        } else {
            // Refused as stale: the record went Unknown meanwhile; a reconciler settles
            // it from the provider's answer and the sender's retry gets that.
            unknown_reply()
        };
        self.answer(&job.request, &key, reply);
    }

    fn executor_alive(&mut self, job: &Job, key: &str) -> bool {
        if self.replica_up(job.replica) && job.incarnation == self.replica_incarnation(job.replica)
        {
            return true;
        }
        self.faults.lost_executions += 1;
        self.history.note(key, self.now, Note::ExecutorLost);
        false
    }

    fn answer(&mut self, request: &Request, key: &str, reply: Reply) {
        self.traffic.answers += 1;
        self.history.answered(key, self.now, &reply);
        let response = Response {
            sender: request.sender,
            incarnation: request.incarnation,
            key: request.key.clone(),
            reply,
        };
        for delay in self
            .network
            .transmit(&mut self.rng, request.sender, Direction::Reply)
        {
            self.queue
                .push(self.now + delay, Event::Reply(response.clone()));
        }
    }

    /// Deletes up to `limit` expired records, if the receiver is up.
    pub(crate) fn sweep(&mut self, limit: usize) {
        if !self.receiver.up {
            return;
        }
        let now = self.clock(0);
        let removed = self.receiver.store.sweep(now, limit);
        self.traffic.swept += u64::try_from(removed).unwrap_or(u64::MAX);
    }

    /// Turns Pending records whose executor is surely gone Unknown, then settles every
    /// Unknown record from the business table: the effect ran → its recorded outcome;
    /// it did not → NotExecuted, so a retry claims a fresh generation.
    pub(crate) fn reconcile(&mut self) {
        if !self.receiver.up {
            return;
        }
        let now = self.clock(0);
        let grace = self.config.receiver.lease_ms;
        for (id, record) in self.receiver.store.records(Some(State::Pending)) {
            let abandoned = record
                .lease_until()
                .is_some_and(|until| until.plus_millis(grace) <= now);
            if abandoned
                && self
                    .receiver
                    .store
                    .mark_unknown(&id, record.generation, now)
            {
                let key = effect_key(&id);
                self.history.note(
                    &key,
                    self.now,
                    Note::Reconciled("abandoned claim marked unknown"),
                );
            }
        }
        for (id, _) in self.receiver.store.records(Some(State::Unknown)) {
            let execution = self.receiver.store.execution(&id);
            let ran = execution.is_some();
            let (resolution, what) = match execution {
                Some(run) if run.verdict == Verdict::Succeeded => (
                    Resolution::Succeeded(run.outcome),
                    "ran: resolved succeeded",
                ),
                Some(run) => (Resolution::Failed(run.outcome), "ran: resolved failed"),
                None => (
                    Resolution::NotExecuted,
                    "did not run: resolved not executed",
                ),
            };
            if self.receiver.store.resolve(&id, resolution, now) {
                if ran {
                    self.traffic.reconciled_ran += 1;
                } else {
                    self.traffic.reconciled_not_run += 1;
                }
                self.history
                    .note(&effect_key(&id), self.now, Note::Reconciled(what));
            }
        }
    }
}
