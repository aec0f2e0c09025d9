//! A fenced input decided before its statement: the core decides on a stand-in of the
//! record it requires (the generation and state the statement is fenced on, at time 0),
//! and the statement writes the decided status with its times counted from the
//! database's clock at the write. The server engines' one-statement heartbeat, complete
//! and mark unknown.

use idem_core::{Fingerprint, Generation, Record, State, Status, Timestamp};

/// A record of `state` held by `generation`, at time 0: what the core's fenced inputs
/// are decided on before the statement (their answer does not depend on the rest).
pub(crate) fn stand_in(generation: Generation, state: State) -> Record {
    Record {
        fingerprint: Fingerprint([0; 32]),
        generation,
        created_at: Timestamp(0),
        updated_at: Timestamp(0),
        status: match state {
            State::Unknown => Status::Unknown,
            _ => Status::Pending {
                lease_until: Timestamp(0),
            },
        },
    }
}

/// `status`, decided at time 0, as it reads when decided at `at`.
pub(crate) fn shifted(status: &Status, at: Timestamp) -> Status {
    let shift = |t: Timestamp| at.plus_millis(t.0);
    match status.clone() {
        Status::Pending { lease_until } => Status::Pending {
            lease_until: shift(lease_until),
        },
        Status::Settled {
            verdict,
            outcome,
            completed_at,
            expires_at,
        } => Status::Settled {
            verdict,
            outcome,
            completed_at: shift(completed_at),
            expires_at: shift(expires_at),
        },
        Status::Unknown => Status::Unknown,
        Status::Tombstone {
            verdict,
            completed_at,
            expires_at,
        } => Status::Tombstone {
            verdict,
            completed_at: shift(completed_at),
            expires_at: shift(expires_at),
        },
    }
}
