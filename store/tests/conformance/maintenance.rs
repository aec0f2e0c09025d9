//! The operator's maintenance through the seam: sweep (limits, dry runs, what it never
//! touches, in what order), stats, and list (order and filters).

use idem_core::protocol::Decision;
use idem_core::{Config, Generation, Outcome, Record, RecordId, State, Status, Timestamp, Verdict};
use idem_store::{Error, ListFilter, Receiver};

use crate::{
    DAY, Engine, HOUR, MINUTE, assert_within, claim, claimed, fp, id, settle, state_of, unknown,
    without_ages,
};

/// Retention of an hour, tombstones for `tombstones` ms.
fn config(tombstones: u64) -> Config {
    Config {
        success_retention_ms: HOUR,
        failure_retention_ms: HOUR,
        tombstone_retention_ms: tombstones,
        ..Config::default()
    }
}

/// Settles every key of `keys` as succeeded, all at once (as concurrent callers would),
/// at the harness's time; the settled records, in the order of `keys`.
pub(crate) async fn settle_all<E: Engine>(h: &E, keys: &[RecordId]) -> Vec<Record> {
    let now = h.now();
    let tasks: Vec<_> = keys
        .iter()
        .map(|key| {
            let (store, key) = (h.shared(), key.clone());
            tokio::spawn(async move {
                let decision = store.begin(&key, fp(key.key()), now).await.unwrap();
                let generation = claimed(decision);
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(201, "credited"),
                        now,
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut settled = Vec::new();
    for task in tasks {
        settled.push(task.await.unwrap());
    }
    settled
}

/// The ids of `records`, as `tenant/operation/key`.
fn names(records: &[(RecordId, Record)]) -> Vec<String> {
    records.iter().map(|(id, _)| id.to_string()).collect()
}

/// Sweep replaces settled records past retention by tombstones, then deletes the
/// tombstones past their time, at most `limit` a call, in batches of its own; a dry
/// run counts the same without writing.
pub(crate) async fn sweep_tombstones_then_removes_in_bounded_batches<E: Engine>() {
    // More than one batch of either engine (256 records on the file, 500 on PostgreSQL).
    const N: u64 = 600;
    let mut h = E::open(config(DAY)).await;
    let keys: Vec<RecordId> = (0..N).map(|n| id(&format!("sale-{n}"))).collect();
    let settled = settle_all(&h, &keys).await;
    h.pass(2 * HOUR).await;
    let dry = h.store().sweep(h.now(), usize::MAX, true).await.unwrap();
    assert_eq!((dry.tombstoned, dry.removed), (N, 0));
    let first = h.store().sweep(h.now(), 100, false).await.unwrap();
    assert_eq!((first.tombstoned, first.remaining_expired), (100, true));
    let rest = h.store().sweep(h.now(), usize::MAX, false).await.unwrap();
    assert_eq!(
        (rest.tombstoned, rest.removed, rest.remaining_expired),
        (N - 100, 0, false)
    );
    h.check_integrity();
    let Status::Settled { completed_at, .. } = settled[0].status else {
        panic!()
    };
    assert_eq!(
        h.store()
            .begin(&keys[0], fp("sale-0"), h.now())
            .await
            .unwrap(),
        Decision::Forgotten {
            generation: settled[0].generation,
            verdict: Verdict::Succeeded,
            completed_at
        }
    );
    assert_eq!(h.store().stats(h.now()).await.unwrap().forgotten, N);

    h.pass(DAY).await;
    let dry = h.store().sweep(h.now(), usize::MAX, true).await.unwrap();
    assert_eq!((dry.tombstoned, dry.removed), (0, N));
    let commits = h.store().commit_counts();
    let gone = h.store().sweep(h.now(), usize::MAX, false).await.unwrap();
    assert_eq!(
        (gone.tombstoned, gone.removed, gone.remaining_expired),
        (0, N, false)
    );
    if let (Some(before), Some(after)) = (commits, h.store().commit_counts()) {
        assert!(
            after.commits - before.commits >= 2,
            "{N} records swept in bounded batches, more than one transaction"
        );
    }
    assert_eq!(h.store().stats(h.now()).await.unwrap().records(), 0);
    h.check_integrity();
    // Free again: a new request under an old key is claimed.
    claimed(
        h.store()
            .begin(&keys[0], fp("sale-0"), h.now())
            .await
            .unwrap(),
    );
}

/// A dry run reports what a sweep would do, up to its limit, and changes nothing.
pub(crate) async fn a_dry_run_sweep_changes_nothing<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    let keys: Vec<RecordId> = (0..3).map(|n| id(&format!("sale-{n}"))).collect();
    settle_all(&h, &keys).await;
    claim(&h, &id("pending")).await;
    unknown(&h, &id("unknown")).await;
    h.pass(2 * HOUR).await;
    let records = h.store().list(&ListFilter::default()).await.unwrap();
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!(stats.expired, 3);
    let dry = h.store().sweep(h.now(), 100, true).await.unwrap();
    assert_eq!(
        (dry.tombstoned, dry.removed, dry.remaining_expired),
        (3, 0, false)
    );
    let dry = h.store().sweep(h.now(), 2, true).await.unwrap();
    assert_eq!(
        (dry.tombstoned, dry.removed, dry.remaining_expired),
        (2, 0, true)
    );
    assert_eq!(
        h.store().list(&ListFilter::default()).await.unwrap(),
        records
    );
    assert_eq!(
        without_ages(h.store().stats(h.now()).await.unwrap()),
        without_ages(stats)
    );
    let report = h.store().sweep(h.now(), 100, false).await.unwrap();
    assert_eq!((report.tombstoned, report.removed), (3, 0));
}

/// A sweep that comes only after both the retention and the tombstone's time deletes
/// the record at once.
pub(crate) async fn a_late_sweep_past_both_times_deletes_at_once<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    settle(
        &h,
        &id("sale-1"),
        Verdict::Succeeded,
        Outcome::new(201, "x"),
    )
    .await;
    h.pass(2 * DAY).await;
    let report = h.store().sweep(h.now(), 10, false).await.unwrap();
    assert_eq!((report.tombstoned, report.removed), (0, 1));
    assert_eq!(h.store().stats(h.now()).await.unwrap().records(), 0);
}

/// Sweep takes the records whose retention ended first, whatever their keys; a limit
/// of 0 takes none.
pub(crate) async fn sweep_takes_the_soonest_expiry_first<E: Engine>() {
    let mut h = E::open(config(0)).await;
    // Settled in this order, a minute apart: their retention ends in this order.
    let order = ["k3", "k0", "k4", "k1", "k2"];
    for key in order {
        settle(&h, &id(key), Verdict::Succeeded, Outcome::new(200, key)).await;
        h.pass(MINUTE).await;
    }
    h.pass(2 * HOUR).await;
    assert_eq!(h.store().stats(h.now()).await.unwrap().expired, 5);
    let none = h.store().sweep(h.now(), 0, false).await.unwrap();
    assert_eq!((none.removed, none.tombstoned), (0, 0));
    let first = h.store().sweep(h.now(), 2, false).await.unwrap();
    assert_eq!((first.removed, first.remaining_expired), (2, true));
    for (n, key) in order.iter().enumerate() {
        assert_eq!(
            state_of(&h, &id(key)).await,
            (n >= 2).then_some(State::Succeeded),
            "{key}: the two soonest to expire are gone"
        );
    }
    let rest = h.store().sweep(h.now(), 100, false).await.unwrap();
    assert_eq!((rest.removed, rest.remaining_expired), (3, false));
}

/// Time alone never removes a Pending or Unknown record: a sweep long after takes only
/// what settled.
pub(crate) async fn pending_and_unknown_records_are_never_swept<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    let pending = id("pending");
    let unknown_key = id("unknown");
    claim(&h, &pending).await;
    unknown(&h, &unknown_key).await;
    settle(&h, &id("settled"), Verdict::Failed, Outcome::new(500, "x")).await;
    h.pass(400 * DAY).await;
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!(
        (stats.pending_lease_expired, stats.expired),
        (1, 1),
        "{stats:?}"
    );
    let report = h.store().sweep(h.now(), usize::MAX, false).await.unwrap();
    assert_eq!((report.tombstoned, report.removed), (0, 1));
    assert_eq!(state_of(&h, &pending).await, Some(State::Pending));
    assert_eq!(state_of(&h, &unknown_key).await, Some(State::Unknown));
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!((stats.records(), stats.pending, stats.unknown), (2, 1, 1));
}

/// Stats count records by state and age the oldest Pending (since its claim) and the
/// oldest Unknown (since it became Unknown), with the generation counter and the
/// clock floor.
pub(crate) async fn stats_count_every_state_and_age_the_oldest_pending_and_unknown<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let empty = h.store().stats(h.now()).await.unwrap();
    assert_eq!(empty.records(), 0);
    assert_eq!(
        (empty.oldest_pending_age_ms, empty.oldest_unknown_age_ms),
        (None, None)
    );
    assert_eq!(empty.generation, Generation(0));
    assert_eq!(h.store().unknown_keys().await.unwrap(), 0);

    let s1 = id("s1");
    let g = claim(&h, &s1).await;
    h.pass(10).await;
    h.store()
        .complete(&s1, g, Verdict::Failed, Outcome::new(500, "x"), h.now())
        .await
        .unwrap();
    h.pass(490).await;
    let u1 = id("u1");
    let g = claim(&h, &u1).await;
    h.pass(100).await;
    let marked = h.store().mark_unknown(&u1, g, h.now()).await.unwrap();
    h.pass(400).await;
    let p1 = id("p1");
    claim(&h, &p1).await; // its lease ends 30 s after
    let p1 = h.store().get(&p1).await.unwrap().unwrap();
    h.pass(39_000).await;
    claim(&h, &id("p2")).await;
    let s2 = settle(&h, &id("s2"), Verdict::Succeeded, Outcome::new(200, "ok")).await;
    h.pass(10_000).await;

    let before = h.clock().await;
    let stats = h.store().stats(h.now()).await.unwrap();
    let after = h.clock().await;
    assert_eq!(
        (
            stats.pending,
            stats.succeeded,
            stats.failed,
            stats.unknown,
            stats.forgotten
        ),
        (2, 1, 1, 1, 0)
    );
    assert_eq!(stats.records(), 5);
    assert_eq!(stats.count(State::Pending), 2);
    assert_eq!(stats.pending_lease_expired, 1);
    assert_eq!(stats.expired, 0);
    let age = |since: Timestamp| (Timestamp(before.0 - since.0), Timestamp(after.0 - since.0));
    let (from, to) = age(p1.created_at);
    assert_within(
        Timestamp(stats.oldest_pending_age_ms.unwrap()),
        from,
        to,
        "the oldest pending: since its claim",
    );
    let (from, to) = age(marked.updated_at);
    assert_within(
        Timestamp(stats.oldest_unknown_age_ms.unwrap()),
        from,
        to,
        "the oldest unknown: since it became unknown, not since its claim",
    );
    assert_eq!(stats.generation, Generation(5));
    assert_eq!(stats.generation, s2.generation);
    assert_eq!(stats.clock_floor, s2.updated_at);
    assert!(stats.file_bytes > 0);
    assert_eq!(h.store().unknown_keys().await.unwrap(), 1);
}

/// Records of two tenants and two operations: k0 succeeded, k1 unknown, k2 failed,
/// made in the reverse of key order.
async fn twelve_records<E: Engine>(h: &mut E) {
    for tenant in ["b", "a"] {
        for operation in ["y", "x"] {
            for n in (0..3).rev() {
                let key = RecordId::new(tenant, operation, &format!("k{n}")).unwrap();
                let generation = claimed(
                    h.store()
                        .begin(&key, fp(&key.to_string()), h.now())
                        .await
                        .unwrap(),
                );
                let store = h.store();
                match n {
                    0 => drop(
                        store
                            .complete(
                                &key,
                                generation,
                                Verdict::Succeeded,
                                Outcome::new(200, "ok"),
                                h.now(),
                            )
                            .await
                            .unwrap(),
                    ),
                    1 => drop(store.mark_unknown(&key, generation, h.now()).await.unwrap()),
                    _ => drop(
                        store
                            .complete(
                                &key,
                                generation,
                                Verdict::Failed,
                                Outcome::new(500, "no"),
                                h.now(),
                            )
                            .await
                            .unwrap(),
                    ),
                }
                h.pass(10).await;
            }
        }
    }
}

/// Without a state, records come in key order (tenant, operation, key); every field of
/// the filter narrows.
pub(crate) async fn list_gives_key_order_and_filters_by_tenant_operation_and_limit<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    twelve_records(&mut h).await;
    let list = |filter: ListFilter| {
        let store = h.store();
        async move { names(&store.list(&filter).await.unwrap()) }
    };
    let mut all = Vec::new();
    for tenant in ["a", "b"] {
        for operation in ["x", "y"] {
            for n in 0..3 {
                all.push(format!("{tenant}/{operation}/k{n}"));
            }
        }
    }
    assert_eq!(list(ListFilter::default()).await, all);
    assert_eq!(
        list(ListFilter {
            tenant: Some("a".into()),
            operation: Some("y".into()),
            ..ListFilter::default()
        })
        .await,
        ["a/y/k0", "a/y/k1", "a/y/k2"]
    );
    assert_eq!(
        list(ListFilter {
            operation: Some("x".into()),
            limit: Some(4),
            ..ListFilter::default()
        })
        .await,
        ["a/x/k0", "a/x/k1", "a/x/k2", "b/x/k0"]
    );
    assert!(
        list(ListFilter {
            tenant: Some("c".into()),
            ..ListFilter::default()
        })
        .await
        .is_empty()
    );
    assert!(
        list(ListFilter {
            limit: Some(0),
            ..ListFilter::default()
        })
        .await
        .is_empty()
    );
    assert!(
        list(ListFilter {
            state: Some(State::Pending),
            ..ListFilter::default()
        })
        .await
        .is_empty()
    );
    // By state (the order of a state is the next test's): the members only.
    let mut unknown = list(ListFilter {
        state: Some(State::Unknown),
        ..ListFilter::default()
    })
    .await;
    unknown.sort();
    assert_eq!(unknown, ["a/x/k1", "a/y/k1", "b/x/k1", "b/y/k1"]);
    let mut failed = list(ListFilter {
        state: Some(State::Failed),
        operation: Some("y".into()),
        ..ListFilter::default()
    })
    .await;
    failed.sort();
    assert_eq!(failed, ["a/y/k2", "b/y/k2"]);
    let succeeded = list(ListFilter {
        state: Some(State::Succeeded),
        tenant: Some("b".into()),
        limit: Some(1),
        ..ListFilter::default()
    })
    .await;
    assert_eq!(succeeded.len(), 1);
    assert!(succeeded[0].starts_with("b/") && succeeded[0].ends_with("/k0"));
    for (id, record) in h.store().list(&ListFilter::default()).await.unwrap() {
        assert_eq!(Some(&record), h.store().get(&id).await.unwrap().as_ref());
    }
}

/// With a state, records come in the order the seam documents (`Receiver::list`, as
/// `Store::list`): Pending and Unknown records oldest claim first, settled records and
/// tombstones soonest expiry first; not in key order.
pub(crate) async fn list_by_state_gives_the_oldest_first<E: Engine>() {
    let mut h = E::open(config(DAY)).await;
    // Each group made in an order that is not its keys' order, a minute apart.
    for key in ["p3", "p1", "p2"] {
        claim(&h, &id(key)).await;
        h.pass(MINUTE).await;
    }
    for key in ["u3", "u1", "u2"] {
        unknown(&h, &id(key)).await;
        h.pass(MINUTE).await;
    }
    for key in ["s3", "s1", "s2"] {
        settle(&h, &id(key), Verdict::Succeeded, Outcome::new(200, key)).await;
        h.pass(MINUTE).await;
    }
    let keys = |records: Vec<(RecordId, Record)>| -> Vec<String> {
        records
            .into_iter()
            .map(|(id, _)| id.key().to_owned())
            .collect()
    };
    let by_state = |state: State, limit: Option<usize>| ListFilter {
        state: Some(state),
        limit,
        ..ListFilter::default()
    };
    let store = h.store();
    assert_eq!(
        keys(store.list(&by_state(State::Pending, None)).await.unwrap()),
        ["p3", "p1", "p2"],
        "Pending: oldest claim first"
    );
    assert_eq!(
        keys(
            store
                .list(&by_state(State::Pending, Some(2)))
                .await
                .unwrap()
        ),
        ["p3", "p1"]
    );
    assert_eq!(
        keys(store.list(&by_state(State::Unknown, None)).await.unwrap()),
        ["u3", "u1", "u2"],
        "Unknown: oldest claim first"
    );
    assert_eq!(
        keys(store.list(&by_state(State::Succeeded, None)).await.unwrap()),
        ["s3", "s1", "s2"],
        "Succeeded: soonest expiry first"
    );
    h.pass(HOUR).await;
    assert_eq!(
        h.store()
            .sweep(h.now(), 10, false)
            .await
            .unwrap()
            .tombstoned,
        3
    );
    assert_eq!(
        keys(
            h.store()
                .list(&by_state(State::Forgotten, None))
                .await
                .unwrap()
        ),
        ["s3", "s1", "s2"],
        "Forgotten: soonest expiry first"
    );
}

/// A filter naming a tenant no record could have is refused with the id rule.
pub(crate) async fn a_list_filter_that_breaks_the_id_rules_is_refused<E: Engine>() {
    let h = E::open(Config::default()).await;
    let refused = h
        .store()
        .list(&ListFilter {
            tenant: Some(String::new()),
            ..ListFilter::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::Id(_)), "{refused:?}");
    assert_eq!(refused.to_string(), "tenant: empty, needs 1 to 255 bytes");
}

/// Ids are ordered by their key bytes: a tenant's length comes first (so `shop` before
/// `a-shop`), then an operation's (so `pay` before `charge`), then the key byte by byte;
/// the same on every engine, with a state or without.
pub(crate) async fn a_list_orders_ids_by_their_key_bytes<E: Engine>() {
    let h = E::open(Config::default()).await;
    let ids = [
        ("a-shop", "pay", "k"),
        ("shop", "charge", "k"),
        ("shop", "pay", "kb"),
        ("shop", "pay", "ka"),
    ];
    for (tenant, operation, key) in ids {
        let id = RecordId::new(tenant, operation, key).unwrap();
        claim(&h, &id).await;
    }
    let expected = [
        "shop/pay/ka",
        "shop/pay/kb",
        "shop/charge/k",
        "a-shop/pay/k",
    ];
    let all = h.store().list(&ListFilter::default()).await.unwrap();
    assert_eq!(names(&all), expected, "without a state");
    let first = h
        .store()
        .list(&ListFilter {
            limit: Some(3),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(names(&first), expected[..3], "a limit takes the first");
}
