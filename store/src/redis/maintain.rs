//! The reads and the maintenance on Redis: list, stats, sweep, reconcile, on the indexes
//! the library keeps beside the records (ids in byte order, and one index a state).
//! idem-core decides what sweep does to each record and how a check settles it.
//!
//! An index may still name a record the server dropped at its time (a settled record
//! past its tombstone's end): reads skip it, and sweep takes it out of the indexes.

use idem_core::protocol::{self, Resolution, Swept};
use idem_core::{Config, Generation, Record, RecordId, Refusal, State, Timestamp};

use super::RedisStore;
use super::keys::{
    BYTES, FLOOR, GENERATION, IDS, decode, record_id_of, record_key, record_key_of, state_index,
};
use super::two_phase::failed;
use crate::error::{Error, MaintainError};
use crate::seam::filter::ListFilter;
use crate::seam::reconcile::Reconciling;
use crate::seam::report::{IntentCounts, Stats, SweepReport};

/// Ids an index read takes at once.
pub(super) const PAGE: usize = 1_000;

/// The states whose records expire: the indexes sweep reads.
const EXPIRING: [State; 3] = [State::Succeeded, State::Failed, State::Forgotten];

impl RedisStore {
    /// The members of `index` from `start`, at most `count`, in the index's order.
    pub(super) async fn members(
        &self,
        operation: &'static str,
        index: &str,
        start: usize,
        count: usize,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let mut conn = self.conn();
        let stop = start.saturating_add(count).saturating_sub(1);
        redis::cmd("ZRANGE")
            .arg(index)
            .arg(start)
            .arg(stop)
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))
    }

    /// The records of the ids in `members`, in their order; those the server dropped are
    /// left out.
    pub(super) async fn records_of(
        &self,
        operation: &'static str,
        members: &[Vec<u8>],
    ) -> Result<Vec<(RecordId, Record)>, Error> {
        if members.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn();
        let mut mget = redis::cmd("MGET");
        for member in members {
            mget.arg(record_key_of(member));
        }
        let values: Vec<Option<Vec<u8>>> = mget
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        let mut found = Vec::with_capacity(members.len());
        for (member, bytes) in members.iter().zip(values) {
            let Some(bytes) = bytes else { continue };
            let id = record_id_of(member, "an id of an index")?;
            if let Some(record) = decode(&bytes, &id)? {
                found.push((id, record));
            }
        }
        Ok(found)
    }

    /// Every record of `state`, in its index's order.
    async fn all_in(
        &self,
        operation: &'static str,
        state: State,
    ) -> Result<Vec<(RecordId, Record)>, Error> {
        let index = state_index(state);
        let mut all = Vec::new();
        let mut start = 0;
        loop {
            let members = self.members(operation, &index, start, PAGE).await?;
            let records = self.records_of(operation, &members).await?;
            all.extend(records.into_iter().filter(|(_, r)| r.state() == state));
            if members.len() < PAGE {
                return Ok(all);
            }
            start += PAGE;
        }
    }

    pub(super) async fn list_records(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(RecordId, Record)>, Error> {
        filter.validate()?;
        let index = filter.state.map_or_else(|| IDS.to_owned(), state_index);
        let limit = filter.limit.unwrap_or(usize::MAX);
        let mut listed = Vec::new();
        let mut start = 0;
        while listed.len() < limit {
            let members = self.members("list", &index, start, PAGE).await?;
            for (id, record) in self.records_of("list", &members).await? {
                let state_matches = filter.state.is_none_or(|s| record.state() == s);
                if state_matches && filter.matches(&id) && listed.len() < limit {
                    listed.push((id, record));
                }
            }
            if members.len() < PAGE {
                break;
            }
            start += PAGE;
        }
        Ok(listed)
    }

    pub(super) async fn stats_now(&self) -> Result<Stats, MaintainError> {
        let now = self.clock("stats").await?;
        let mut conn = self.conn();
        let mut counts = [0_u64; 5];
        let mut expired = 0;
        for (count, state) in counts.iter_mut().zip([
            State::Pending,
            State::Succeeded,
            State::Failed,
            State::Unknown,
            State::Forgotten,
        ]) {
            let index = state_index(state);
            *count = redis::cmd("ZCARD")
                .arg(&index)
                .query_async(&mut conn)
                .await
                .map_err(failed("stats"))?;
            if EXPIRING.contains(&state) {
                let past: u64 = redis::cmd("ZCOUNT")
                    .arg(&index)
                    .arg("-inf")
                    .arg(now.0)
                    .query_async(&mut conn)
                    .await
                    .map_err(failed("stats"))?;
                expired += past;
            }
        }
        let pending = self.all_in("stats", State::Pending).await?;
        let unknown = self.all_in("stats", State::Unknown).await?;
        let age = |at: Timestamp| now.0.saturating_sub(at.0);
        let generation: Option<u64> = redis::cmd("GET")
            .arg(GENERATION)
            .query_async(&mut conn)
            .await
            .map_err(failed("stats"))?;
        let (floor, bytes): (Option<u64>, Option<i64>) = redis::cmd("MGET")
            .arg(FLOOR)
            .arg(BYTES)
            .query_async(&mut conn)
            .await
            .map_err(failed("stats"))?;
        let [
            pending_count,
            succeeded,
            failed_count,
            unknown_count,
            forgotten,
        ] = counts;
        Ok(Stats {
            pending: pending_count,
            succeeded,
            failed: failed_count,
            unknown: unknown_count,
            forgotten,
            pending_lease_expired: pending
                .iter()
                .filter(|(_, r)| r.lease_until().is_some_and(|until| until <= now))
                .count() as u64,
            expired,
            oldest_pending_age_ms: pending.iter().map(|(_, r)| age(r.created_at)).max(),
            oldest_unknown_age_ms: unknown.iter().map(|(_, r)| age(r.updated_at)).max(),
            clock_floor: Timestamp(floor.unwrap_or(0)),
            file_bytes: bytes.map_or(0, |b| u64::try_from(b).unwrap_or(0)),
            generation: Generation(generation.unwrap_or(0)),
            intents: IntentCounts::default(),
        })
    }

    pub(super) async fn unknown_now(&self) -> Result<u64, MaintainError> {
        let mut conn = self.conn();
        let count: u64 = redis::cmd("ZCARD")
            .arg(state_index(State::Unknown))
            .query_async(&mut conn)
            .await
            .map_err(failed("stats"))?;
        Ok(count)
    }

    /// The ids past their time at `now` in the expiring indexes, soonest first, at most
    /// `limit`.
    async fn expired_ids(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let mut conn = self.conn();
        let mut found: Vec<(u64, Vec<u8>)> = Vec::new();
        for state in EXPIRING {
            let scored: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                .arg(state_index(state))
                .arg("-inf")
                .arg(now.0)
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(limit.min(i64::MAX as usize))
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .map_err(failed("sweep"))?;
            // Scores are times in ms, whole numbers below 2^53: exact in an f64.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            found.extend(scored.into_iter().map(|(m, s)| (s as u64, m)));
        }
        found.sort();
        found.truncate(limit);
        Ok(found)
    }

    pub(super) async fn sweep_now(
        &self,
        limit: usize,
        dry_run: bool,
    ) -> Result<SweepReport, Error> {
        let config = &self.inner.config;
        let now = self.clock("sweep").await?;
        let mut ids = self.expired_ids(now, limit.saturating_add(1)).await?;
        let mut report = SweepReport {
            remaining_expired: ids.len() > limit,
            ..SweepReport::default()
        };
        ids.truncate(limit);
        for (_, member) in ids {
            let id = record_id_of(&member, "an id of an index")?;
            let read = self.read("sweep", &id, false).await?;
            let Some(record) = read.record else {
                if !dry_run {
                    // Dropped by the server at its time: out of the indexes too.
                    let mut conn = self.conn();
                    let _forgot: i64 = redis::cmd("FCALL")
                        .arg("idem_forget")
                        .arg(1)
                        .arg(record_key(&id))
                        .arg(&member)
                        .query_async(&mut conn)
                        .await
                        .map_err(failed("sweep"))?;
                }
                continue;
            };
            let target = match protocol::sweep(&record, read.now, config) {
                Swept::Tombstone(tombstone) => Some(tombstone),
                Swept::Delete => None,
                Swept::Keep => continue,
            };
            if dry_run
                || self
                    .write("sweep", &id, &read.bytes, target.as_ref())
                    .await?
            {
                match target {
                    Some(_) => report.tombstoned += 1,
                    None => report.removed += 1,
                }
            }
        }
        Ok(report)
    }

    pub(super) async fn resolve_fenced(
        &self,
        operation: &'static str,
        id: &RecordId,
        generation: Option<Generation>,
        resolution: Resolution,
    ) -> Result<Option<Record>, Error> {
        let config = self.inner.config.clone();
        self.fenced(operation, id, |current, now| {
            if let (Some(g), Some(record)) = (generation, current)
                && record.generation != g
            {
                return Err(Refusal::Stale {
                    given: g,
                    current: record.generation,
                    state: record.state(),
                });
            }
            protocol::resolve(current, resolution.clone(), now, &config)
        })
        .await
    }
}

impl Reconciling for RedisStore {
    fn settings(&self) -> &Config {
        &self.inner.config
    }

    async fn unknown_records(&self, limit: usize) -> Result<Vec<(RecordId, Record)>, Error> {
        let members = self
            .members("reconcile", &state_index(State::Unknown), 0, limit)
            .await?;
        let records = self.records_of("reconcile", &members).await?;
        Ok(records
            .into_iter()
            .filter(|(_, r)| r.state() == State::Unknown)
            .collect())
    }

    async fn settle_unknown(
        &self,
        id: &RecordId,
        generation: Generation,
        resolution: Resolution,
        _now: Timestamp,
    ) -> Result<bool, Error> {
        match self
            .resolve_fenced("reconcile", id, Some(generation), resolution)
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::Refused(
                Refusal::NotFound | Refusal::Stale { .. } | Refusal::WrongState { .. },
            )) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn silent_claims(
        &self,
        _now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(RecordId, Record, Timestamp)>, Error> {
        let now = self.clock("recover_abandoned").await?;
        let mut silent: Vec<(RecordId, Record, Timestamp)> = self
            .all_in("recover_abandoned", State::Pending)
            .await?
            .into_iter()
            .filter(|(_, r)| r.lease_until().is_some_and(|until| until <= now))
            .map(|(id, r)| (id, r, now))
            .collect();
        silent.sort_by_key(|(_, r, _)| r.lease_until());
        silent.truncate(limit);
        Ok(silent)
    }

    async fn abandon_claim(
        &self,
        id: &RecordId,
        record: &Record,
        at: Timestamp,
    ) -> Result<bool, Error> {
        // Only the claim that was found silent, as it was: a heartbeat or a settle that
        // came in between wins.
        let read = self.read("recover_abandoned", id, false).await?;
        if read.record.as_ref() != Some(record) {
            return Ok(false);
        }
        let unknown = protocol::mark_unknown(Some(record), record.generation, at.max(read.now))?;
        self.write("recover_abandoned", id, &read.bytes, Some(&unknown))
            .await
    }
}
