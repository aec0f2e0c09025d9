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
use crate::seam::lost::{self, Claimant, GivenBack, LostClaims};

/// How long a lost claim's give-back waits for the database to answer again (a
/// failover, a restart) before it leaves the claim to its lease.
const GIVE_BACK_WINDOW: Duration = Duration::from_secs(600);

/// How long past the server's statement timeout a lost claim may still land: the end of
/// a commit that the timeout does not cover.
const LANDING_MARGIN: Duration = Duration::from_secs(5);

impl PgStore {
    /// Gives back `claimant`'s claim of `id` in a task of its own, if it landed.
    ///
    /// Its session may outlive its connection: a statement the server still runs, or a
    /// commit still ending, can land the claim after the connection broke. So a claim
    /// not found yet is looked for again until the server's statement timeout (plus a
    /// margin) has passed since the loss; a failure of the database (it does not answer
    /// yet) is tried again, for at most [`GIVE_BACK_WINDOW`]. Each try is a read by the
    /// key and the claim's mark, and a delete conditioned on it, so trying again is
    /// harmless. The store is idle once it is done.
    pub(super) fn give_back_later(&self, id: &RecordId, claimant: Claimant) {
        let (store, id) = (self.clone(), id.clone());
        let entered = self.inner.background.enter();
        self.inner.runtime.spawn(async move {
            let _entered = entered;
            let lost_at = tokio::time::Instant::now();
            let deadline = lost_at + GIVE_BACK_WINDOW;
            let may_land_until = lost_at + store.inner.pool.statement_timeout() + LANDING_MARGIN;
            let mut pause = Duration::from_millis(25);
            loop {
                let tried = lost::give_back(&store, &id, claimant, &store.inner.config).await;
                let again = match tried {
                    Ok(GivenBack::NotFound) => tokio::time::Instant::now() < may_land_until,
                    Err(Error::Database { .. }) => tokio::time::Instant::now() + pause < deadline,
                    // Given back, or refused for good: the claim, if any, is left to
                    // its lease.
                    Ok(GivenBack::Released { .. }) | Err(_) => false,
                };
                if !again {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }
}

impl LostClaims for PgStore {
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
