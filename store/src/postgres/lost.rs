//! A claim whose answer was lost, given back once the database answers again
//! (`seam::lost` holds the rules): the reads and deletes by the claim's mark, and the
//! task that waits for the database.

use std::time::Duration;

use idem_core::{Record, RecordId};

use super::PgStore;
use super::error::database;
use super::row::{Columns, record_at};
use super::two_phase::key_params;
use crate::error::Error;
use crate::seam::lost::{self, Claimant, LostClaims};

/// How long past the server's statement timeout a lost claim may still land: the end of
/// a commit that the timeout does not cover.
const LANDING_MARGIN: Duration = Duration::from_secs(5);

impl PgStore {
    /// Gives back `claimant`'s claim of `id` in a task of its own, if it landed
    /// (`seam::lost::give_back_until`): looked for until the server's statement timeout,
    /// plus a margin, has passed since the loss. The store is idle once it is done.
    pub(super) fn give_back_later(&self, id: &RecordId, claimant: Claimant) {
        let (store, id) = (self.clone(), id.clone());
        let entered = self.inner.background.enter();
        self.inner.runtime.spawn(async move {
            let _entered = entered;
            let may_land_for = store.inner.pool.statement_timeout() + LANDING_MARGIN;
            let _ = lost::give_back_until(&store, &id, claimant, &store.inner.config, may_land_for)
                .await;
        });
    }
}

impl LostClaims for PgStore {
    fn unanswered(e: &Error) -> bool {
        matches!(e, Error::Database { .. })
    }

    async fn claimed_by(&self, id: &RecordId, claimant: Claimant) -> Result<Option<Record>, Error> {
        let connection = self.connection("give back").await?;
        let [t, o, k] = key_params(id);
        let row = connection
            .client
            .query_opt(
                &connection.statements.claimed_by,
                &[&t, &o, &k, &claimant.0],
            )
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
        let connection = self.connection("give back").await?;
        let [t, o, k] = key_params(id);
        let was = Columns::of(record)?;
        let deleted = connection
            .client
            .query_opt(
                &connection.statements.delete_claimed,
                &[&t, &o, &k, &claimant.0, &was.generation, &was.state],
            )
            .await
            .map_err(database("give back"))?;
        Ok(deleted.is_some())
    }
}
