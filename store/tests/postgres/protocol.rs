//! The protocol's answers through the engine, and the fleet's one clock.

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, LeaseExpiry, Outcome, Refusal, State, Timestamp, Verdict};
use idem_store::postgres::PgStore;
use idem_store::{Error, ListFilter, Receiver};

use super::{Server, client, fp, id, store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_claimed_settled_replayed_and_refused_as_the_protocol_says() {
    let server = Server::start();
    let store = store(&server, Config::default(), 4).await;
    let k = id("order-1");
    let now = Timestamp(0); // not used: the database's clock is the fleet's

    let Decision::Claimed { generation, .. } = store.begin(&k, fp("a"), now).await.unwrap() else {
        panic!("a fresh key is claimed")
    };
    assert!(matches!(
        store.begin(&k, fp("a"), now).await.unwrap(),
        Decision::InProgress { generation: g, .. } if g == generation
    ));
    assert!(matches!(
        store.begin(&k, fp("b"), now).await.unwrap(),
        Decision::Conflict {
            state: State::Pending,
            ..
        }
    ));
    let renewed = store.heartbeat(&k, generation, now).await.unwrap();
    assert_eq!(renewed.state(), State::Pending);
    let settled = store
        .complete(
            &k,
            generation,
            Verdict::Succeeded,
            Outcome::new(201, b"receipt \x00\xff".to_vec()),
            now,
        )
        .await
        .unwrap();
    assert_eq!(settled.state(), State::Succeeded);
    let Decision::Replay {
        verdict,
        outcome,
        completed_at,
    } = store.begin(&k, fp("a"), now).await.unwrap()
    else {
        panic!("a settled key is replayed")
    };
    assert_eq!((verdict, outcome.code), (Verdict::Succeeded, 201));
    assert_eq!(outcome.body, b"receipt \x00\xff".to_vec(), "byte for byte");
    assert_eq!(
        Some(completed_at),
        match settled.status {
            idem_core::Status::Settled { completed_at, .. } => Some(completed_at),
            _ => None,
        }
    );
    // A late executor is fenced: its generation no longer holds the key.
    assert!(matches!(
        store
            .complete(
                &k,
                generation,
                Verdict::Failed,
                Outcome::new(500, "late"),
                now
            )
            .await,
        Err(Error::Refused(Refusal::Stale {
            state: State::Succeeded,
            ..
        }))
    ));
    assert!(matches!(
        store.release(&k, generation, now).await,
        Err(Error::Refused(Refusal::Stale { .. }))
    ));
    assert!(matches!(
        store.heartbeat(&id("nobody"), Generation(1), now).await,
        Err(Error::Refused(Refusal::NotFound))
    ));
    assert_eq!(store.get(&k).await.unwrap(), Some(settled));

    // Released: nothing ran, a retry claims a newer generation.
    let k2 = id("order-2");
    let Decision::Claimed { generation: g2, .. } = store.begin(&k2, fp("x"), now).await.unwrap()
    else {
        panic!()
    };
    assert!(g2 > generation);
    store.release(&k2, g2, now).await.unwrap();
    assert_eq!(store.get(&k2).await.unwrap(), None);
    let Decision::Claimed { generation: g3, .. } = store.begin(&k2, fp("x"), now).await.unwrap()
    else {
        panic!()
    };
    assert!(g3 > g2);

    // Unknown until resolved; resolved as not executed, the key is claimable again.
    store.mark_unknown(&k2, g3, now).await.unwrap();
    assert!(matches!(
        store.begin(&k2, fp("x"), now).await.unwrap(),
        Decision::NeedsReconciliation { generation: g } if g == g3
    ));
    assert!(matches!(
        store
            .complete(&k2, g3, Verdict::Succeeded, Outcome::new(200, ""), now)
            .await,
        Err(Error::Refused(Refusal::Stale {
            state: State::Unknown,
            ..
        }))
    ));
    assert_eq!(
        store
            .resolve(&k2, Resolution::NotExecuted, now)
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        store.resolve(&k2, Resolution::NotExecuted, now).await,
        Err(Error::Refused(Refusal::NotFound))
    ));
    let Decision::Claimed { generation: g4, .. } = store.begin(&k2, fp("x"), now).await.unwrap()
    else {
        panic!()
    };
    store.mark_unknown(&k2, g4, now).await.unwrap();
    let resolved = store
        .resolve(&k2, Resolution::Failed(Outcome::new(402, "declined")), now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resolved.state(), State::Failed);
    assert!(matches!(
        store.begin(&k2, fp("x"), now).await.unwrap(),
        Decision::Replay {
            verdict: Verdict::Failed,
            ..
        }
    ));
    // An outcome over the limit is refused before anything is sent.
    let k3 = id("order-3");
    let Decision::Claimed { generation: g5, .. } = store.begin(&k3, fp("y"), now).await.unwrap()
    else {
        panic!()
    };
    let big = Outcome::new(200, vec![0; Config::default().max_outcome_bytes + 1]);
    assert!(matches!(
        store.complete(&k3, g5, Verdict::Succeeded, big, now).await,
        Err(Error::Refused(Refusal::OutcomeTooLarge(_)))
    ));

    let all = store.list(&ListFilter::default()).await.unwrap();
    let keys: Vec<_> = all
        .iter()
        .map(|(id, r)| (id.key().to_owned(), r.state()))
        .collect();
    assert_eq!(
        keys,
        [
            ("order-1".to_owned(), State::Succeeded),
            ("order-2".to_owned(), State::Failed),
            ("order-3".to_owned(), State::Pending)
        ]
    );
    let failed = ListFilter {
        state: Some(State::Failed),
        ..ListFilter::default()
    };
    assert_eq!(store.list(&failed).await.unwrap().len(), 1);
    let stats = store.stats(now).await.unwrap();
    assert_eq!(
        (stats.pending, stats.succeeded, stats.failed, stats.unknown),
        (1, 1, 1, 0)
    );
    assert_eq!(store.unknown_keys().await.unwrap(), 0);
    assert_eq!(stats.generation, g5);
}

/// Leases and retention are counted on the database's clock: a replica whose own clock
/// is a year off (either way) writes the same times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_is_the_fleets_clock() {
    let server = Server::start();
    let config = Config {
        lease_ms: 60_000,
        ..Config::default()
    };
    let store = store(&server, config, 2).await;
    let db = client(&server).await;
    let db_now = |row: tokio_postgres::Row| row.get::<_, i64>(0) as u64;
    let before = db_now(db.query_one("SELECT idem_now()", &[]).await.unwrap());
    let year = 365 * 24 * 3_600_000;
    let skewed = [Timestamp(before - year), Timestamp(before + year)];
    for (n, now) in skewed.into_iter().enumerate() {
        let k = id(&format!("skew-{n}"));
        let Decision::Claimed { lease_until, .. } = store.begin(&k, fp("a"), now).await.unwrap()
        else {
            panic!()
        };
        let after = db_now(db.query_one("SELECT idem_now()", &[]).await.unwrap());
        assert!(
            (before + 60_000..=after + 60_000).contains(&lease_until.0),
            "lease_until {lease_until} is not the database's time plus the lease ({before}..{after})"
        );
    }
}

/// An expired lease turns Unknown under the default policy, or is taken over by a new
/// generation under Takeover; the old holder is fenced either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_turns_unknown_or_is_taken_over() {
    let server = Server::start();
    let db = client(&server).await;
    for policy in [LeaseExpiry::Unknown, LeaseExpiry::Takeover] {
        let config = Config {
            on_lease_expiry: policy,
            ..Config::default()
        };
        let store = store(&server, config, 2).await;
        let k = id(&format!("lease-{policy:?}"));
        let Decision::Claimed { generation, .. } =
            store.begin(&k, fp("a"), Timestamp(0)).await.unwrap()
        else {
            panic!()
        };
        db.execute(
            "UPDATE idem_records SET lease_until = idem_now() - 1 WHERE key = $1",
            &[&k.key()],
        )
        .await
        .unwrap();
        let decision = store.begin(&k, fp("a"), Timestamp(0)).await.unwrap();
        match policy {
            LeaseExpiry::Unknown => {
                assert_eq!(decision, Decision::NeedsReconciliation { generation })
            }
            LeaseExpiry::Takeover => assert!(
                matches!(decision, Decision::Claimed { generation: g, .. } if g > generation)
            ),
        }
        assert!(matches!(
            store
                .complete(
                    &k,
                    generation,
                    Verdict::Succeeded,
                    Outcome::new(200, ""),
                    Timestamp(0)
                )
                .await,
            Err(Error::Refused(Refusal::Stale { .. }))
        ));
    }
}

/// Sweep leaves a tombstone (a retry is answered Forgotten), then deletes it; a key
/// claimed again after that gets a generation above every earlier one, because the
/// sequence never goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_tombstones_then_deletes_and_generations_keep_rising() {
    let server = Server::start();
    let db = client(&server).await;
    // The test moves retention ends behind the engine's back, which nothing else does: a
    // replay cache would rightly go on trusting the ends it saw.
    let store = PgStore::builder()
        .replay_cache(0)
        .pool_size(2)
        .connect(&server.url())
        .await
        .unwrap();
    let mut first = Vec::new();
    for n in 0..7 {
        let k = id(&format!("sweep-{n}"));
        let Decision::Claimed { generation, .. } =
            store.begin(&k, fp("a"), Timestamp(0)).await.unwrap()
        else {
            panic!()
        };
        store
            .complete(
                &k,
                generation,
                Verdict::Succeeded,
                Outcome::new(200, "ok"),
                Timestamp(0),
            )
            .await
            .unwrap();
        first.push((k, generation));
    }
    // Retention ran out for all seven.
    db.execute("UPDATE idem_records SET expires_at = idem_now() - 10", &[])
        .await
        .unwrap();
    let dry = store.sweep(Timestamp(0), 100, true).await.unwrap();
    assert_eq!((dry.tombstoned, dry.removed), (7, 0));
    let report = store.sweep(Timestamp(0), 5, false).await.unwrap();
    assert_eq!((report.tombstoned, report.remaining_expired), (5, true));
    let report = store.sweep(Timestamp(0), 100, false).await.unwrap();
    assert_eq!((report.tombstoned, report.remaining_expired), (2, false));
    let (k0, g0) = &first[0];
    assert!(matches!(
        store.begin(k0, fp("a"), Timestamp(0)).await.unwrap(),
        Decision::Forgotten { generation, verdict: Verdict::Succeeded, .. } if generation == *g0
    ));
    assert_eq!(store.stats(Timestamp(0)).await.unwrap().forgotten, 7);
    // The tombstones' time runs out too: deleted, and the keys are new again.
    db.execute("UPDATE idem_records SET expires_at = idem_now() - 10", &[])
        .await
        .unwrap();
    let report = store.sweep(Timestamp(0), 100, false).await.unwrap();
    assert_eq!((report.removed, report.tombstoned), (7, 0));
    assert_eq!(store.stats(Timestamp(0)).await.unwrap().records(), 0);
    let highest = first.iter().map(|(_, g)| *g).max().unwrap();
    let Decision::Claimed { generation, .. } =
        store.begin(k0, fp("a"), Timestamp(0)).await.unwrap()
    else {
        panic!("a key whose tombstone was swept is claimed again")
    };
    assert!(generation > highest, "{generation} after {highest}");
    assert!(matches!(
        store
            .complete(
                k0,
                *g0,
                Verdict::Succeeded,
                Outcome::new(200, "late"),
                Timestamp(0)
            )
            .await,
        Err(Error::Refused(Refusal::Stale { .. }))
    ));
}

/// The reconciler settles what its checker can tell, oldest first, and leaves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_settles_what_the_checker_tells() {
    use idem_store::maintain::Check;
    let server = Server::start();
    let store = store(&server, Config::default(), 2).await;
    for n in 0..4 {
        let k = id(&format!("rec-{n}"));
        let Decision::Claimed { generation, .. } =
            store.begin(&k, fp("a"), Timestamp(0)).await.unwrap()
        else {
            panic!()
        };
        store
            .mark_unknown(&k, generation, Timestamp(0))
            .await
            .unwrap();
    }
    let report = store
        .reconcile(Timestamp(0), 3, |id, _| {
            Ok::<_, std::convert::Infallible>(match id.key() {
                "rec-0" => Check::Succeeded(Outcome::new(200, "found")),
                "rec-1" => Check::NotExecuted,
                _ => Check::CannotTell,
            })
        })
        .await
        .unwrap();
    assert_eq!(
        (
            report.examined,
            report.succeeded,
            report.not_executed,
            report.undecided,
            report.remaining
        ),
        (3, 1, 1, 1, true)
    );
    assert_eq!(
        store.get(&id("rec-0")).await.unwrap().unwrap().state(),
        State::Succeeded
    );
    assert_eq!(store.get(&id("rec-1")).await.unwrap(), None);
    assert_eq!(store.stats(Timestamp(0)).await.unwrap().unknown, 2);
    assert_eq!(store.unknown_keys().await.unwrap(), 2, "counted alone too");
}

/// A statement held past the statement timeout (here: a claim waiting on another
/// session's uncommitted insert of the same key) is cancelled by the server: the begin
/// fails naming the timeout, writes nothing, and the next one claims once the way is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_past_its_timeout_fails_and_writes_nothing() {
    let server = Server::start();
    let store = PgStore::builder()
        .statement_timeout(std::time::Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let mut other = client(&server).await;
    let holding = other.transaction().await.unwrap();
    holding
        .execute(
            "INSERT INTO idem_records (tenant, operation, key, fingerprint, generation, state, \
               created_at, updated_at, lease_until) \
             VALUES ('shop', 'charge', 'held', $1, nextval('idem_generation'), 0, 0, 0, 0)",
            &[&fp("a").0.as_slice()],
        )
        .await
        .unwrap();
    let failed = store
        .begin(&id("held"), fp("a"), Timestamp(0))
        .await
        .unwrap_err();
    let mut chain = failed.to_string();
    let mut cause = std::error::Error::source(&failed);
    while let Some(e) = cause {
        chain.push_str(": ");
        chain.push_str(&e.to_string());
        cause = e.source();
    }
    assert!(chain.contains("statement timeout"), "{chain}");
    holding.rollback().await.unwrap();
    assert_eq!(
        store.get(&id("held")).await.unwrap(),
        None,
        "nothing written"
    );
    assert!(matches!(
        store
            .begin(&id("held"), fp("a"), Timestamp(0))
            .await
            .unwrap(),
        Decision::Claimed { .. }
    ));
}

/// A begin whose future is dropped before its answer is taken (an HTTP client that hung
/// up) gives its claim back: no key stays claimed by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_dropped_before_its_answer_gives_its_claim_back() {
    let server = Server::start();
    let store = store(&server, Config::default(), 4).await;
    let (mut dropped, mut received) = (0, 0);
    for n in 0..100u64 {
        let key = id(&format!("dropped-{n}"));
        // Dropped after a few hundred microseconds at most: before the claim was sent,
        // while it ran, or after it committed.
        let waited = tokio::time::timeout(
            std::time::Duration::from_micros((n * 37) % 1_500),
            store.begin(&key, fp("a"), Timestamp(0)),
        )
        .await;
        match waited {
            Ok(Ok(Decision::Claimed { generation, .. })) => {
                received += 1;
                store.release(&key, generation, Timestamp(0)).await.unwrap();
            }
            Ok(other) => panic!("{key}: {other:?}"),
            Err(_) => dropped += 1,
        }
    }
    println!("{dropped} begins dropped, {received} answered");
    assert!(dropped > 0, "no begin was dropped: the run shows nothing");
    // The claims nobody received are released in the background; the store is idle
    // once they are.
    tokio::time::timeout(std::time::Duration::from_secs(10), store.idle())
        .await
        .expect("the background work ends");
    let left = store.list(&ListFilter::default()).await.unwrap();
    assert!(
        left.is_empty(),
        "claims nobody received are still there: {:?}",
        left.iter()
            .map(|(id, r)| (id.key().to_owned(), r.state()))
            .collect::<Vec<_>>()
    );
}
