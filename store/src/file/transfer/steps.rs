//! The JSON-lines export and import of a whole store.
//!
//! An export is a header line, then one record per line, then one line per intent of
//! the outbox (the terminal's queued sales), then one line per entity and per claimed
//! business value (docs/design.md §8), then one line per issued one-time token (docs/design.md §9):
//!
//! ```text
//! {"idem_export":3,"generation":42,"clock_floor":1700000000300,"records":2,"intents":1,"entities":1,"unique":1,"tokens":1}
//! {"tenant":"shop","operation":"credit","key":"k-1","state":"succeeded","generation":41,"fingerprint":"9f…","created_at":1700000000000,"updated_at":1700000000100,"expires_at":1700086400100,"completed_at":1700000000100,"code":200,"outcome_b64":"b2s="}
//! {"tenant":"shop","operation":"credit","key":"k-2","state":"pending","generation":42,"fingerprint":"9f…","created_at":1700000000200,"updated_at":1700000000200,"lease_until":1700000030200}
//! {"intent":{"key":"0190b7c2-…","operation":"sale.forward","state":"queued","attempts":0,"created_at":1700000000300,"next_attempt_at":1700000000300,"deadline":1700082800300,"fingerprint":"9f…","payload_b64":"e30="}}
//! {"entity":{"tenant":"shop","kind":"payment","id":"p-1","state":"paid","version":2,"updated_at":1700000000100}}
//! {"unique":{"tenant":"shop","scope":"receipt","value":"R-77","holder":"k-1"}}
//! {"token":{"tenant":"shop","operation":"redeem","token":"AAAAAAAAAAAAAAAAAAAAAA","issued_at":1700000000000,"expires_at":1700000900000,"intent_id":"order-991"}}
//! ```
//!
//! Each record line is a [`RecordView`], each intent line an [`IntentView`] under
//! `"intent"`. Import reads exactly this back: every record, intent, entity, claimed
//! value and token byte for byte,
//! the generation counter raised to at least the header's and every record's
//! generation, so generations keep increasing after a restore, and the clock floor
//! raised to the header's and to every record's last update, so a restored terminal
//! whose clock is behind never settles an outcome that expires before the ones it
//! restored. Version 1 exports (records only, no `intents` in the header) and version 2
//! exports (no entities, claimed values or tokens) import as before.

use std::io::{self, BufRead, BufWriter, Write};

use redb::{ReadableTable, ReadableTableMetadata};

use crate::error::{Error, ImportError, MaintainError};
use crate::file::cache::ReplayCache;
use crate::file::entity::steps as entity;
use crate::file::handle::{Caller, guard_read};
use crate::file::outbox::{count_intents, for_each_intent, import_intent};
use crate::file::schema::{self as tables, IndexReader, RECORDS};
use crate::file::token::steps as token;
use crate::file::writer::Writer;
use crate::seam::report::Transferred;
use crate::seam::transfer::view::RecordView;
use crate::seam::transfer::{BusinessLine, IntentLine, Line, Lines, write_header, write_line};

/// Writes every record as JSON lines; see [`crate::Store::export`].
pub(crate) fn export(writer: &Writer, out: impl Write) -> Result<Transferred, MaintainError> {
    guard_read(|caller| export_guarded(writer, BufWriter::new(CallerWriter { caller, out })))
}

fn export_guarded(writer: &Writer, mut out: impl Write) -> Result<Transferred, MaintainError> {
    let db = writer.read();
    let txn = db.begin_read().map_err(Error::from)?;
    let records = txn.open_table(RECORDS).map_err(Error::from)?;
    let index = IndexReader::open(&txn)?;
    let business = entity::counts(&txn)?;
    let counts = Transferred {
        records: records.len().map_err(Error::from)?,
        intents: count_intents(&txn)?,
        entities: business.0,
        unique: business.1,
        tokens: token::count(&txn)?,
    };
    write_header(&mut out, index.generation()?, index.clock_floor()?, counts)?;
    let mut count = 0;
    for entry in records.iter().map_err(Error::from)? {
        let (key, bytes) = entry.map_err(Error::from)?;
        let id = tables::decode_id(key.value())?;
        let record = tables::decode_record(key.value(), bytes.value())?;
        write_line(&mut out, &RecordView::new(&id, &record))?;
        count += 1;
    }
    let mut intents = 0;
    for_each_intent(&txn, |intent| {
        write_line(&mut out, &IntentLine::new(&intent))?;
        intents += 1;
        Ok::<_, MaintainError>(())
    })?;
    let (mut entity_lines, mut unique_lines) = (0, 0);
    entity::for_each(&txn, |line| {
        match line {
            BusinessLine::Entity(_) => entity_lines += 1,
            BusinessLine::Unique(_) => unique_lines += 1,
        }
        write_line(&mut out, &line)
    })?;
    let mut token_lines = 0;
    token::for_each(&txn, |line| {
        write_line(&mut out, &line)?;
        token_lines += 1;
        Ok::<_, MaintainError>(())
    })?;
    let written = MaintainError::Export;
    out.flush().map_err(written)?;
    Ok(Transferred {
        records: count,
        intents,
        entities: entity_lines,
        unique: unique_lines,
        tokens: token_lines,
    })
}

/// Reads what [`export`] wrote, in one transaction; see [`crate::Store::import`].
pub(crate) fn import(
    writer: &Writer,
    cache: &ReplayCache,
    input: impl BufRead,
) -> Result<Transferred, ImportError> {
    let imported = writer.transact("import", |txn, tables| {
        let mut lines = Lines::new(input);
        let mut written = Vec::new();
        while let Some((number, line)) = lines.next_line()? {
            let bad = |message: String| ImportError::Line {
                line: number,
                message,
            };
            match line {
                Line::Header {
                    generation,
                    clock_floor,
                } => {
                    tables.raise_generation(generation)?;
                    tables.raise_floor(clock_floor)?;
                }
                Line::Token(line) => token::import(txn, tables, &line)?.map_err(bad)?,
                Line::Business(line) => entity::import(txn, &line)?.map_err(bad)?,
                Line::Intent(intent) => {
                    import_intent(txn, &intent)?.map_err(bad)?;
                }
                Line::Record(id, record) => {
                    let id_key = id.to_key_bytes();
                    match tables.get(&id_key)? {
                        Some(existing) if existing == record => {}
                        Some(_) => {
                            return Err(bad(format!(
                                "{id}: the store already holds a different record under this id"
                            )));
                        }
                        None => {
                            tables.put(&id_key, None, &record)?;
                            written.push(id_key);
                        }
                    }
                    tables.raise_generation(record.generation)?;
                    tables.raise_floor(record.updated_at)?;
                }
            }
        }
        Ok((lines.finish()?, written)).map(|imported| (imported, true))
    })?;
    let (transferred, written) = imported;
    // Defensive: the replay cache holds no record of a key the file did not hold,
    // unless another process swept it; it must not shadow the imported one.
    cache.invalidate(written.iter().map(Vec::as_slice));
    Ok(transferred)
}

/// The caller's writer, called through [`Caller::call`]: its panic is its own.
struct CallerWriter<'c, W> {
    caller: &'c mut Caller,
    out: W,
}

impl<W: Write> Write for CallerWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let out = &mut self.out;
        self.caller
            .call(|| out.write(buf))
            .unwrap_or_else(|| Err(io::Error::other("the writer panicked")))
    }

    fn flush(&mut self) -> io::Result<()> {
        let out = &mut self.out;
        self.caller
            .call(|| out.flush())
            .unwrap_or_else(|| Err(io::Error::other("the writer panicked")))
    }
}
