//! Reading records: one record by id, and the records that match a [`ListFilter`],
//! streamed from one snapshot.

use std::ops::ControlFlow;

use idem_core::{Record, RecordId, State};
use redb::ReadableTable;

use crate::error::Error;
use crate::handle::{Caller, guard_read};
use crate::tables::{self, RECORDS, STATES};
use crate::writer::Writer;

/// Which records [`crate::Store::list`] visits. Every field narrows; the default visits
/// all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only records in this state.
    pub state: Option<State>,
    /// Only records of this tenant.
    pub tenant: Option<String>,
    /// Only records of this operation.
    pub operation: Option<String>,
    /// Visit at most this many records.
    pub limit: Option<usize>,
}

impl ListFilter {
    fn matches(&self, id: &RecordId) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == id.tenant())
            && self
                .operation
                .as_deref()
                .is_none_or(|o| o == id.operation())
    }

    /// Refuses a tenant or operation that no record could have, naming the rule.
    fn validate(&self) -> Result<(), Error> {
        let tenant = self.tenant.as_deref().unwrap_or("t");
        let operation = self.operation.as_deref().unwrap_or("o");
        RecordId::new(tenant, operation, "k")?;
        Ok(())
    }
}

/// The record under `id`, if any, from the latest commit.
pub(crate) fn get(writer: &Writer, id: &RecordId) -> Result<Option<Record>, Error> {
    guard_read(|_| {
        let db = writer.read();
        let txn = db.begin_read()?;
        let records = txn.open_table(RECORDS)?;
        tables::read_record(&records, &id.to_key_bytes())
    })
}

/// Visits the records that match `filter`; see [`crate::Store::list`].
pub(crate) fn list(
    writer: &Writer,
    filter: &ListFilter,
    visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
) -> Result<(), Error> {
    filter.validate()?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return Ok(());
    }
    guard_read(|caller| list_guarded(writer, filter, limit, caller, visit))
}

fn list_guarded(
    writer: &Writer,
    filter: &ListFilter,
    limit: usize,
    caller: &mut Caller,
    mut visit: impl FnMut(RecordId, Record) -> ControlFlow<()>,
) -> Result<(), Error> {
    let db = writer.read();
    let txn = db.begin_read()?;
    let records = txn.open_table(RECORDS)?;
    let mut seen = 0usize;
    let mut offer = |id_key: &[u8], bytes: &[u8]| -> Result<ControlFlow<()>, Error> {
        let id = tables::decode_id(id_key)?;
        if !filter.matches(&id) {
            return Ok(ControlFlow::Continue(()));
        }
        let record = tables::decode_record(id_key, bytes)?;
        seen += 1;
        let visited = caller.call(|| visit(id, record));
        if visited.is_none_or(|flow| flow.is_break()) || seen >= limit {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    };
    match filter.state {
        Some(state) => {
            // A schema 1 file read before any writable open has no tombstone index.
            let Some(index) = tables::open_read(&txn, STATES[tables::state_index(state)])? else {
                return Ok(());
            };
            for entry in index.iter()? {
                let (key, _) = entry?;
                let (_, id_key) = tables::split_timed_key(key.value())?;
                let Some(bytes) = records.get(id_key)? else {
                    return Err(Error::Corrupt {
                        detail: format!(
                            "{state} index names {}, which has no record",
                            tables::describe_key(id_key)
                        ),
                    });
                };
                if offer(id_key, bytes.value())?.is_break() {
                    break;
                }
            }
        }
        None => {
            let prefix = RecordId::prefix(filter.tenant.as_deref(), filter.operation.as_deref());
            for entry in records.range(prefix.as_slice()..)? {
                let (key, bytes) = entry?;
                if !key.value().starts_with(&prefix) {
                    break;
                }
                if offer(key.value(), bytes.value())?.is_break() {
                    break;
                }
            }
        }
    }
    Ok(())
}
