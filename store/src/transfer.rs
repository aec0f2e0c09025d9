//! The JSON-lines export and import of a whole store.
//!
//! An export is a header line, then one record per line:
//!
//! ```text
//! {"idem_export":1,"generation":42,"records":2}
//! {"tenant":"shop","operation":"credit","key":"k-1","state":"succeeded","generation":41,"fingerprint":"9f…","created_at":1700000000000,"updated_at":1700000000100,"expires_at":1700086400100,"completed_at":1700000000100,"code":200,"outcome_b64":"b2s="}
//! {"tenant":"shop","operation":"credit","key":"k-2","state":"pending","generation":42,"fingerprint":"9f…","created_at":1700000000200,"updated_at":1700000000200,"lease_until":1700000030200}
//! ```
//!
//! Each record line is a [`RecordView`]. Import reads exactly this back: every record
//! byte for byte, and the generation counter raised to at least the header's and every
//! record's generation, so generations keep increasing after a restore.

use std::io::{self, BufRead, BufWriter, Write};

use idem_core::Generation;
use redb::{ReadableTable, ReadableTableMetadata};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::cache::ReplayCache;
use crate::error::{Error, ImportError, MaintainError};
use crate::handle::{Caller, guard_read};
use crate::tables::{self, GENERATION_KEY, META, RECORDS};
use crate::view::{RecordView, ViewError, unsigned, view_error};
use crate::writer::Writer;

/// The version of the export format, in the header's `idem_export` field.
pub const EXPORT_VERSION: u64 = 1;

/// The first line of an export.
#[derive(Debug, Serialize)]
struct Header {
    idem_export: u64,
    generation: u64,
    records: u64,
}

/// Writes every record as JSON lines; see [`crate::Store::export`].
pub(crate) fn export(writer: &Writer, out: impl Write) -> Result<u64, MaintainError> {
    guard_read(|caller| export_guarded(writer, BufWriter::new(CallerWriter { caller, out })))
}

fn export_guarded(writer: &Writer, mut out: impl Write) -> Result<u64, MaintainError> {
    let db = writer.read();
    let txn = db.begin_read().map_err(Error::from)?;
    let records = txn.open_table(RECORDS).map_err(Error::from)?;
    let meta = txn.open_table(META).map_err(Error::from)?;
    let header = Header {
        idem_export: EXPORT_VERSION,
        generation: tables::read_meta(&meta, GENERATION_KEY)?.unwrap_or(0),
        records: records.len().map_err(Error::from)?,
    };
    let written = MaintainError::Export;
    serde_json::to_writer(&mut out, &header).map_err(|e| written(io::Error::from(e)))?;
    out.write_all(b"\n").map_err(written)?;
    let mut count = 0;
    for entry in records.iter().map_err(Error::from)? {
        let (key, bytes) = entry.map_err(Error::from)?;
        let id = tables::decode_id(key.value())?;
        let record = tables::decode_record(key.value(), bytes.value())?;
        serde_json::to_writer(&mut out, &RecordView::new(&id, &record))
            .map_err(|e| written(io::Error::from(e)))?;
        out.write_all(b"\n").map_err(written)?;
        count += 1;
    }
    out.flush().map_err(written)?;
    Ok(count)
}

/// Reads what [`export`] wrote, in one transaction; see [`crate::Store::import`].
pub(crate) fn import(
    writer: &Writer,
    cache: &ReplayCache,
    input: impl BufRead,
) -> Result<u64, ImportError> {
    let writing = writer.writing("import")?;
    let mut count = 0u64;
    let mut announced = None;
    let mut last_line = 0u64;
    let mut written = Vec::new();
    {
        let mut tables = writer.tables(&writing)?;
        for (index, line) in input.lines().enumerate() {
            let number = index as u64 + 1;
            last_line = number;
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
            if object.contains_key("idem_export") {
                if count > 0 || announced.is_some() {
                    return Err(bad("a header line may only come first".into()));
                }
                let (generation, records) = read_header(&object).map_err(|e| bad(e.to_string()))?;
                tables.raise_generation(Generation(generation))?;
                announced = Some(records);
                continue;
            }
            let (id, record) = RecordView::from_json(&object)
                .and_then(|view| view.to_record())
                .map_err(|e| bad(e.to_string()))?;
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
            count += 1;
        }
    }
    if let Some(records) = announced.filter(|&n| n != count) {
        return Err(ImportError::Line {
            line: last_line,
            message: format!(
                "the header announces {records} records, the input holds {count} (truncated?)"
            ),
        });
    }
    writer.commit(writing)?;
    // Defensive: the replay cache holds no record of a key the file did not hold,
    // unless another process swept it; it must not shadow the imported one.
    cache.invalidate(written.iter().map(Vec::as_slice));
    Ok(count)
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

fn read_header(object: &Map<String, Value>) -> Result<(u64, u64), ViewError> {
    if let Some(unknown) = object
        .keys()
        .find(|k| !["idem_export", "generation", "records"].contains(&k.as_str()))
    {
        return Err(view_error("header", format!("unknown field {unknown:?}")));
    }
    let version = unsigned(object, "idem_export")?;
    if version != EXPORT_VERSION {
        return Err(view_error(
            "idem_export",
            format!("export version {version}, this build reads version {EXPORT_VERSION}"),
        ));
    }
    Ok((
        unsigned(object, "generation")?,
        unsigned(object, "records")?,
    ))
}
