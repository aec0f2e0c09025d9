//! The layers after the key (docs/design.md §8): entities moved by a state
//! machine with a version check ([`crate::Store::transition_in`]), and business
//! uniqueness that outlives retention ([`crate::Store::claim_unique_in`]).

pub(crate) mod steps;

use idem_core::{Entity, EntityDecision, Machine, Timestamp};
use redb::{ReadTransaction, WriteTransaction};

use crate::error::Error;
use crate::file::handle::guard_read;
use crate::file::store::Store;
use crate::seam::entity::Entities;
use crate::seam::entity::{EntityId, Uniqueness};

impl Store {
    /// Moves the entity `id` to `to` inside a write transaction the caller has, such as
    /// the one [`Store::execute`] hands its work: the key's record, the business write
    /// and the state change then commit together, or none does. Decides with
    /// [`idem_core::machine::transition`]: only [`EntityDecision::Applied`] writes.
    ///
    /// `expected_version` is the optimistic check: the version the caller read; `None`
    /// skips it.
    ///
    /// ```
    /// use idem_store::redb::{ReadableTable, TableDefinition};
    /// use idem_store::entity::{EntityDecision, EntityId, Machine, MachineSpec, Uniqueness};
    /// use idem_store::{Executed, Fingerprint, Outcome, RecordId, Store, Timestamp, Verdict};
    ///
    /// const REFUNDS: TableDefinition<&str, u64> = TableDefinition::new("shop.refunds");
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("terminal.redb"))?;
    /// let payment = Machine::new(MachineSpec {
    ///     states: vec!["created".into(), "paid".into(), "refunded".into()],
    ///     initial: "created".into(),
    ///     moves: vec![("created".into(), "paid".into()), ("paid".into(), "refunded".into())],
    /// })?;
    /// let pay = EntityId::new("shop-7", "payment", "p-991")?;
    /// let now = Timestamp(1_700_000_000_000);
    /// store.transition(&payment, &pay, "paid", None, now)?;
    ///
    /// // Two refund requests under two different keys (a double click on two devices): the
    /// // key cannot see that they are one refund; the receipt claim and the machine can.
    /// let refund = |key: &str| -> Result<Executed<()>, Box<dyn std::error::Error>> {
    ///     let id = RecordId::new("shop-7", "refund", key)?;
    ///     let work = |txn: &idem_store::redb::WriteTransaction| -> Result<_, idem_store::Error> {
    ///         // The receipt number is claimed once, whichever key comes first.
    ///         if let Uniqueness::Taken { by } = store.claim_unique_in(txn, "shop-7", "receipt", "R-77", key)? {
    ///             return Ok((Verdict::Failed, Outcome::new(409, format!("receipt R-77 is {by}'s")), ()));
    ///         }
    ///         match store.transition_in(txn, &payment, &pay, "refunded", Some(1), now)? {
    ///             EntityDecision::Applied { .. } => {
    ///                 txn.open_table(REFUNDS)?.insert("p-991", 1250)?;
    ///                 Ok((Verdict::Succeeded, Outcome::new(200, "refunded"), ()))
    ///             }
    ///             other => Ok((Verdict::Failed, Outcome::new(409, format!("{other:?}")), ())),
    ///         }
    ///     };
    ///     Ok(store.execute(&id, Fingerprint::of_bytes(b"refund p-991"), now, work)?)
    /// };
    /// assert!(matches!(refund("device-a")?, Executed::Ran { .. }));
    /// let second = refund("device-b")?;
    /// assert_eq!(second.outcome().map(|(v, o)| (v, o.code)), Some((Verdict::Failed, 409)));
    /// let refunds = store.read(|txn| -> Result<u64, idem_store::redb::Error> {
    ///     Ok(txn.open_table(REFUNDS)?.iter()?.count() as u64)
    /// })??;
    /// assert_eq!(refunds, 1, "one refund, not two");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Storage or decode errors; after one the transaction may hold part of the write:
    /// do not commit it (return an error from the work).
    pub fn transition_in(
        &self,
        txn: &WriteTransaction,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        steps::transition_in(txn, machine, id, to, expected_version, now)
    }

    /// [`Store::transition_in`] in a write transaction of its own, committed when the
    /// move is applied.
    ///
    /// # Errors
    ///
    /// Storage or decode errors; nothing was written.
    pub fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        self.shared.writer.transact("transition", |txn, _| {
            let decision = steps::transition_in(txn, machine, id, to, expected_version, now)?;
            let applied = matches!(decision, EntityDecision::Applied { .. });
            Ok((decision, applied))
        })
    }

    /// The entity `id`, if it was ever moved.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            steps::get(&db.begin_read()?, id)
        })
    }

    /// The entity `id` as `txn` sees it: read a business row and the entity's version
    /// from one snapshot, then move it with that version as `expected_version`.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn entity_in(&self, txn: &ReadTransaction, id: &EntityId) -> Result<Option<Entity>, Error> {
        steps::get(txn, id)
    }

    /// The entities of `kind`, in `state` when given, ordered by state then by tenant and
    /// id, each in the order of its key bytes (a shorter name first), at most `limit`.
    ///
    /// # Errors
    ///
    /// Storage or decode errors.
    pub fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            steps::list(&db.begin_read()?, kind, state, limit)
        })
    }

    /// Claims the business value `value` (a receipt number, an order number) in `scope`
    /// for the holder `by`, inside the caller's write transaction. A second claim by
    /// another holder answers [`Uniqueness::Taken`] with who holds it; the same holder
    /// claiming again gets [`Uniqueness::Claimed`]. Sweep never removes a claim; only
    /// [`Store::release_unique`] does.
    ///
    /// # Errors
    ///
    /// [`Error::Name`] for a tenant, scope, value or holder that breaks its rule (the
    /// tenant rule, the operation rule, the key rule, 1 to 255 bytes); storage errors.
    pub fn claim_unique_in(
        &self,
        txn: &WriteTransaction,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        steps::claim_unique_in(txn, tenant, scope, value, by)
    }

    /// Claims `value` in `scope` for `by`, in a transaction of its own; see
    /// [`Store::claim_unique_in`], which claims it together with the caller's writes.
    ///
    /// # Errors
    ///
    /// [`Error::Name`]; storage errors.
    pub fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        self.shared.writer.transact("claim_unique", |txn, _| {
            let found = steps::claim_unique_in(txn, tenant, scope, value, by)?;
            let claimed = found == Uniqueness::Claimed;
            Ok((found, claimed))
        })
    }

    /// Gives `value` in `scope` back, in a transaction of its own; true when it was
    /// claimed.
    ///
    /// # Errors
    ///
    /// [`Error::Name`]; storage errors.
    pub fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        self.shared.writer.transact("release_unique", |txn, _| {
            let released = steps::release_unique_in(txn, tenant, scope, value)?;
            Ok((released, released))
        })
    }

    /// Who holds `value` in `scope`, if anyone.
    ///
    /// # Errors
    ///
    /// [`Error::Name`]; storage errors.
    pub fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        guard_read(|_| {
            let db = self.shared.writer.read();
            steps::unique_holder(&db.begin_read()?, tenant, scope, value)
        })
    }
}

impl Entities for Store {
    async fn transition(
        &self,
        machine: &Machine,
        id: &EntityId,
        to: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<EntityDecision, Error> {
        Store::transition(self, machine, id, to, expected_version, now)
    }

    async fn get_entity(&self, id: &EntityId) -> Result<Option<Entity>, Error> {
        Store::get_entity(self, id)
    }

    async fn list_entities(
        &self,
        kind: &str,
        state: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(EntityId, Entity)>, Error> {
        Store::list_entities(self, kind, state, limit)
    }

    async fn claim_unique(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
        by: &str,
    ) -> Result<Uniqueness, Error> {
        Store::claim_unique(self, tenant, scope, value, by)
    }

    async fn release_unique(&self, tenant: &str, scope: &str, value: &str) -> Result<bool, Error> {
        Store::release_unique(self, tenant, scope, value)
    }

    async fn unique_holder(
        &self,
        tenant: &str,
        scope: &str,
        value: &str,
    ) -> Result<Option<String>, Error> {
        Store::unique_holder(self, tenant, scope, value)
    }
}
