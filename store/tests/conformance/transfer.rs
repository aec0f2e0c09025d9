//! Export and import through the seam: a store's records move to a fresh store of the
//! same engine byte for byte, with the generation counter; an import is all or nothing.
//! (Moving between engines, file to database and back, is the PostgreSQL tests'
//! `transfer.rs`.)

use idem_core::protocol::{Decision, Resolution};
use idem_core::{Config, Generation, Outcome, RecordId, Verdict};
use idem_store::{ListFilter, Receiver};

use crate::{DAY, Engine, HOUR, assert_next_generation, claimed, fp, settle, without_ages};

fn key(name: &str) -> RecordId {
    RecordId::new("shop", "pay", name).unwrap()
}

/// Every state, binary outcomes (negative and zero codes too), and a generation
/// counter above every record's (a released claim): six records, counter at 7.
async fn varied<E: Engine>(h: &mut E) {
    for n in 0..6u8 {
        let key = key(&format!("k{n}"));
        let store = h.store();
        let generation = claimed(
            store
                .begin(&key, fp(&key.to_string()), h.now())
                .await
                .unwrap(),
        );
        let body: Vec<u8> = (0..=255u8).rev().chain([n]).collect();
        let now = h.now();
        match n {
            0 => {}
            1 => drop(store.mark_unknown(&key, generation, now).await.unwrap()),
            2 => drop(
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Failed,
                        Outcome::new(-1, body),
                        now,
                    )
                    .await
                    .unwrap(),
            ),
            3 => {
                store.mark_unknown(&key, generation, now).await.unwrap();
                store
                    .resolve(&key, Resolution::Succeeded(Outcome::new(0, body)), now)
                    .await
                    .unwrap();
            }
            _ => drop(
                store
                    .complete(
                        &key,
                        generation,
                        Verdict::Succeeded,
                        Outcome::new(201, body),
                        now,
                    )
                    .await
                    .unwrap(),
            ),
        }
        h.pass(1).await;
    }
    let released = key("released");
    let generation = claimed(
        h.store()
            .begin(&released, fp("released"), h.now())
            .await
            .unwrap(),
    );
    h.store()
        .release(&released, generation, h.now())
        .await
        .unwrap();
}

/// The export of `h`'s store.
async fn export<E: Engine>(h: &E) -> Vec<u8> {
    let mut out = Vec::new();
    h.store().export(&mut out).await.unwrap();
    out
}

/// An export read into a fresh store gives the same records byte for byte and the
/// same counter; that store's export is the first one, byte for byte.
pub(crate) async fn export_then_import_is_lossless<E: Engine>() {
    let mut source = E::open(Config::default()).await;
    varied(&mut source).await;
    let mut exported = Vec::new();
    assert_eq!(
        source.store().export(&mut exported).await.unwrap().records,
        6
    );
    let text = String::from_utf8(exported.clone()).unwrap();
    let floor = source
        .store()
        .stats(source.now())
        .await
        .unwrap()
        .clock_floor;
    assert!(
        text.starts_with(&format!(
            "{{\"idem_export\":3,\"generation\":7,\"clock_floor\":{},\"records\":6,\"intents\":0,\"entities\":0,\"unique\":0,\"tokens\":0}}\n",
            floor.0
        )),
        "{text}"
    );

    let target = E::open(Config::default()).await;
    let moved = target
        .store()
        .import(&mut exported.as_slice())
        .await
        .unwrap();
    assert_eq!(
        (
            moved.records,
            moved.intents,
            moved.entities,
            moved.unique,
            moved.tokens
        ),
        (6, 0, 0, 0, 0)
    );
    assert_eq!(
        target.store().stats(target.now()).await.unwrap().generation,
        Generation(7)
    );
    let before = source.store().list(&ListFilter::default()).await.unwrap();
    let after = target.store().list(&ListFilter::default()).await.unwrap();
    assert_eq!(before.len(), 6);
    assert_eq!(after.len(), 6);
    for ((id_a, a), (id_b, b)) in before.iter().zip(&after) {
        assert_eq!(id_a, id_b);
        assert_eq!(a.encode(), b.encode(), "{id_a}");
    }
    assert_eq!(export(&target).await, exported);
    // The records answer as they did; the next claim is above everything imported.
    assert!(matches!(
        target.store().begin(&key("k2"), fp("shop/pay/k2"), target.now()).await.unwrap(),
        Decision::Replay { verdict: Verdict::Failed, outcome, .. }
            if outcome == Outcome::new(-1, (0..=255u8).rev().chain([2]).collect::<Vec<u8>>())
    ));
    assert_eq!(
        target
            .store()
            .begin(&key("k1"), fp("shop/pay/k1"), target.now())
            .await
            .unwrap(),
        Decision::NeedsReconciliation {
            generation: Generation(2)
        }
    );
    assert!(matches!(
        target
            .store()
            .begin(&key("k0"), fp("shop/pay/k0"), target.now())
            .await
            .unwrap(),
        Decision::InProgress {
            generation: Generation(1),
            ..
        }
    ));
    let generation = claimed(
        target
            .store()
            .begin(&key("new"), fp("n"), target.now())
            .await
            .unwrap(),
    );
    assert_next_generation::<E>(generation, Generation(7));
    target.check_integrity();
}

/// Importing an export into a store that already holds it changes nothing.
pub(crate) async fn importing_the_same_export_again_changes_nothing<E: Engine>() {
    let mut source = E::open(Config::default()).await;
    varied(&mut source).await;
    let exported = export(&source).await;
    let target = E::open(Config::default()).await;
    target
        .store()
        .import(&mut exported.as_slice())
        .await
        .unwrap();
    let stats = target.store().stats(target.now()).await.unwrap();
    assert_eq!(
        target
            .store()
            .import(&mut exported.as_slice())
            .await
            .unwrap()
            .records,
        6
    );
    assert_eq!(export(&target).await, exported);
    assert_eq!(
        without_ages(target.store().stats(target.now()).await.unwrap()),
        without_ages(stats)
    );
    target.check_integrity();
}

/// A bad line is named with its number and the rule it breaks, and nothing of the
/// import is written; a record that differs from the one the store holds under its id
/// is refused, and so is an intent under a key the store holds for another one.
pub(crate) async fn a_bad_import_line_is_named_and_nothing_is_imported<E: Engine>() {
    let mut source = E::open(Config::default()).await;
    varied(&mut source).await;
    let text = String::from_utf8(export(&source).await).unwrap();
    let target = E::open(Config::default()).await;
    let import = |input: String| {
        let store = target.store();
        async move {
            store
                .import(&mut input.as_bytes())
                .await
                .unwrap_err()
                .to_string()
        }
    };

    let mut broken: Vec<String> = text.lines().map(String::from).collect();
    broken[3] = broken[3].replace("\"fingerprint\":\"", "\"fingerprint\":\"zz");
    assert_eq!(
        import(broken.join("\n")).await,
        "import line 4: fingerprint: 66 characters, expected 64 hex digits (0-9, a-f)"
    );
    let cases = [
        (
            "not json",
            "import line 2: not JSON: expected ident at line 1 column 2",
        ),
        ("[1]", "import line 2: expected a JSON object"),
        (
            "{\"idem_export\":1,\"generation\":1,\"records\":0}",
            "import line 2: a header line may only come first",
        ),
    ];
    for (line, message) in cases {
        let input = format!("{}\n{line}\n", text.lines().nth(1).unwrap());
        assert_eq!(import(input).await, message);
    }
    let truncated: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    assert_eq!(
        import(truncated).await,
        "import line 3: the header announces 6 records, 0 intents, 0 entities, 0 claimed values and 0 tokens, the input holds 2, 0, 0, 0 and 0 (truncated?)"
    );
    assert!(
        import("{\"tenant\":1}\n".to_owned())
            .await
            .starts_with("import line 1: ")
    );
    let stats = target.store().stats(target.now()).await.unwrap();
    assert_eq!(stats.records(), 0);
    assert_eq!(stats.generation, Generation(0));

    // A different record under an id the store holds is refused.
    target.store().import(&mut text.as_bytes()).await.unwrap();
    let changed = text.replacen("\"code\":-1", "\"code\":-2", 1);
    let refused = import(changed).await;
    let expected = format!(
        "shop/pay/k2: {} already holds a different record under this id",
        E::HOLDS
    );
    assert!(
        refused.starts_with("import line ") && refused.ends_with(&expected),
        "{refused}"
    );
}

/// An import refused at one line writes nothing of the others: here an intent whose
/// key the store holds for a different intent, between a record and an entity.
pub(crate) async fn an_import_refused_at_one_line_writes_nothing_of_the_others<E: Engine>() {
    let h = E::open(Config::default()).await;
    let record = r#"{"tenant":"shop","operation":"charge","key":"k-1","state":"unknown","generation":4,"fingerprint":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","created_at":1700000000000,"updated_at":1700000000100}"#;
    let entity = r#"{"entity":{"tenant":"shop","kind":"payment","id":"p-1","state":"paid","version":2,"updated_at":1700000000100}}"#;
    let intent = |payload: &str| {
        format!(
            r#"{{"intent":{{"key":"0190b7c2-0000-7000-8000-000000000000","operation":"sale.forward","state":"queued","attempts":0,"created_at":1700000000300,"next_attempt_at":1700000000300,"deadline":1700082800300,"fingerprint":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","payload_b64":"{payload}"}}}}"#
        )
    };
    let held = h
        .store()
        .import(&mut format!("{}\n", intent("e30=")).as_bytes())
        .await
        .unwrap();
    assert_eq!(held.intents, 1);
    let before = export(&h).await;
    let input = format!("{record}\n{}\n{entity}\n", intent("e30K"));
    let refused = h.store().import(&mut input.as_bytes()).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "import line 2: intent 0190b7c2-0000-7000-8000-000000000000: \
             {} already holds a different intent under this key",
            E::HOLDS
        )
    );
    assert_eq!(
        h.store().get(&crate::id("k-1")).await.unwrap(),
        None,
        "nothing written"
    );
    assert_eq!(export(&h).await, before, "nothing written");
}

/// Tombstones move with their verdict and times: a late retry is answered Forgotten on
/// the copy too.
pub(crate) async fn tombstones_go_through_export_and_import<E: Engine>() {
    let config = Config {
        success_retention_ms: HOUR,
        failure_retention_ms: HOUR,
        tombstone_retention_ms: DAY,
        ..Config::default()
    };
    let mut source = E::open(config.clone()).await;
    let sale1 = crate::id("sale-1");
    let sale2 = crate::id("sale-2");
    settle(&source, &sale1, Verdict::Succeeded, Outcome::new(201, "x")).await;
    source.pass(2 * HOUR).await;
    settle(&source, &sale2, Verdict::Succeeded, Outcome::new(201, "y")).await;
    assert_eq!(
        source
            .store()
            .sweep(source.now(), 10, false)
            .await
            .unwrap()
            .tombstoned,
        1
    );
    let exported = export(&source).await;
    let text = String::from_utf8(exported.clone()).unwrap();
    assert!(
        text.contains(r#""state":"forgotten""#) && text.contains(r#""verdict":"succeeded""#),
        "{text}"
    );
    let mut copy = E::open(config).await;
    copy.pass(2 * HOUR).await;
    copy.store().import(&mut exported.as_slice()).await.unwrap();
    for key in [&sale1, &sale2] {
        assert_eq!(
            copy.store().get(key).await.unwrap(),
            source.store().get(key).await.unwrap(),
            "{key}"
        );
    }
    copy.pass(HOUR).await;
    assert!(matches!(
        copy.store()
            .begin(&sale1, fp("sale-1"), copy.now())
            .await
            .unwrap(),
        Decision::Forgotten {
            verdict: Verdict::Succeeded,
            ..
        }
    ));
    copy.check_integrity();
}
