//! A claim whose answer was lost, given back once the database answers again
//! (`seam::lost` holds the rules): the reads and deletes by the claim's mark, and the
//! task that waits for the database.

use std::time::Duration;

use idem_core::{Record, RecordId};
use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::MySqlStore;
use super::error::database;
use super::row::{Columns, key_values, record_at};
use super::statements::{CLAIMED_BY, DELETE_CLAIMED, exec_count};
use crate::error::Error;
use crate::seam::lost::{self, Claimant, LostClaims};

/// How long past the session's statement timeout a lost claim may still land: a commit
/// that waits for a semi-synchronous replica's acknowledgement, which
/// `max_statement_time` does not cover (`rpl_semi_sync_master_timeout`, 10 s by
/// default), and then ends.
pub(super) const LANDING_MARGIN: Duration = Duration::from_secs(15);

impl MySqlStore {
    /// Gives back `claimant`'s claim of `id` in a task of its own, if it landed
    /// (`seam::lost::give_back_until`): looked for until the statement timeout, plus
    /// [`LANDING_MARGIN`], has passed since the loss. The store is idle once it is done.
    pub(super) fn give_back_later(&self, id: &RecordId, claimant: Claimant) {
        let (store, id) = (self.clone(), id.clone());
        let entered = self.inner.background.enter();
        self.inner.runtime.spawn(async move {
            let _entered = entered;
            let may_land_for = store.inner.may_land_for;
            let _ = lost::give_back_until(&store, &id, claimant, &store.inner.config, may_land_for)
                .await;
        });
    }
}

impl LostClaims for MySqlStore {
    fn unanswered(e: &Error) -> bool {
        matches!(e, Error::MySql { .. })
    }

    async fn claimed_by(&self, id: &RecordId, claimant: Claimant) -> Result<Option<Record>, Error> {
        let mut conn = self.conn("give back").await?;
        let mut params = key_values(id).to_vec();
        params.push(claimant.0.into());
        let row: Option<Row> = conn
            .exec_first(CLAIMED_BY, params)
            .await
            .map_err(database("give back"))?;
        row.map(|row| record_at(&row, 0, id)).transpose()
    }

    async fn delete_claimed(
        &self,
        id: &RecordId,
        claimant: Claimant,
        record: &Record,
    ) -> Result<bool, Error> {
        let mut conn = self.conn("give back").await?;
        let was = Columns::of(record)?;
        let mut params = key_values(id).to_vec();
        params.extend([claimant.0.into(), was.generation.into(), was.state.into()]);
        let deleted = exec_count(&mut conn, DELETE_CLAIMED, params)
            .await
            .map_err(database("give back"))?;
        Ok(deleted == 1)
    }
}
