//! An input in two steps: read the record with the server's clock (`idem_read`), let
//! idem-core decide, and write what it decided with `idem_write`, which re-checks the
//! record's bytes first. A write that finds the record changed reads again, a bounded
//! number of times. A call whose connection broke reads the record back: its bytes say
//! whether the write landed.

use std::time::{Duration, Instant};

use idem_core::protocol::{self, Decision, Write};
use idem_core::{Fingerprint, Generation, Record, RecordId, Refusal, Terms, Timestamp};
use redis::RedisError;

use super::RedisStore;
use super::keys::{FLOOR, GENERATION, decode, placed, record_key};
use crate::error::Error;

/// How many times a begin reads and tries to write before it answers contended.
pub(super) const BEGIN_ATTEMPTS: u32 = 16;

/// How long a call whose connection broke keeps trying to read its record back.
const READ_BACK: Duration = Duration::from_secs(15);

/// An error of the driver as the store's, for `operation`.
pub(super) fn failed(operation: &'static str) -> impl Fn(RedisError) -> Error {
    move |source| Error::Redis { operation, source }
}

/// True when a failed call may have been applied: the connection broke or the answer
/// did not come in time. A refusal of the server wrote nothing.
fn ambiguous(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_connection_refusal()
}

/// A record as read: its bytes (empty when absent), the record, the server's clock, and
/// the generation drawn for a claim of an absent key (0 when none was).
pub(super) struct Read {
    pub(super) bytes: Vec<u8>,
    pub(super) record: Option<Record>,
    pub(super) now: Timestamp,
    pub(super) drawn: Generation,
}

impl RedisStore {
    /// Reads `id`'s record and the server's clock; with `claim`, draws a generation when
    /// the key is absent (a begin's first step).
    pub(super) async fn read(
        &self,
        operation: &'static str,
        id: &RecordId,
        claim: bool,
    ) -> Result<Read, Error> {
        let mut conn = self.conn();
        let (bytes, now, drawn): (Vec<u8>, u64, u64) = redis::cmd("FCALL")
            .arg("idem_read")
            .arg(1)
            .arg(record_key(id))
            .arg(if claim { "claim" } else { "" })
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        self.inner.cache.observe(Timestamp(now));
        Ok(Read {
            record: decode(&bytes, id)?,
            bytes,
            now: Timestamp(now),
            drawn: Generation(drawn),
        })
    }

    /// The server's clock.
    pub(super) async fn clock(&self, operation: &'static str) -> Result<Timestamp, Error> {
        let mut conn = self.conn();
        let now: u64 = redis::cmd("FCALL")
            .arg("idem_now")
            .arg(1)
            .arg(FLOOR)
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        Ok(Timestamp(now))
    }

    /// A generation for a claim over a record that is there.
    async fn next_generation(&self, operation: &'static str) -> Result<Generation, Error> {
        let mut conn = self.conn();
        let drawn: u64 = redis::cmd("FCALL")
            .arg("idem_next_generation")
            .arg(1)
            .arg(GENERATION)
            .query_async(&mut conn)
            .await
            .map_err(failed(operation))?;
        Ok(Generation(drawn))
    }

    /// Writes `next` (or deletes, for `None`) over the record whose bytes were `seen`;
    /// false, with nothing written, when the record is no longer those bytes. After a
    /// broken connection, the record is read back until the server answers.
    pub(super) async fn write(
        &self,
        operation: &'static str,
        id: &RecordId,
        seen: &[u8],
        next: Option<&Record>,
    ) -> Result<bool, Error> {
        let bytes = next.map(Record::encode).unwrap_or_default();
        let (state, score, drop_at, at) = match next {
            Some(record) => {
                let placed = placed(record, &self.inner.config);
                (
                    placed.state,
                    placed.score,
                    placed.drop_at,
                    record.updated_at.0,
                )
            }
            None => ("", 0, 0, 0),
        };
        let started = Instant::now();
        loop {
            let mut conn = self.conn();
            let written: Result<i64, RedisError> = redis::cmd("FCALL")
                .arg("idem_write")
                .arg(1)
                .arg(record_key(id))
                .arg(id.to_key_bytes())
                .arg(seen)
                .arg(&bytes)
                .arg(state)
                .arg(score)
                .arg(drop_at)
                .arg(at)
                .query_async(&mut conn)
                .await;
            let e = match written {
                Ok(written) => return Ok(written == 1),
                Err(e) if ambiguous(&e) => e,
                Err(e) => return Err(failed(operation)(e)),
            };
            // The write may have landed: the record's bytes tell.
            match self.read_back(operation, id, started, e).await? {
                now if now == bytes => return Ok(true),
                now if now == seen => {}
                _ => return Ok(false),
            }
        }
    }

    /// The bytes of `id`'s record, read until the server answers or [`READ_BACK`] has
    /// passed since `started` (then `last`, the error that sent the caller here).
    async fn read_back(
        &self,
        operation: &'static str,
        id: &RecordId,
        started: Instant,
        mut last: RedisError,
    ) -> Result<Vec<u8>, Error> {
        while started.elapsed() < READ_BACK {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut conn = self.conn();
            let read: Result<Option<Vec<u8>>, RedisError> = redis::cmd("GET")
                .arg(record_key(id))
                .query_async(&mut conn)
                .await;
            match read {
                Ok(bytes) => return Ok(bytes.unwrap_or_default()),
                Err(e) if ambiguous(&e) => last = e,
                Err(e) => return Err(failed(operation)(e)),
            }
        }
        Err(failed(operation)(last))
    }

    /// A fenced input: reads the record, lets `decide` (idem-core) say what to write on
    /// the server's clock, and writes it over what was read; a write that lost a race
    /// reads again. `Ok(None)` after a delete.
    pub(super) async fn fenced(
        &self,
        operation: &'static str,
        id: &RecordId,
        decide: impl Fn(Option<&Record>, Timestamp) -> Result<Option<Record>, Refusal>,
    ) -> Result<Option<Record>, Error> {
        for _ in 0..BEGIN_ATTEMPTS {
            let read = self.read(operation, id, false).await?;
            let next = decide(read.record.as_ref(), read.now)?;
            if self
                .write(operation, id, &read.bytes, next.as_ref())
                .await?
            {
                return Ok(next);
            }
        }
        Err(Error::Contended {
            attempts: BEGIN_ATTEMPTS,
        })
    }

    /// One try of a begin: the core's decision once its write landed, or `None` when the
    /// record changed between the read and the write.
    pub(super) async fn begin_once(
        &self,
        id: &RecordId,
        fingerprint: Fingerprint,
        terms: Terms,
    ) -> Result<Option<Decision>, Error> {
        let config = &self.inner.config.with_terms(&terms);
        let read = self.read("begin", id, true).await?;
        let current = read.record.as_ref();
        let mut transition = protocol::begin(current, fingerprint, read.drawn, read.now, config);
        if matches!(transition.decision, Decision::Claimed { .. }) {
            // Below the reserve a claim is refused; its answers (replays) are not.
            self.room_for_claim().await?;
        }
        if current.is_some() && matches!(transition.decision, Decision::Claimed { .. }) {
            // A claim over a record that is there (a lease taken over, a tombstone past
            // its time): the read drew no generation for it.
            let generation = self.next_generation("begin").await?;
            transition = protocol::begin(current, fingerprint, generation, read.now, config);
        }
        let next = match &transition.write {
            Write::Nothing => {
                if let (Decision::Replay { .. }, Some(record)) = (&transition.decision, current) {
                    self.inner.cache.keep(id, record);
                }
                return Ok(Some(transition.decision));
            }
            Write::Put(record) => Some(record),
            Write::Delete => None,
        };
        if self.write("begin", id, &read.bytes, next).await? {
            Ok(Some(transition.decision))
        } else {
            Ok(None)
        }
    }
}
