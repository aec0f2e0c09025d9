//! Export and import on Redis: the same JSON lines as every engine's, read through the
//! one line reader they share (`seam/transfer/`). Records move; an input that holds
//! intents, entities, claimed values or tokens is refused by its first such line, since
//! this engine keeps none. An import checks every record before it writes any, and
//! writes them with `idem_import`, which refuses the whole call when a record there
//! differs; the generation counter is only ever raised.

use std::io::{BufRead, Write};

use idem_core::{Generation, Record, RecordId, Timestamp};

use super::RedisStore;
use super::keys::{FLOOR, GENERATION, IDS, placed, record_key};
use super::two_phase::failed;
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::report::Transferred;
use crate::seam::transfer::view::RecordView;
use crate::seam::transfer::{Line, Lines, write_header, write_line};

/// Records one `idem_import` call writes at most.
const IMPORT_BATCH: usize = 500;

/// Ids an export reads at once.
const EXPORT_PAGE: usize = 1_000;

impl RedisStore {
    pub(super) async fn export_records(
        &self,
        out: &mut (dyn Write + Send),
    ) -> Result<Transferred, MaintainError> {
        // The records first, so that the header counts what the lines hold: the server
        // gives no snapshot across calls.
        let mut records: Vec<(RecordId, Record)> = Vec::new();
        let mut start = 0;
        loop {
            let members = self.members_of_ids(start).await?;
            records.extend(self.records_of_ids(&members).await?);
            if members.len() < EXPORT_PAGE {
                break;
            }
            start += EXPORT_PAGE;
        }
        let mut conn = self.conn();
        let generation: Option<u64> = redis::cmd("GET")
            .arg(GENERATION)
            .query_async(&mut conn)
            .await
            .map_err(failed("export"))?;
        let counts = Transferred {
            records: records.len() as u64,
            ..Transferred::default()
        };
        let mut out = std::io::BufWriter::new(out);
        let floor: Option<u64> = redis::cmd("GET")
            .arg(FLOOR)
            .query_async(&mut conn)
            .await
            .map_err(failed("export"))?;
        let floor = Timestamp(floor.unwrap_or(0));
        write_header(&mut out, Generation(generation.unwrap_or(0)), floor, counts)?;
        for (id, record) in &records {
            write_line(&mut out, &RecordView::new(id, record))?;
        }
        out.flush().map_err(MaintainError::Export)?;
        Ok(counts)
    }

    async fn members_of_ids(&self, start: usize) -> Result<Vec<Vec<u8>>, Error> {
        let mut conn = self.conn();
        redis::cmd("ZRANGE")
            .arg(IDS)
            .arg(start)
            .arg(start + EXPORT_PAGE - 1)
            .query_async(&mut conn)
            .await
            .map_err(failed("export"))
    }

    async fn records_of_ids(&self, members: &[Vec<u8>]) -> Result<Vec<(RecordId, Record)>, Error> {
        let mut found = Vec::with_capacity(members.len());
        for member in members {
            let id = RecordId::from_key_bytes(member).map_err(|source| Error::Decode {
                what: "an id of an index".into(),
                source,
            })?;
            let read = self.read("export", &id, false).await?;
            if let Some(record) = read.record {
                found.push((id, record));
            }
        }
        Ok(found)
    }

    pub(super) async fn import_records(
        &self,
        input: &mut (dyn BufRead + Send),
    ) -> Result<Transferred, ImportError> {
        let mut lines = Lines::new(input);
        let mut highest = Generation(0);
        let mut floor = Timestamp(0);
        let mut records: Vec<(u64, RecordId, Record)> = Vec::new();
        while let Some((number, line)) = lines.next_line()? {
            let kept = match line {
                Line::Header {
                    generation,
                    clock_floor,
                } => {
                    highest = highest.max(generation);
                    floor = floor.max(clock_floor);
                    continue;
                }
                Line::Record(id, record) => {
                    highest = highest.max(record.generation);
                    floor = floor.max(record.updated_at);
                    records.push((number, id, record));
                    continue;
                }
                Line::Intent(_) => "intents",
                Line::Business(_) => "entities or claimed values",
                Line::Token(_) => "tokens",
            };
            return Err(ImportError::Line {
                line: number,
                message: format!(
                    "the redis engine keeps no {kept}; import this export into a file, PostgreSQL or MariaDB"
                ),
            });
        }
        let transferred = lines.finish()?;
        let config = &self.inner.config;
        let mut conn = self.conn();
        // Every record checked before any is written: one that differs refuses the input.
        for (number, id, record) in &records {
            let there: Option<Vec<u8>> = redis::cmd("GET")
                .arg(record_key(id))
                .query_async(&mut conn)
                .await
                .map_err(failed("import"))?;
            if there.is_some_and(|bytes| bytes != record.encode()) {
                return Err(ImportError::Line {
                    line: *number,
                    message: format!(
                        "{id}: the server already holds a different record under this id"
                    ),
                });
            }
        }
        if records.is_empty() {
            self.raise_generation(highest, floor).await?;
        }
        for batch in records.chunks(IMPORT_BATCH) {
            let mut call = redis::cmd("FCALL");
            call.arg("idem_import").arg(batch.len());
            for (_, id, _) in batch {
                call.arg(record_key(id));
            }
            call.arg(highest.0).arg(floor.0);
            for (_, id, record) in batch {
                let placed = placed(record, config);
                call.arg(id.to_key_bytes())
                    .arg(record.encode())
                    .arg(placed.state)
                    .arg(placed.score)
                    .arg(placed.drop_at);
            }
            let (ok, at): (i64, usize) = call
                .query_async(&mut conn)
                .await
                .map_err(failed("import"))?;
            if ok != 1 {
                let (number, id, _) = &batch[at.saturating_sub(1).min(batch.len() - 1)];
                return Err(ImportError::Line {
                    line: *number,
                    message: format!(
                        "{id}: the server already holds a different record under this id"
                    ),
                });
            }
        }
        Ok(transferred)
    }

    /// Raises the generation counter to at least `generation` and the clock floor to at
    /// least `floor` (never lowers them).
    async fn raise_generation(
        &self,
        generation: Generation,
        floor: Timestamp,
    ) -> Result<(), Error> {
        let mut conn = self.conn();
        let _written: (i64, usize) = redis::cmd("FCALL")
            .arg("idem_import")
            .arg(0)
            .arg(generation.0)
            .arg(floor.0)
            .query_async(&mut conn)
            .await
            .map_err(failed("import"))?;
        Ok(())
    }
}
