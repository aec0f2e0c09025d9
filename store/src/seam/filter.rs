//! Which records a list shows, and in what order: the same on every engine.

use idem_core::{RecordId, State};

use crate::error::Error;

/// Which records a list ([`crate::Receiver::list`]) gives, and in what order, on every
/// engine: with a state, Pending and Unknown records oldest `created_at` first, settled
/// records and tombstones soonest `expires_at` first, then by id; without one, by id.
/// Ids are in the order of their key bytes ([`idem_core::RecordId::to_key_bytes`]): by
/// tenant, a shorter one first, then byte by byte; then by operation likewise; then by
/// key. Every field narrows; the default gives all.
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
    pub(crate) fn matches(&self, id: &RecordId) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == id.tenant())
            && self
                .operation
                .as_deref()
                .is_none_or(|o| o == id.operation())
    }

    /// Refuses a tenant or operation that no record could have, naming the rule.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let tenant = self.tenant.as_deref().unwrap_or("t");
        let operation = self.operation.as_deref().unwrap_or("o");
        RecordId::new(tenant, operation, "k")?;
        Ok(())
    }
}
