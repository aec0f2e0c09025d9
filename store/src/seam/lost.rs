//! Claims whose answer was lost, written once for every server engine (docs/design.md
//! §16). A begin sends its claim; the connection dies before the answer comes back (a
//! failover, a server restart). The claim may have landed, and its caller was told
//! "nothing was executed, retry": nobody will run it or settle it, so it would stand
//! until its lease ends and then read Unknown, stranding the key until an operator looks.
//!
//! So every claim carries a mark of the begin that sent it ([`Claimant`]), and a begin
//! whose answer was lost gives its claim back once the database answers again: it
//! finds the record its claim wrote, by that mark, and idem-core decides the input that
//! undoes it ([`give_back`]). Nothing was forwarded, so both are true to what happened:
//! a claim still Pending is released, one already Unknown (its lease ran out meanwhile)
//! is resolved as not executed. Either way the key is free and a retry claims it. A
//! record with another mark is someone else's claim and is left alone.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_core::protocol::{self, Resolution};
use idem_core::{Generation, Record, RecordId, Status};

use crate::error::Error;

/// The mark a claim carries of the begin that sent it: unique among the claims of a
/// key, so that a begin whose answer was lost tells its own claim from one a retry
/// made elsewhere meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claimant(pub(crate) i64);

/// Hands out [`Claimant`]s: a random start per store, then one more each time, so that
/// two replicas' marks of one key meet only by a chance of about one in 2⁶⁴.
#[derive(Debug)]
pub(crate) struct Claimants {
    next: AtomicU64,
}

impl Claimants {
    /// Marks starting at a random point, from the operating system's random keys of
    /// the standard library's hash maps.
    pub(crate) fn new() -> Claimants {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Claimants {
            next: AtomicU64::new(hasher.finish()),
        }
    }

    /// The mark of the next claim.
    pub(crate) fn next(&self) -> Claimant {
        Claimant(self.next.fetch_add(1, Ordering::Relaxed).cast_signed())
    }
}

/// How long a lost claim's give-back waits for the database to answer again (a
/// failover, a restart) before it leaves the claim to its lease.
pub(crate) const GIVE_BACK_WINDOW: Duration = Duration::from_secs(600);

/// What an engine supplies to give back a lost claim: a read by the claim's mark, and a
/// delete conditioned on the record read.
pub(crate) trait LostClaims {
    /// True when `e` says the database did not answer (it is down, restarting, failing
    /// over): the give-back tries again.
    fn unanswered(e: &Error) -> bool;

    /// The record under `id` when the claim that wrote it carries `claimant`'s mark.
    async fn claimed_by(&self, id: &RecordId, claimant: Claimant) -> Result<Option<Record>, Error>;

    /// Deletes the record under `id` if it is still `record` (its generation and state)
    /// with `claimant`'s mark; false, with nothing written, when it is not.
    async fn delete_claimed(
        &self,
        id: &RecordId,
        claimant: Claimant,
        record: &Record,
    ) -> Result<bool, Error>;
}

/// What became of a lost claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GivenBack {
    /// The claim had not landed, or the key has moved on to another claim: nothing to
    /// give back.
    NotFound,
    /// The claim had landed and is deleted: a retry claims the key.
    Released {
        /// The generation the lost claim had been given.
        generation: Generation,
    },
}

/// Gives back `claimant`'s claim of `id` if it landed, as idem-core decides: a Pending
/// claim is released by its generation, an Unknown one (its lease ran out meanwhile) is
/// resolved as not executed. A record that changed between the read and the delete is
/// read again; one that is settled is not this begin's to touch (its caller had no
/// generation to settle it with, so it is not one).
pub(crate) async fn give_back(
    engine: &impl LostClaims,
    id: &RecordId,
    claimant: Claimant,
    config: &idem_core::Config,
) -> Result<GivenBack, Error> {
    // A record changes under a give-back only by its lease running out (Pending to
    // Unknown); twice is the most it can.
    for _ in 0..3 {
        let Some(record) = engine.claimed_by(id, claimant).await? else {
            return Ok(GivenBack::NotFound);
        };
        match record.status {
            Status::Pending { .. } => {
                let protocol::Delete = protocol::release(Some(&record), record.generation)?;
            }
            Status::Unknown => {
                let kept = protocol::resolve(
                    Some(&record),
                    Resolution::NotExecuted,
                    record.updated_at,
                    config,
                )?;
                debug_assert!(kept.is_none(), "not executed leaves no record");
            }
            Status::Settled { .. } | Status::Tombstone { .. } => {
                return Ok(GivenBack::NotFound);
            }
        }
        if engine.delete_claimed(id, claimant, &record).await? {
            return Ok(GivenBack::Released {
                generation: record.generation,
            });
        }
    }
    Ok(GivenBack::NotFound)
}

/// Gives back `claimant`'s claim of `id` once the database answers again, for an engine
/// to run in a task of its own.
///
/// The session that sent the claim may outlive its connection: a statement the server
/// still runs, or a commit still ending, can land the claim after the connection broke.
/// So a claim not found yet is looked for again until `may_land_for` has passed since
/// the loss; a database that does not answer ([`LostClaims::unanswered`]) is tried
/// again, for at most [`GIVE_BACK_WINDOW`]. Each try is a read by the key and the
/// claim's mark, and a delete conditioned on it, so trying again is harmless.
pub(crate) async fn give_back_until<E: LostClaims>(
    engine: &E,
    id: &RecordId,
    claimant: Claimant,
    config: &idem_core::Config,
    may_land_for: Duration,
) -> Result<GivenBack, Error> {
    let lost_at = tokio::time::Instant::now();
    let deadline = lost_at + GIVE_BACK_WINDOW;
    let may_land_until = lost_at + may_land_for;
    let mut pause = Duration::from_millis(25);
    loop {
        let tried = give_back(engine, id, claimant, config).await;
        let again = match &tried {
            Ok(GivenBack::NotFound) => tokio::time::Instant::now() < may_land_until,
            Err(e) if E::unanswered(e) => tokio::time::Instant::now() + pause < deadline,
            // Given back, or refused for good: the claim, if any, is left to its lease.
            Ok(GivenBack::Released { .. }) | Err(_) => false,
        };
        if !again {
            return tried;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use idem_core::{Config, Fingerprint, Outcome, Timestamp, Verdict};

    use super::*;

    /// One key's row in memory: the record and its claimant's mark; `changes` records
    /// that a write lands between a give-back's read and its delete.
    #[derive(Default)]
    struct Row {
        row: Mutex<Option<(Record, Claimant)>>,
        changes: Mutex<Vec<Record>>,
    }

    impl LostClaims for Row {
        fn unanswered(_: &Error) -> bool {
            false
        }

        async fn claimed_by(
            &self,
            _id: &RecordId,
            claimant: Claimant,
        ) -> Result<Option<Record>, Error> {
            let row = self.row.lock().unwrap();
            Ok(row
                .as_ref()
                .filter(|(_, mark)| *mark == claimant)
                .map(|(record, _)| record.clone()))
        }

        async fn delete_claimed(
            &self,
            _id: &RecordId,
            claimant: Claimant,
            record: &Record,
        ) -> Result<bool, Error> {
            let mut row = self.row.lock().unwrap();
            if let Some(changed) = self.changes.lock().unwrap().pop() {
                *row = Some((changed, claimant));
                return Ok(false);
            }
            let held = row.as_ref().is_some_and(|(r, mark)| {
                *mark == claimant
                    && r.generation == record.generation
                    && r.state() == record.state()
            });
            if held {
                *row = None;
            }
            Ok(held)
        }
    }

    fn id() -> RecordId {
        RecordId::new("shop", "charge", "k").unwrap()
    }

    fn record(status: Status) -> Record {
        Record {
            fingerprint: Fingerprint::of_bytes(b"a"),
            generation: Generation(7),
            created_at: Timestamp(1_000),
            updated_at: Timestamp(1_000),
            status,
        }
    }

    fn pending() -> Record {
        record(Status::Pending {
            lease_until: Timestamp(31_000),
        })
    }

    fn settled() -> Record {
        record(Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(201, b"ok".to_vec()),
            completed_at: Timestamp(2_000),
            expires_at: Timestamp(90_000),
        })
    }

    fn row(record: Record, claimant: Claimant) -> Row {
        Row {
            row: Mutex::new(Some((record, claimant))),
            ..Row::default()
        }
    }

    fn given_back(row: &Row, claimant: Claimant) -> GivenBack {
        crate::seam::poll::block_on(give_back(row, &id(), claimant, &Config::default())).unwrap()
    }

    const MINE: Claimant = Claimant(41);
    const THEIRS: Claimant = Claimant(42);

    #[test]
    fn a_pending_claim_that_landed_is_released() {
        let row = row(pending(), MINE);
        assert_eq!(
            given_back(&row, MINE),
            GivenBack::Released {
                generation: Generation(7)
            }
        );
        assert!(row.row.lock().unwrap().is_none());
    }

    #[test]
    fn a_claim_whose_lease_ran_out_meanwhile_is_resolved_as_not_executed() {
        let row = row(record(Status::Unknown), MINE);
        assert!(matches!(given_back(&row, MINE), GivenBack::Released { .. }));
        assert!(row.row.lock().unwrap().is_none());
    }

    #[test]
    fn another_claim_of_the_key_is_left_alone() {
        let row = row(pending(), THEIRS);
        assert_eq!(given_back(&row, MINE), GivenBack::NotFound);
        assert!(row.row.lock().unwrap().is_some());
    }

    #[test]
    fn a_settled_record_is_never_deleted() {
        let row = row(settled(), MINE);
        assert_eq!(given_back(&row, MINE), GivenBack::NotFound);
        assert!(row.row.lock().unwrap().is_some());
    }

    #[test]
    fn a_claim_that_turned_unknown_between_the_read_and_the_delete_is_read_again() {
        let row = row(pending(), MINE);
        row.changes.lock().unwrap().push(record(Status::Unknown));
        assert!(matches!(given_back(&row, MINE), GivenBack::Released { .. }));
        assert!(row.row.lock().unwrap().is_none());
    }

    #[test]
    fn marks_of_one_store_differ() {
        let claimants = Claimants::new();
        let (a, b) = (claimants.next(), claimants.next());
        assert_ne!(a, b);
        assert_ne!(Claimants::new().next(), Claimants::new().next());
    }
}
