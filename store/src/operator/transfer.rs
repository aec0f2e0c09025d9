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

use idem_core::{Generation, Intent, Record, RecordId, Timestamp};
use redb::{ReadableTable, ReadableTableMetadata};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::cache::ReplayCache;
use crate::engine::handle::{Caller, guard_read};
use crate::engine::tables::{self, IndexReader, RECORDS};
use crate::engine::writer::Writer;
use crate::error::{Error, ImportError, MaintainError};
use crate::error::{ViewError, view_error};
use crate::operator::view::{RecordView, unsigned};
use crate::protocol::entity::{self, BusinessLine};
use crate::protocol::outbox::{IntentView, count_intents, for_each_intent, import_intent};
use crate::protocol::token;

/// The version of the export format, in the header's `idem_export` field: 2 since
/// exports carry the outbox's intents, 3 since they carry entities, claimed values and
/// one-time tokens.
/// Versions 1 and 2 are read too.
pub(crate) const EXPORT_VERSION: u64 = 3;

/// The first line of an export.
#[derive(Debug, Serialize)]
struct Header {
    idem_export: u64,
    generation: u64,
    clock_floor: u64,
    records: u64,
    intents: u64,
    entities: u64,
    unique: u64,
    tokens: u64,
}

/// An intent line of an export.
#[derive(Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentLine {
    intent: IntentView,
}

impl IntentLine {
    /// The line of `intent`.
    pub(crate) fn new(intent: &Intent) -> IntentLine {
        IntentLine {
            intent: IntentView::new(intent),
        }
    }
}

/// How much an export wrote or an import read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Transferred {
    /// Records of the receiver.
    pub records: u64,
    /// Intents of the outbox.
    pub intents: u64,
    /// Entities moved by a state machine.
    pub entities: u64,
    /// Claimed business values.
    pub unique: u64,
    /// Issued one-time tokens.
    pub tokens: u64,
}

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

/// One line of an export, read and checked on its own.
pub(crate) enum Line {
    /// The header: what the export's store had handed out and the time it had reached.
    Header {
        /// The generation counter.
        generation: Generation,
        /// The clock floor (0 before version 2).
        clock_floor: Timestamp,
    },
    /// A record of the receiver.
    Record(RecordId, Record),
    /// An intent of the outbox.
    Intent(Intent),
    /// An entity or a claimed business value.
    Business(BusinessLine),
    /// An issued one-time token.
    Token(token::TokenLine),
}

/// The lines of an export, in order: the header first if any, then records, intents,
/// entities and claimed values, tokens; [`Lines::finish`] checks the counts the header
/// announced. Every engine's import reads through it.
pub(crate) struct Lines<R> {
    input: io::Lines<R>,
    number: u64,
    announced: Option<Announced>,
    found: Transferred,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R) -> Lines<R> {
        Lines {
            input: input.lines(),
            number: 0,
            announced: None,
            found: Transferred::default(),
        }
    }

    /// The next line and its number, or `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, Line)>, ImportError> {
        loop {
            let Some(line) = self.input.next() else {
                return Ok(None);
            };
            self.number += 1;
            let number = self.number;
            let bad = |message: String| ImportError::Line {
                line: number,
                message,
            };
            let line = line.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let object = match serde_json::from_str::<Value>(&line) {
                Ok(Value::Object(object)) => object,
                Ok(_) => return Err(bad("expected a JSON object".into())),
                Err(e) => return Err(bad(format!("not JSON: {e}"))),
            };
            let found = &mut self.found;
            let business = found.entities + found.unique;
            if object.contains_key("idem_export") {
                if found.records > 0
                    || found.intents > 0
                    || business > 0
                    || self.announced.is_some()
                {
                    return Err(bad("a header line may only come first".into()));
                }
                let header = read_header(&object).map_err(|e| bad(e.to_string()))?;
                let line = Line::Header {
                    generation: Generation(header.generation),
                    clock_floor: Timestamp(header.clock_floor.unwrap_or(0)),
                };
                self.announced = Some(header);
                return Ok(Some((number, line)));
            }
            if object.contains_key("token") {
                let line: token::TokenLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(e.to_string()))?;
                found.tokens += 1;
                return Ok(Some((number, Line::Token(line))));
            }
            if found.tokens > 0 {
                return Err(bad("a line after the tokens: tokens come last".into()));
            }
            if object.contains_key("entity") || object.contains_key("unique") {
                let line: BusinessLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(e.to_string()))?;
                match line {
                    BusinessLine::Entity(_) => found.entities += 1,
                    BusinessLine::Unique(_) => found.unique += 1,
                }
                return Ok(Some((number, Line::Business(line))));
            }
            if object.contains_key("intent") {
                if business > 0 {
                    return Err(bad(
                        "an intent line after the entities: intents come first".into()
                    ));
                }
                let line: IntentLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(format!("intent: {e}")))?;
                let intent = line
                    .intent
                    .to_intent()
                    .map_err(|e| bad(format!("intent {e}")))?;
                found.intents += 1;
                return Ok(Some((number, Line::Intent(intent))));
            }
            if found.intents + business > 0 {
                return Err(bad(
                    "a record line after the intents or entities: records come first".into(),
                ));
            }
            let (id, record) = RecordView::from_json(&object)
                .and_then(|view| view.to_record())
                .map_err(|e| bad(e.to_string()))?;
            found.records += 1;
            return Ok(Some((number, Line::Record(id, record))));
        }
    }

    /// What the lines held, once all are read: refused when a header announced other
    /// counts (a truncated export).
    pub(crate) fn finish(self) -> Result<Transferred, ImportError> {
        let found = self.found;
        if let Some(header) = self.announced {
            let announced = Transferred {
                records: header.records,
                intents: header.intents.unwrap_or(0),
                entities: header.entities.unwrap_or(0),
                unique: header.unique.unwrap_or(0),
                tokens: header.tokens.unwrap_or(0),
            };
            if announced != found {
                return Err(ImportError::Line {
                    line: self.number,
                    message: format!(
                        "the header announces {} records, {} intents, {} entities, {} claimed values and {} tokens, the input holds {}, {}, {}, {} and {} (truncated?)",
                        announced.records,
                        announced.intents,
                        announced.entities,
                        announced.unique,
                        announced.tokens,
                        found.records,
                        found.intents,
                        found.entities,
                        found.unique,
                        found.tokens
                    ),
                });
            }
        }
        Ok(found)
    }
}

/// Writes an export's header line.
pub(crate) fn write_header(
    out: &mut impl Write,
    generation: Generation,
    clock_floor: Timestamp,
    counts: Transferred,
) -> Result<(), MaintainError> {
    let header = Header {
        idem_export: EXPORT_VERSION,
        generation: generation.0,
        clock_floor: clock_floor.as_millis(),
        records: counts.records,
        intents: counts.intents,
        entities: counts.entities,
        unique: counts.unique,
        tokens: counts.tokens,
    };
    let written = MaintainError::Export;
    serde_json::to_writer(&mut *out, &header).map_err(|e| written(io::Error::from(e)))?;
    out.write_all(b"\n").map_err(written)
}

/// Writes one line of an export.
pub(crate) fn write_line(out: &mut impl Write, line: &impl Serialize) -> Result<(), MaintainError> {
    let written = MaintainError::Export;
    serde_json::to_writer(&mut *out, line).map_err(|e| written(io::Error::from(e)))?;
    out.write_all(b"\n").map_err(written)
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

/// What a header line announces.
struct Announced {
    generation: u64,
    /// Version 2 and later.
    clock_floor: Option<u64>,
    records: u64,
    /// Version 2 and later.
    intents: Option<u64>,
    /// Version 3 and later.
    entities: Option<u64>,
    /// Version 3 and later.
    unique: Option<u64>,
    /// Version 3 and later.
    tokens: Option<u64>,
}

fn read_header(object: &Map<String, Value>) -> Result<Announced, ViewError> {
    let version = unsigned(object, "idem_export")?;
    let fields: &[&str] = match version {
        1 => &["idem_export", "generation", "records"],
        2 => &[
            "idem_export",
            "generation",
            "clock_floor",
            "records",
            "intents",
        ],
        EXPORT_VERSION => &[
            "idem_export",
            "generation",
            "clock_floor",
            "records",
            "intents",
            "entities",
            "unique",
            "tokens",
        ],
        _ => {
            return Err(view_error(
                "idem_export",
                format!(
                    "export version {version}, this build reads versions 1 to {EXPORT_VERSION}"
                ),
            ));
        }
    };
    if let Some(unknown) = object.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(view_error("header", format!("unknown field {unknown:?}")));
    }
    Ok(Announced {
        generation: unsigned(object, "generation")?,
        clock_floor: (version >= 2)
            .then(|| unsigned(object, "clock_floor"))
            .transpose()?,
        records: unsigned(object, "records")?,
        intents: (version >= 2)
            .then(|| unsigned(object, "intents"))
            .transpose()?,
        entities: (version >= 3)
            .then(|| unsigned(object, "entities"))
            .transpose()?,
        unique: (version >= 3)
            .then(|| unsigned(object, "unique"))
            .transpose()?,
        tokens: (version >= 3)
            .then(|| unsigned(object, "tokens"))
            .transpose()?,
    })
}
