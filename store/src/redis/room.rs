//! The room a Redis server has left under its `maxmemory`. With `noeviction` (which
//! the engine requires) a server at its limit refuses every write, a settle as much as
//! a claim: so, as a store file keeps free disk space, a claim is refused while less than
//! the reserve is left, and the claims already made can still settle. A server without
//! `maxmemory` has no limit of its own, and nothing is refused. Read from `INFO memory`
//! at most every 100 ms; on a Redis Cluster not read (the claims go on as without a
//! limit).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Link, RedisStore};
use crate::error::Error;

/// How long a reading of the server's memory is used before it is read again.
const FRESH: Duration = Duration::from_millis(100);

/// The reserve and the last reading.
#[derive(Debug)]
pub(super) struct Room {
    reserve: u64,
    /// When read, and the bytes left then (`None`: no limit).
    last: Mutex<Option<(Instant, Option<u64>)>>,
}

impl Room {
    pub(super) fn new(reserve: u64) -> Room {
        Room {
            reserve,
            last: Mutex::new(None),
        }
    }
}

/// `used_memory` and `maxmemory` from the text of `INFO memory`.
fn memory(info: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse::<u64>().ok())
    };
    Some((field("used_memory")?, field("maxmemory")?))
}

impl RedisStore {
    /// The bytes left under `maxmemory` when they are below the reserve; `None` when
    /// there is room (or no limit, or a cluster).
    pub(super) async fn short_of_room(&self) -> Result<Option<u64>, Error> {
        let room = &self.inner.room;
        if room.reserve == 0 {
            return Ok(None);
        }
        let cached = *room
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let left = match cached {
            Some((at, left)) if at.elapsed() < FRESH => left,
            _ => {
                let Link::One(mut conn) = self.conn() else {
                    return Ok(None);
                };
                let info: String = redis::cmd("INFO")
                    .arg("memory")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| Error::Redis {
                        operation: "info memory",
                        source: e,
                    })?;
                let left = match memory(&info) {
                    Some((_, 0)) | None => None,
                    Some((used, max)) => Some(max.saturating_sub(used)),
                };
                *room
                    .last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some((Instant::now(), left));
                left
            }
        };
        Ok(left.filter(|left| *left < room.reserve))
    }

    /// [`Error::NoRoom`] for a claim when the server is short of room.
    pub(super) async fn room_for_claim(&self) -> Result<(), Error> {
        match self.short_of_room().await? {
            Some(free) => Err(Error::NoRoom {
                dir: "the Redis server's maxmemory".into(),
                free,
                reserve: self.inner.room.reserve,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::memory;

    #[test]
    fn used_and_max_memory_are_read_from_info() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n";
        assert_eq!(memory(info), Some((1_048_576, 4_194_304)));
        assert_eq!(memory("used_memory:5\r\n"), None);
    }
}
