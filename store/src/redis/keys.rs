//! The engine's keys and values: where a record and its indexes live (library.lua says
//! the same), and what is written with a record (its index score, the time the server
//! may drop it).

use idem_core::{Config, Record, RecordId, State, Timestamp};

use crate::error::Error;

/// The generation counter.
pub(super) const GENERATION: &str = "{idem}:generation";

/// The latest time a record was written at: the engine's clock never goes below it.
pub(super) const FLOOR: &str = "{idem}:floor";

/// The sum of the records' sizes in bytes.
pub(super) const BYTES: &str = "{idem}:bytes";

/// Every record's id, score 0: the ids in the order of their bytes.
pub(super) const IDS: &str = "{idem}:ids";

/// The key of `id`'s record.
pub(super) fn record_key(id: &RecordId) -> Vec<u8> {
    record_key_of(&id.to_key_bytes())
}

/// The key of the record whose id's bytes are `member` (an index's member).
pub(super) fn record_key_of(member: &[u8]) -> Vec<u8> {
    let mut key = b"{idem}:r:".to_vec();
    key.extend_from_slice(member);
    key
}

/// The name of `state`'s index (the library's `{idem}:s:<name>`).
pub(super) fn state_name(state: State) -> &'static str {
    match state {
        State::Pending => "pending",
        State::Unknown => "unknown",
        State::Succeeded => "succeeded",
        State::Failed => "failed",
        State::Forgotten => "forgotten",
    }
}

/// The index of the records in `state`: Pending and Unknown scored by `created_at`,
/// settled records and tombstones by `expires_at`.
pub(super) fn state_index(state: State) -> String {
    format!("{{idem}}:s:{}", state_name(state))
}

/// What the library's `idem_write` and `idem_import` write beside a record's bytes: its
/// state's index, its score there, and when the server may drop it (0: never).
pub(super) struct Placed {
    pub(super) state: &'static str,
    pub(super) score: u64,
    pub(super) drop_at: u64,
}

/// Where `record` goes: a settled record may be dropped once its tombstone's time is over
/// too (or at its own end without tombstones), a tombstone at its end; Pending and
/// Unknown records never.
pub(super) fn placed(record: &Record, config: &Config) -> Placed {
    let state = record.state();
    let (score, drop_at) = match record.expires_at() {
        None => (record.created_at, Timestamp(0)),
        Some(expires_at) => {
            let gone = record
                .tombstone(config.tombstone_retention_ms)
                .and_then(|t| t.expires_at())
                .unwrap_or(expires_at);
            (expires_at, gone)
        }
    };
    Placed {
        state: state_name(state),
        score: score.0,
        drop_at: drop_at.0,
    }
}

/// The record id whose key bytes are `member` (an index's member), `what` naming it in an
/// error.
pub(super) fn record_id_of(member: &[u8], what: &'static str) -> Result<RecordId, Error> {
    RecordId::from_key_bytes(member).map_err(|source| Error::Decode {
        what: what.into(),
        source,
    })
}

/// The record in `bytes` (empty: none), for `id`.
pub(super) fn decode(bytes: &[u8], id: &RecordId) -> Result<Option<Record>, Error> {
    if bytes.is_empty() {
        return Ok(None);
    }
    Record::decode(bytes)
        .map(Some)
        .map_err(|source| Error::Decode {
            what: format!("the record of {id}"),
            source,
        })
}
