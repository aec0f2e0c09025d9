//! Moving a box's records into the shared database and back: `export` from the file,
//! `import` into PostgreSQL, and the reverse, byte for byte.

use idem_core::protocol::Decision;
use idem_core::{Config, Outcome, Timestamp, Verdict};
use idem_store::{Receiver, Store};

use super::{Server, client, fp, id, store};

const DAY: u64 = 24 * 3_600_000;

/// A day and an hour ago on this machine's clock, which the test server shares: the
/// record settled then is past its retention on the database too, the later ones not.
fn t0() -> u64 {
    idem_store::now().0 - DAY - 3_600_000
}

/// A file with every kind of record: settled both ways, pending, unknown, a tombstone.
fn file_with_records(dir: &std::path::Path) -> Store {
    let store = Store::open(dir.join("box.redb")).unwrap();
    let (day, t0) = (DAY, t0());
    let at = |ms: u64| Timestamp(t0 + ms);
    let Decision::Claimed { generation, .. } = store.begin(&id("old"), fp("p"), at(0)).unwrap()
    else {
        panic!()
    };
    store
        .complete(
            &id("old"),
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "x"),
            at(0),
        )
        .unwrap();
    // Past its retention: the sweep leaves its tombstone.
    assert_eq!(store.sweep(at(day + 1), 10, false).unwrap().tombstoned, 1);
    for (n, verdict) in [(0, Verdict::Succeeded), (1, Verdict::Failed)] {
        let k = id(&format!("settled-{n}"));
        let now = at(day + 2 + n);
        let Decision::Claimed { generation, .. } = store.begin(&k, fp("p"), now).unwrap() else {
            panic!()
        };
        let outcome = Outcome::new(200 + n as i32, vec![n as u8, 0xff]);
        store
            .complete(&k, generation, verdict, outcome, now)
            .unwrap();
    }
    store.begin(&id("pending"), fp("p"), at(day + 10)).unwrap();
    let Decision::Claimed { generation, .. } =
        store.begin(&id("unknown"), fp("p"), at(day + 11)).unwrap()
    else {
        panic!()
    };
    store
        .mark_unknown(&id("unknown"), generation, at(day + 12))
        .unwrap();
    // The layers after the key: an entity that moved twice, and a claimed receipt.
    let payment = idem_store::entity::Machine::new(idem_store::entity::MachineSpec {
        states: vec!["created".into(), "paid".into()],
        initial: "created".into(),
        moves: vec![("created".into(), "paid".into())],
    })
    .unwrap();
    let pay = idem_store::entity::EntityId::new("shop", "payment", "p-1").unwrap();
    for to in ["created", "paid"] {
        let moved = store
            .transition(&payment, &pay, to, None, at(day + 13))
            .unwrap();
        assert!(matches!(
            moved,
            idem_store::entity::EntityDecision::Applied { .. }
        ));
    }
    let sold = store.execute(&id("sale-1"), fp("s"), at(day + 14), |txn| {
        let claimed = store.claim_unique_in(txn, "shop", "receipt", "R-1", "sale-1")?;
        assert_eq!(claimed, idem_store::entity::Uniqueness::Claimed);
        Ok::<_, idem_store::Error>((Verdict::Succeeded, Outcome::new(201, "sold"), ()))
    });
    assert!(matches!(sold, Ok(idem_store::Executed::Ran { .. })));
    // A one-time token issued for an intent, unused, valid for two hours (an hour
    // from the test's now).
    let issued = store
        .issue_token(
            "shop",
            "redeem",
            7_200_000,
            Some("order-1"),
            [9; 16],
            at(day + 15),
        )
        .unwrap();
    assert!(matches!(issued, idem_store::token::Issue::New { .. }));
    // The sender's outbox: an intent queued, one completed with its reply, and one past
    // its deadline, resolved by an operator.
    let outbox = store
        .outbox(idem_core::LedgerConfig::with_seed(11))
        .unwrap();
    let stale = outbox
        .enqueue("sale.forward", b"{}".to_vec(), fp("i-0"), at(0), [1; 16])
        .unwrap();
    outbox.due(at(day + 16), 10).unwrap();
    outbox
        .resolve(
            &stale.key,
            idem_core::ResolvedAs::NotExecuted,
            "not in the statement",
            at(day + 17),
        )
        .unwrap();
    let done = outbox
        .enqueue(
            "sale.forward",
            b"{\"n\":1}".to_vec(),
            fp("i-1"),
            at(day + 18),
            [2; 16],
        )
        .unwrap();
    assert_eq!(outbox.due(at(day + 18), 10).unwrap().len(), 1);
    let reply = idem_core::Reply {
        status: 201,
        body: b"forwarded".to_vec(),
        retry_at: None,
    };
    outbox.record_reply(&done.key, reply, at(day + 19)).unwrap();
    outbox
        .enqueue(
            "sale.forward",
            vec![0, 0xff],
            fp("i-2"),
            at(day + 20),
            [3; 16],
        )
        .unwrap();
    let states: Vec<_> = outbox
        .intents(&Default::default())
        .unwrap()
        .iter()
        .map(|i| (i.state.name(), i.resolution.is_some()))
        .collect();
    assert_eq!(
        states,
        [("expired", true), ("completed", false), ("queued", false)]
    );
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_move_from_a_file_to_the_database_and_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_with_records(dir.path());
    let mut from_file = Vec::new();
    file.export(&mut from_file).unwrap();

    let server = Server::start();
    let pg = store(&server, Config::default(), 2).await;
    let moved = pg.import(&mut from_file.as_slice()).await.unwrap();
    assert_eq!(
        (
            moved.records,
            moved.intents,
            moved.entities,
            moved.unique,
            moved.tokens
        ),
        (6, 3, 1, 1, 1)
    );
    // Importing the same export again changes nothing.
    pg.import(&mut from_file.as_slice()).await.unwrap();
    let mut from_db = Vec::new();
    pg.export(&mut from_db).await.unwrap();

    // The records answer on the database as they did on the file.
    assert!(matches!(
        pg.begin(&id("settled-1"), fp("p"), Timestamp(0)).await.unwrap(),
        Decision::Replay { verdict: Verdict::Failed, outcome, .. } if outcome.body == [1, 0xff]
    ));
    assert!(matches!(
        pg.begin(&id("old"), fp("p"), Timestamp(0)).await.unwrap(),
        Decision::Forgotten { .. }
    ));
    // Generations carry on above the file's.
    let Decision::Claimed { generation, .. } =
        pg.begin(&id("fresh"), fp("p"), Timestamp(0)).await.unwrap()
    else {
        panic!()
    };
    assert!(generation > file.stats(idem_store::now()).unwrap().generation);
    pg.release(&id("fresh"), generation, Timestamp(0))
        .await
        .unwrap();
    // The entity, the claim and the token answer as they did on the file.
    let pay = idem_store::entity::EntityId::new("shop", "payment", "p-1").unwrap();
    let entity = pg.get_entity(&pay).await.unwrap().unwrap();
    assert_eq!((entity.state.as_str(), entity.version), ("paid", 2));
    assert_eq!(
        pg.claim_unique("shop", "receipt", "R-1", "sale-2")
            .await
            .unwrap(),
        idem_store::entity::Uniqueness::Taken {
            by: "sale-1".into()
        }
    );
    let again = pg
        .issue_token("shop", "redeem", 7_200_000, Some("order-1"), [8; 16])
        .await
        .unwrap();
    assert!(
        matches!(&again, idem_store::token::Issue::Existing { token, .. }
            if *token == idem_store::token::Token::from_random([9; 16])),
        "{again:?}"
    );

    // Back to a new file: its export is the first one, byte for byte.
    let back = Store::open(dir.path().join("back.redb")).unwrap();
    back.import(&mut from_db.as_slice()).unwrap();
    let mut round_trip = Vec::new();
    back.export(&mut round_trip).unwrap();
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
    let (first, again) = (text(&from_file), text(&round_trip));
    // The generation counter moved on by the claim made on the database meanwhile.
    let body = |export: &str| {
        export
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(body(&first), body(&again));
    assert_eq!(
        first.lines().count(),
        13,
        "a header, 6 records, 3 intents, an entity, a claim, a token"
    );

    // Database to database: equal exports.
    let db = client(&server).await;
    db.batch_execute("CREATE DATABASE second").await.unwrap();
    let second = idem_store::postgres::PgStore::connect(&super::url_of(&server, "second"))
        .await
        .unwrap();
    second.import(&mut from_db.as_slice()).await.unwrap();
    let mut again = Vec::new();
    second.export(&mut again).await.unwrap();
    assert_eq!(text(&again), text(&from_db));
}
