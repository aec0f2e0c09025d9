//! Export and import on Redis: the same JSON lines as every engine's, read through the
//! one line reader they share (`seam/transfer/`). Records, entities, claimed values and
//! tokens move; an input that holds intents is refused by its first such line, since
//! this engine keeps none. An import checks every line against what the server holds
//! before it writes any, then writes the records with `idem_import` (which refuses the
//! whole call when a record there differs), the entities and claimed values each by a
//! compare-and-set; the generation counter is only ever raised.

use std::io::{BufRead, Write};

use idem_core::{Generation, IssuedToken, Record, RecordId, Timestamp, Token};

use super::RedisStore;
use super::entity::{ENTITIES, UNIQUE, id_of_bytes};
use super::keys::{FLOOR, GENERATION, IDS, placed, record_id_of, record_key};
use super::maintain::PAGE;
use super::token::{TOKENS, intent_key};
use super::two_phase::failed;
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::entity::{Entities, unique_key};
use crate::seam::report::Transferred;
use crate::seam::token::Tokens;
use crate::seam::transfer::view::RecordView;
use crate::seam::transfer::{
    BusinessLine, EntityView, Line, Lines, TokenLine, UniqueView, write_header, write_line,
};

/// Records one `idem_import` call writes at most.
const IMPORT_BATCH: usize = 500;

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
            let members = self.members("export", IDS, start, PAGE).await?;
            records.extend(self.records_of("export", &members).await?);
            if members.len() < PAGE {
                break;
            }
            start += PAGE;
        }
        let mut entities = Vec::new();
        for member in self.all_of(ENTITIES).await? {
            let id = id_of_bytes(&member)?;
            if let Some(entity) = self.get_entity(&id).await? {
                entities.push((id, entity));
            }
        }
        let mut claimed = Vec::new();
        for member in self.all_of(UNIQUE).await? {
            let id = record_id_of(&member, "a claimed value's key")?;
            if let Some(holder) = self.holder_of("export", &member).await? {
                claimed.push((id, holder));
            }
        }
        let mut tokens = Vec::new();
        let mut token_ids = self.all_of(TOKENS).await?;
        token_ids.sort();
        for member in token_ids {
            let id = record_id_of(&member, "a token's id")?;
            if let Some(entry) = self.get_token(&id).await? {
                tokens.push((id, entry));
            }
        }
        let mut conn = self.conn();
        let generation: Option<u64> = redis::cmd("GET")
            .arg(GENERATION)
            .query_async(&mut conn)
            .await
            .map_err(failed("export"))?;
        let counts = Transferred {
            records: records.len() as u64,
            entities: entities.len() as u64,
            unique: claimed.len() as u64,
            tokens: tokens.len() as u64,
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
        for (id, entity) in &entities {
            write_line(&mut out, &BusinessLine::Entity(EntityView::new(id, entity)))?;
        }
        for (id, holder) in &claimed {
            let view = UniqueView::new(id.tenant(), id.operation(), id.key(), holder);
            write_line(&mut out, &BusinessLine::Unique(view))?;
        }
        for (id, entry) in &tokens {
            write_line(&mut out, &TokenLine::new(id, entry))?;
        }
        out.flush().map_err(MaintainError::Export)?;
        Ok(counts)
    }

    /// Every member of the index `index`, in its order.
    async fn all_of(&self, index: &str) -> Result<Vec<Vec<u8>>, Error> {
        let mut conn = self.conn();
        redis::cmd("ZRANGE")
            .arg(index)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(failed("export"))
    }

    pub(super) async fn import_records(
        &self,
        input: &mut (dyn BufRead + Send),
    ) -> Result<Transferred, ImportError> {
        let mut lines = Lines::new(input);
        let mut highest = Generation(0);
        let mut floor = Timestamp(0);
        let mut records: Vec<(u64, RecordId, Record)> = Vec::new();
        let mut entities = Vec::new();
        let mut claimed = Vec::new();
        let mut tokens = Vec::new();
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
                Line::Business(BusinessLine::Entity(view)) => {
                    let (id, entity) = view.to_entity().map_err(|m| ImportError::Line {
                        line: number,
                        message: format!("entity: {m}"),
                    })?;
                    entities.push((number, id, entity));
                    continue;
                }
                Line::Business(BusinessLine::Unique(view)) => {
                    let (tenant, scope, value, holder) =
                        view.to_claim().map_err(|m| ImportError::Line {
                            line: number,
                            message: format!("unique: {m}"),
                        })?;
                    let key = unique_key(tenant, scope, value)?;
                    let name = format!("{tenant}/{scope}/{value}");
                    claimed.push((number, key, name, holder.to_owned()));
                    continue;
                }
                Line::Token(line) => {
                    let (_, id, entry) = line.to_token().map_err(|message| ImportError::Line {
                        line: number,
                        message,
                    })?;
                    floor = floor.max(entry.issued_at);
                    tokens.push((number, id, entry));
                    continue;
                }
                Line::Intent(_) => "intents",
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
        for (number, id, entity) in &entities {
            if self
                .get_entity(id)
                .await?
                .is_some_and(|there| there != *entity)
            {
                return Err(ImportError::Line {
                    line: *number,
                    message: format!(
                        "entity {id}: the server already holds a different entity under this id"
                    ),
                });
            }
        }
        for (number, key, name, holder) in &claimed {
            if self
                .holder_of("import", key)
                .await?
                .is_some_and(|there| there != *holder)
            {
                return Err(ImportError::Line {
                    line: *number,
                    message: format!(
                        "unique {name}: the server already holds it for another holder"
                    ),
                });
            }
        }
        for (number, id, entry) in &tokens {
            if self
                .get_token(id)
                .await?
                .is_some_and(|there| there != *entry)
            {
                return Err(ImportError::Line {
                    line: *number,
                    message: format!(
                        "token {id}: the server already holds a different token under this id"
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
        // Written where nothing is there yet (what is there is the same, checked above);
        // a writer that came in between fails the import, as a conflict would.
        for (_, id, entity) in &entities {
            if self.get_entity(id).await?.is_none()
                && !self.swap_entity(id, &[], None, entity).await?
            {
                return Err(Error::Contended { attempts: 1 }.into());
            }
        }
        for (_, key, _, holder) in &claimed {
            if self.holder_of("import", key).await?.is_none()
                && !self.swap_unique("import", key, "", holder).await?
            {
                return Err(Error::Contended { attempts: 1 }.into());
            }
        }
        for (_, id, entry) in &tokens {
            if self.get_token(id).await?.is_some() {
                continue;
            }
            self.import_token(id, entry).await?;
        }
        Ok(transferred)
    }

    /// Writes an imported token that is not there; its intent's entry names it when it
    /// names no token, or one issued before it (as issuing leaves it).
    async fn import_token(&self, id: &RecordId, entry: &IssuedToken) -> Result<(), Error> {
        let intent = match &entry.intent_id {
            None => None,
            Some(intent_id) => {
                let key = intent_key(id.tenant(), id.operation(), intent_id)?;
                let mut conn = self.conn();
                let named: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .map_err(failed("import"))?;
                let named = named.unwrap_or_default();
                let later = if named.is_empty() {
                    false
                } else {
                    let token = Token::decode(&named).map_err(|source| Error::Decode {
                        what: "an intent's token".into(),
                        source,
                    })?;
                    let other = RecordId::new(id.tenant(), id.operation(), token.as_str())?;
                    self.get_token(&other)
                        .await?
                        .is_some_and(|there| there.issued_at > entry.issued_at)
                };
                (!later).then_some((key, named))
            }
        };
        let intent = intent.as_ref().map(|(k, n)| (k.as_slice(), n.as_slice()));
        match self.write_issue(id, entry, intent).await? {
            Some(()) => Ok(()),
            None => Err(Error::Contended { attempts: 1 }),
        }
    }

    /// Raises the generation counter to at least `generation` and the clock floor to at
    /// least `floor` (never lowers them).
    async fn raise_generation(
        &self,
        generation: Generation,
        floor: Timestamp,
    ) -> Result<(), Error> {
        let mut conn = self.conn();
        let _raised: i64 = redis::cmd("FCALL")
            .arg("idem_raise")
            .arg(1)
            .arg(GENERATION)
            .arg(generation.0)
            .arg(floor.0)
            .query_async(&mut conn)
            .await
            .map_err(failed("import"))?;
        Ok(())
    }
}
