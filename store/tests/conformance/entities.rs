//! Entities (docs/design.md §8) through the seam ([`idem_store::entity::Entities`]):
//! moves the machine allows or refuses, the version check, reads and lists, callbacks in
//! every order, and entities with claimed values through export and import. (Claimed
//! values on their own are `uniqueness.rs`; moves and claims inside a caller's
//! transaction, `transition_in` and `claim_unique_in`, are each engine's own tests.)

use std::collections::BTreeMap;
use std::sync::Arc;

use idem_core::{Config, Outcome, Verdict};
use idem_store::Receiver;
use idem_store::entity::{Entities, Entity, EntityDecision, EntityId, Machine, Uniqueness};

use crate::machines::{machine, orders};
use crate::{Engine, MINUTE, assert_within, id, settle};

/// A payment: created, paid, refunded, in that order only.
fn payment() -> Machine {
    machine(
        &["created", "paid", "refunded"],
        &[("created", "paid"), ("paid", "refunded")],
    )
}

/// The payment `id` of the tenant `shop`.
fn pay(id: &str) -> EntityId {
    EntityId::new("shop", "payment", id).unwrap()
}

/// Moves `id` to `to` by `machine`, with `expected_version`, at the harness's time.
async fn move_to<E: Engine>(
    h: &E,
    machine: &Machine,
    id: &EntityId,
    to: &str,
    expected_version: Option<u64>,
) -> EntityDecision {
    h.store()
        .transition(machine, id, to, expected_version, h.now())
        .await
        .unwrap()
}

/// The entity of an applied move, checked to carry the engine's time of the move;
/// panics on any other answer.
async fn applied<E: Engine>(
    h: &E,
    machine: &Machine,
    id: &EntityId,
    to: &str,
    expected_version: Option<u64>,
) -> Entity {
    let before = h.clock().await;
    let decision = move_to(h, machine, id, to, expected_version).await;
    let after = h.clock().await;
    match decision {
        EntityDecision::Applied { entity } => {
            assert_eq!(entity.state, to, "{id}");
            assert_within(entity.updated_at, before, after, "the time of the move");
            entity
        }
        other => panic!("{id} to {to}: expected Applied, got {other:?}"),
    }
}

/// The entity `id` as the store reads it.
async fn entity<E: Engine>(h: &E, id: &EntityId) -> Option<Entity> {
    h.store().get_entity(id).await.unwrap()
}

/// An illegal move.
fn illegal(from: &str, to: &str) -> EntityDecision {
    EntityDecision::Illegal {
        from: from.into(),
        to: to.into(),
    }
}

/// A move the machine allows is applied, a version higher; one already made is
/// AlreadyThere and writes nothing; one it does not allow (backwards, skipping a state,
/// to a state it lacks) is Illegal and writes nothing. An entity that never moved is in
/// the initial state: its first move is to that state or one the initial state allows.
pub(crate) async fn a_move_the_machine_allows_is_applied_and_any_other_is_refused<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let machine = payment();
    let p1 = pay("p-1");
    assert_eq!(entity(&h, &p1).await, None, "no move yet");
    let created = applied(&h, &machine, &p1, "created", None).await;
    assert_eq!(created.version, 1);
    assert_eq!(entity(&h, &p1).await.as_ref(), Some(&created));

    h.pass(MINUTE).await;
    assert_eq!(
        move_to(&h, &machine, &p1, "created", None).await,
        EntityDecision::AlreadyThere {
            entity: created.clone()
        }
    );
    assert_eq!(
        move_to(&h, &machine, &p1, "refunded", None).await,
        illegal("created", "refunded"),
        "a state skipped"
    );
    assert_eq!(
        move_to(&h, &machine, &p1, "lost", None).await,
        illegal("created", "lost"),
        "a state the machine lacks"
    );
    assert_eq!(
        entity(&h, &p1).await.as_ref(),
        Some(&created),
        "nothing written, not even the time"
    );

    let paid = applied(&h, &machine, &p1, "paid", None).await;
    assert_eq!(paid.version, 2);
    h.pass(MINUTE).await;
    let refunded = applied(&h, &machine, &p1, "refunded", None).await;
    assert_eq!(refunded.version, 3);
    assert!(
        refunded.updated_at > paid.updated_at,
        "{refunded:?} {paid:?}"
    );
    for back in ["paid", "created"] {
        assert_eq!(
            move_to(&h, &machine, &p1, back, None).await,
            illegal("refunded", back),
            "backwards"
        );
    }
    assert_eq!(entity(&h, &p1).await, Some(refunded));

    // Never moved: in the initial state, so a first move the initial state allows is
    // applied, and one it does not is refused from the initial state.
    let p2 = pay("p-2");
    assert_eq!(applied(&h, &machine, &p2, "paid", None).await.version, 1);
    let p3 = pay("p-3");
    assert_eq!(
        move_to(&h, &machine, &p3, "refunded", None).await,
        illegal("created", "refunded")
    );
    assert_eq!(entity(&h, &p3).await, None, "nothing written");
}

/// With an expected version, a move is applied only over that version: a stale one (or
/// one ahead) is a VersionMismatch naming both, and writes nothing. An entity that never
/// moved has version 0. A move already made is AlreadyThere whatever the version (a retry
/// of an applied move is harmless), and an illegal move is Illegal before any version.
pub(crate) async fn a_stale_expected_version_is_refused_and_writes_nothing<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let machine = payment();
    let p1 = pay("p-1");
    applied(&h, &machine, &p1, "created", Some(0)).await;
    let paid = applied(&h, &machine, &p1, "paid", Some(1)).await;
    assert_eq!(paid.version, 2);
    h.pass(MINUTE).await;
    for expected in [1, 3] {
        assert_eq!(
            move_to(&h, &machine, &p1, "refunded", Some(expected)).await,
            EntityDecision::VersionMismatch {
                expected,
                current: 2
            }
        );
        assert_eq!(
            entity(&h, &p1).await.as_ref(),
            Some(&paid),
            "nothing written"
        );
    }
    let refunded = applied(&h, &machine, &p1, "refunded", Some(2)).await;
    assert_eq!(refunded.version, 3);
    assert_eq!(
        move_to(&h, &machine, &p1, "refunded", Some(2)).await,
        EntityDecision::AlreadyThere {
            entity: refunded.clone()
        }
    );
    assert_eq!(
        move_to(&h, &machine, &p1, "paid", Some(3)).await,
        illegal("refunded", "paid")
    );
    assert_eq!(entity(&h, &p1).await, Some(refunded));

    let p2 = pay("p-2");
    assert_eq!(
        move_to(&h, &machine, &p2, "created", Some(1)).await,
        EntityDecision::VersionMismatch {
            expected: 1,
            current: 0
        }
    );
    assert_eq!(entity(&h, &p2).await, None, "nothing written");
}

/// A payment's callbacks (paid, refunded, a duplicate paid, a late created; each
/// delivered twice) in every distinct order, on callers picked at random among the
/// engine's replicas: redelivering what was refused as not yet possible until a round
/// changes nothing ends every payment refunded at version 3, and no move ran twice.
pub(crate) async fn callbacks_in_every_order_end_in_one_state_and_no_move_runs_twice<E: Engine>() {
    let h = E::open(Config::default()).await;
    let fleet = [h.shared(), h.replica().await, h.replica().await];
    let payment = payment();
    let mut events = vec![
        "paid", "refunded", "paid", "created", "paid", "refunded", "paid", "created",
    ];
    let mut all = Vec::new();
    orders(&mut events, 0, &mut all);
    assert_eq!(all.len(), 420, "8! / (4! 2! 2!) distinct orders");
    let mut pick = 0x9e37_79b9_u64;
    let mut replica = || {
        pick = pick.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        &fleet[usize::try_from(pick >> 33).unwrap() % fleet.len()]
    };
    let now = h.now();
    for (n, order) in all.iter().enumerate() {
        let pay = pay(&format!("p-{n}"));
        // The order placement creates the payment; its callbacks follow in any order.
        let created = replica()
            .transition(&payment, &pay, "created", None, now)
            .await
            .unwrap();
        assert!(matches!(created, EntityDecision::Applied { .. }));
        let mut queue: Vec<&str> = order.clone();
        let mut moved: BTreeMap<&str, u32> = BTreeMap::new();
        loop {
            let mut refused = Vec::new();
            let mut progress = false;
            for &to in &queue {
                match replica()
                    .transition(&payment, &pay, to, None, now)
                    .await
                    .unwrap()
                {
                    EntityDecision::Applied { .. } => {
                        *moved.entry(to).or_default() += 1;
                        progress = true;
                    }
                    EntityDecision::AlreadyThere { .. } => {}
                    EntityDecision::Illegal { .. } => refused.push(to),
                    other => panic!("{order:?}: {other:?}"),
                }
            }
            queue = refused;
            if !progress {
                break;
            }
        }
        let entity = replica().get_entity(&pay).await.unwrap().unwrap();
        assert_eq!(
            (entity.state.as_str(), entity.version),
            ("refunded", 3),
            "order {order:?}"
        );
        assert_eq!(
            moved,
            BTreeMap::from([("paid", 1), ("refunded", 1)]),
            "order {order:?}: a move ran twice"
        );
    }
    let count = |store: &Arc<E::Store>, state: Option<&'static str>, limit: usize| {
        let store = Arc::clone(store);
        async move {
            store
                .list_entities("payment", state, limit)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(count(&fleet[0], Some("refunded"), usize::MAX).await, 420);
    assert_eq!(count(&fleet[1], Some("paid"), 10).await, 0);
    assert_eq!(count(&fleet[2], None, 7).await, 7);
}

/// Entities, moved into their states in an order that is not their ids': payments
/// `shop/p-1` and `shop/p-3` paid, `shop/p-2` created, `shop/p-4` refunded, `mall/p-9`
/// paid, and one order `shop/o-1` paid.
async fn listed<E: Engine>(h: &E) -> BTreeMap<EntityId, Entity> {
    let machine = payment();
    let mut made = BTreeMap::new();
    for (tenant, kind, id, path) in [
        ("shop", "payment", "p-3", &["created", "paid"][..]),
        (
            "shop",
            "payment",
            "p-4",
            &["created", "paid", "refunded"][..],
        ),
        ("mall", "payment", "p-9", &["created", "paid"][..]),
        ("shop", "payment", "p-2", &["created"][..]),
        ("shop", "order", "o-1", &["created", "paid"][..]),
        ("shop", "payment", "p-1", &["created", "paid"][..]),
    ] {
        let entity_id = EntityId::new(tenant, kind, id).unwrap();
        let mut last = None;
        for to in path {
            last = Some(applied(h, &machine, &entity_id, to, None).await);
        }
        made.insert(entity_id, last.unwrap());
    }
    made
}

/// The entities of `made` that `keep` names, in id order ([`EntityId`]'s order: tenant,
/// kind, id).
fn in_id_order(
    made: &BTreeMap<EntityId, Entity>,
    keep: &[(&str, &str, &str)],
) -> Vec<(EntityId, Entity)> {
    let mut out = these(made, keep);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The entities `keep` names, as `made` holds them, in the order given.
fn these(
    made: &BTreeMap<EntityId, Entity>,
    keep: &[(&str, &str, &str)],
) -> Vec<(EntityId, Entity)> {
    keep.iter()
        .map(|&(tenant, kind, id)| {
            let id = EntityId::new(tenant, kind, id).unwrap();
            let entity = made[&id].clone();
            (id, entity)
        })
        .collect()
}

/// A list by state gives the entities of that kind in that state, of every tenant, in
/// id order, at most the limit; `get_entity` reads what the list shows. Tenants here
/// have names of one length (the order of names of different lengths is another test's).
pub(crate) async fn a_list_by_state_gives_its_entities_of_the_kind_in_id_order<E: Engine>() {
    let h = E::open(Config::default()).await;
    let made = listed(&h).await;
    let list = |kind: &'static str, state: Option<&'static str>, limit: usize| {
        let store = h.store();
        async move { store.list_entities(kind, state, limit).await.unwrap() }
    };
    let paid = in_id_order(
        &made,
        &[
            ("shop", "payment", "p-1"),
            ("shop", "payment", "p-3"),
            ("mall", "payment", "p-9"),
        ],
    );
    assert_eq!(list("payment", Some("paid"), 10).await, paid);
    assert_eq!(list("payment", Some("paid"), 2).await, paid[..2]);
    assert_eq!(
        list("payment", Some("created"), 10).await,
        in_id_order(&made, &[("shop", "payment", "p-2")])
    );
    assert_eq!(
        list("order", Some("paid"), 10).await,
        in_id_order(&made, &[("shop", "order", "o-1")])
    );
    assert!(list("payment", Some("lost"), 10).await.is_empty());
    assert!(list("invoice", None, 10).await.is_empty());
    assert!(list("payment", Some("paid"), 0).await.is_empty());
    assert!(list("payment", None, 0).await.is_empty());
    // Without a state: every payment (their order is the next test's).
    let mut every = list("payment", None, 10).await;
    every.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        every,
        in_id_order(
            &made,
            &[
                ("shop", "payment", "p-1"),
                ("shop", "payment", "p-2"),
                ("shop", "payment", "p-3"),
                ("shop", "payment", "p-4"),
                ("mall", "payment", "p-9"),
            ]
        )
    );
    for (id, listed) in every {
        assert_eq!(entity(&h, &id).await, Some(listed), "{id}");
    }
}

/// Without a state, a list gives the entities of the kind grouped by state, then by id,
/// as [`Entities::list_entities`] says: states and tenants in the order of their key
/// bytes (a shorter name first, then byte by byte), whatever the order of the moves; a
/// limit takes the first.
pub(crate) async fn a_list_without_a_state_groups_by_state_then_id<E: Engine>() {
    let h = E::open(Config::default()).await;
    let made = listed(&h).await;
    // paid (4 bytes), then created (7), then refunded (8).
    let every = these(
        &made,
        &[
            ("mall", "payment", "p-9"),
            ("shop", "payment", "p-1"),
            ("shop", "payment", "p-3"),
            ("shop", "payment", "p-2"),
            ("shop", "payment", "p-4"),
        ],
    );
    let names = |list: &[(EntityId, Entity)]| -> Vec<String> {
        list.iter()
            .map(|(id, e)| format!("{id} ({})", e.state))
            .collect()
    };
    let list = h.store().list_entities("payment", None, 10).await.unwrap();
    assert_eq!(names(&list), names(&every), "by state, then id");
    let first = h.store().list_entities("payment", None, 4).await.unwrap();
    assert_eq!(
        names(&first),
        names(&every[..4]),
        "the first by state, then id"
    );
}

/// Ids are ordered by their key bytes: a tenant's length comes first, so `shop` comes
/// before `a-shop`, on every engine (the order the file keeps its keys in).
pub(crate) async fn a_list_orders_tenants_by_their_key_bytes<E: Engine>() {
    let h = E::open(Config::default()).await;
    let machine = payment();
    let mut made = Vec::new();
    for tenant in ["shop", "a-shop"] {
        let id = EntityId::new(tenant, "payment", "p-1").unwrap();
        let created = applied(&h, &machine, &id, "created", None).await;
        made.push((id, created));
    }
    let list = h
        .store()
        .list_entities("payment", Some("created"), 10)
        .await
        .unwrap();
    let tenants: Vec<&str> = list.iter().map(|(id, _)| id.tenant()).collect();
    assert_eq!(tenants, ["shop", "a-shop"], "a shorter tenant first");
    assert_eq!(list, made);
}

/// Restoring from an export keeps entities and claimed values: a repeated callback after
/// the restore is still AlreadyThere, a claimed receipt still held. The same lines
/// imported again are accepted as they are; a different holder, or a version 0, is named.
pub(crate) async fn entities_and_claimed_values_go_through_export_and_import<E: Engine>() {
    let source = E::open(Config::default()).await;
    let payment = payment();
    for key in ["p-1", "p-2"] {
        applied(&source, &payment, &pay(key), "paid", None).await;
    }
    let p1 = pay("p-1");
    applied(&source, &payment, &p1, "refunded", Some(1)).await;
    settle(
        &source,
        &id("k-1"),
        Verdict::Succeeded,
        Outcome::new(200, "ok"),
    )
    .await;
    assert_eq!(
        source
            .store()
            .claim_unique("shop", "receipt", "R-77", "k-1")
            .await
            .unwrap(),
        Uniqueness::Claimed
    );

    let mut exported = Vec::new();
    let sent = source.store().export(&mut exported).await.unwrap();
    assert_eq!((sent.records, sent.entities, sent.unique), (1, 2, 1));
    let text = String::from_utf8(exported.clone()).unwrap();
    let refunded = entity(&source, &p1).await.unwrap();
    assert!(
        text.contains(&format!(
            r#"{{"entity":{{"tenant":"shop","kind":"payment","id":"p-1","state":"refunded","version":2,"updated_at":{}}}}}"#,
            refunded.updated_at.0
        )),
        "{text}"
    );
    assert!(
        text.contains(
            r#"{"unique":{"tenant":"shop","scope":"receipt","value":"R-77","holder":"k-1"}}"#
        ),
        "{text}"
    );

    let target = E::open(Config::default()).await;
    let store = target.store();
    assert_eq!(store.import(&mut exported.as_slice()).await.unwrap(), sent);
    assert_eq!(
        store.list_entities("payment", None, 10).await.unwrap(),
        source
            .store()
            .list_entities("payment", None, 10)
            .await
            .unwrap()
    );
    assert_eq!(
        move_to(&target, &payment, &p1, "refunded", None).await,
        EntityDecision::AlreadyThere { entity: refunded }
    );
    assert_eq!(
        store
            .unique_holder("shop", "receipt", "R-77")
            .await
            .unwrap()
            .as_deref(),
        Some("k-1")
    );
    target.check_integrity();
    // Again: the same lines are accepted as they are; a different one is named.
    assert_eq!(store.import(&mut exported.as_slice()).await.unwrap(), sent);
    let changed = text.replace(r#""holder":"k-1""#, r#""holder":"k-9""#);
    let err = store.import(&mut changed.as_bytes()).await.unwrap_err();
    let expected = format!(
        "unique shop/receipt/R-77: {} already holds it for another holder",
        E::HOLDS
    );
    assert!(err.to_string().ends_with(&expected), "{err}");
    let bad = text.replace(r#""version":2"#, r#""version":0"#);
    let err = store.import(&mut bad.as_bytes()).await.unwrap_err();
    assert!(err.to_string().contains("version: 0"), "{err}");
}
