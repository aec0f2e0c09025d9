//! One-time tokens (docs/design.md §9) through the seam ([`idem_store::token::Tokens`]):
//! issued, consumed once as a begin, refused when not issued for the key or expired
//! unused, issued once per intent, swept once expired, and through export and import.
//! (Consuming inside a caller's transaction, `consume_execute`, is each engine's own.)

use std::sync::Arc;

use idem_core::protocol::Decision;
use idem_core::{Config, Fingerprint, Outcome, RecordId, State, Verdict};
use idem_store::token::{
    Consumed, Issue, IssuedToken, TOKEN_LEN, Token, TokenError, TokenRefusal, Tokens,
};
use idem_store::{Error, Receiver};
use tokio::sync::Barrier;

use crate::{Engine, MINUTE, assert_within, claimed, fp, without_ages};

/// The id a token of `shop`'s `redeem` is consumed under.
fn tid(token: &Token) -> RecordId {
    RecordId::new("shop", "redeem", token.as_str()).unwrap()
}

/// Issues a token of `shop`'s `redeem` for `ttl_ms`, made of `random` repeated, for
/// `intent`, at the harness's time.
async fn issue<E: Engine>(h: &E, random: u8, ttl_ms: u64, intent: Option<&str>) -> Issue {
    h.store()
        .issue_token("shop", "redeem", ttl_ms, intent, [random; 16], h.now())
        .await
        .unwrap()
}

/// Consumes the token in `id` with the request `fingerprint`, at the harness's time.
async fn consume<E: Engine>(h: &E, id: &RecordId, fingerprint: Fingerprint) -> Consumed<Decision> {
    h.store().consume(id, fingerprint, h.now()).await.unwrap()
}

/// Consumes the token in `id` (its first use) and settles the claim with `body`.
async fn use_once<E: Engine>(h: &E, id: &RecordId, fingerprint: Fingerprint, body: &str) {
    let Consumed::Admitted(decision) = consume(h, id, fingerprint).await else {
        panic!("{id}: the first use is admitted")
    };
    let generation = claimed(decision);
    h.store()
        .complete(
            id,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, body),
            h.now(),
        )
        .await
        .unwrap();
}

/// A token is issued with the engine's time and its ttl, kept as issued, and used once:
/// its first consume claims its key; every later one is answered by that use (in
/// progress, its outcome replayed, past the ttl too; another request a conflict), never
/// a second claim. Once its use is past retention, the long-expired token is refused.
pub(crate) async fn a_token_is_consumed_once_and_every_later_consume_answers_that_use<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let before = h.clock().await;
    let issued = issue(&h, 1, MINUTE, None).await;
    let after = h.clock().await;
    let Issue::New { token, entry } = issued else {
        panic!("a first issue is new: {issued:?}")
    };
    assert_eq!(token.as_str().len(), TOKEN_LEN);
    assert_within(entry.issued_at, before, after, "issued_at");
    assert_eq!(
        entry,
        IssuedToken {
            issued_at: entry.issued_at,
            expires_at: entry.issued_at.plus_millis(MINUTE),
            intent_id: None,
        }
    );
    let id = tid(&token);
    assert_eq!(
        h.store().get_token(&id).await.unwrap().as_ref(),
        Some(&entry)
    );

    let Consumed::Admitted(first) = consume(&h, &id, fp("voucher 5")).await else {
        panic!("the first use is admitted")
    };
    let generation = claimed(first);
    assert!(
        matches!(
            consume(&h, &id, fp("voucher 5")).await,
            Consumed::Admitted(Decision::InProgress { .. })
        ),
        "a second consume while the first runs claims nothing"
    );
    h.store()
        .complete(
            &id,
            generation,
            Verdict::Succeeded,
            Outcome::new(200, "redeemed"),
            h.now(),
        )
        .await
        .unwrap();
    // The reply was lost: the retry is replayed, not "token already used".
    let Consumed::Admitted(Decision::Replay {
        verdict, outcome, ..
    }) = consume(&h, &id, fp("voucher 5")).await
    else {
        panic!("a retry replays")
    };
    assert_eq!(
        (verdict, outcome.body.as_slice()),
        (Verdict::Succeeded, &b"redeemed"[..])
    );
    // Past the ttl too: the use came before it.
    h.pass(2 * MINUTE).await;
    assert!(matches!(
        consume(&h, &id, fp("voucher 5")).await,
        Consumed::Admitted(Decision::Replay { .. })
    ));
    // Another request under the same token is a conflict.
    assert!(matches!(
        consume(&h, &id, fp("voucher 9")).await,
        Consumed::Admitted(Decision::Conflict { .. })
    ));
    // Past the retention of its use, the token is long expired, but it was used: while
    // the use's tombstone lasts, a retry is answered Forgotten (it ran, do not run it
    // again), swept or not, never "expired before its first use".
    h.pass(Config::default().success_retention_ms).await;
    assert!(
        matches!(
            consume(&h, &id, fp("voucher 5")).await,
            Consumed::Admitted(Decision::Forgotten {
                verdict: Verdict::Succeeded,
                ..
            })
        ),
        "a used token past its use's retention is forgotten"
    );
    h.store().sweep(h.now(), 100, false).await.unwrap();
    assert!(
        matches!(
            consume(&h, &id, fp("voucher 5")).await,
            Consumed::Admitted(Decision::Forgotten { .. })
        ),
        "and after a sweep"
    );
    // Past the tombstone's time too, nothing of the use is kept: the entry decides.
    h.pass(Config::default().tombstone_retention_ms).await;
    assert_eq!(
        consume(&h, &id, fp("voucher 5")).await,
        Consumed::Refused(TokenRefusal::Expired {
            expires_at: entry.expires_at
        })
    );
}

/// A token is refused, with nothing written (no record, no generation), when it was
/// never issued, when it was issued for another tenant or operation, and when its ttl
/// passed before its first use; until then it is good for its own tenant and operation.
pub(crate) async fn a_token_not_issued_for_its_key_or_expired_unused_is_refused_and_writes_nothing<
    E: Engine,
>() {
    let mut h = E::open(Config::default()).await;
    let token = issue(&h, 2, MINUTE, None).await.token().clone();
    let spare = issue(&h, 3, MINUTE, None).await;
    let never = Token::from_random([9; 16]);
    let generation = h.store().stats(h.now()).await.unwrap().generation;
    for refused in [
        RecordId::new("shop", "redeem", never.as_str()).unwrap(),
        RecordId::new("other-shop", "redeem", token.as_str()).unwrap(),
        RecordId::new("shop", "refund", token.as_str()).unwrap(),
    ] {
        assert_eq!(
            consume(&h, &refused, fp("x")).await,
            Consumed::Refused(TokenRefusal::NotIssued),
            "{refused}"
        );
        assert_eq!(h.store().get(&refused).await.unwrap(), None, "{refused}");
    }
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!((stats.records(), stats.generation), (0, generation));

    // Still good for its own tenant and operation, just before its ttl.
    h.pass(MINUTE - 1 - E::MARGIN_MS).await;
    assert!(matches!(
        consume(&h, &tid(&token), fp("x")).await,
        Consumed::Admitted(Decision::Claimed { .. })
    ));
    let generation = h.store().stats(h.now()).await.unwrap().generation;
    // At its ttl, unused: expired.
    h.pass(1 + E::MARGIN_MS).await;
    let expired = tid(spare.token());
    assert_eq!(
        consume(&h, &expired, fp("x")).await,
        Consumed::Refused(TokenRefusal::Expired {
            expires_at: spare.entry().expires_at
        })
    );
    assert_eq!(h.store().get(&expired).await.unwrap(), None);
    let stats = h.store().stats(h.now()).await.unwrap();
    assert_eq!((stats.records(), stats.generation), (1, generation));
}

/// A claim made by consuming a token and released (nothing was done) gives the token
/// back: the next consume claims it again, a generation higher.
pub(crate) async fn a_released_consume_gives_the_token_back<E: Engine>() {
    let h = E::open(Config::default()).await;
    let id = tid(issue(&h, 7, MINUTE, None).await.token());
    let Consumed::Admitted(first) = consume(&h, &id, fp("v")).await else {
        panic!("the first consume is admitted")
    };
    let first = claimed(first);
    h.store().release(&id, first, h.now()).await.unwrap();
    assert_eq!(h.store().get(&id).await.unwrap(), None);
    let Consumed::Admitted(again) = consume(&h, &id, fp("v")).await else {
        panic!("the released token is admitted again")
    };
    assert!(claimed(again) > first);
}

/// Check-then-delete lets two concurrent consumers both pass the check. Here the check
/// and the claim are one: of 100 consumers released together, on the engine's replicas,
/// exactly one claims the token and every other finds its claim.
pub(crate) async fn of_a_hundred_concurrent_consumers_exactly_one_claims_the_token<E: Engine>() {
    let h = E::open(Config::default()).await;
    let fleet = [h.shared(), h.replica().await, h.replica().await];
    let id = tid(issue(&h, 5, MINUTE, None).await.token());
    let barrier = Arc::new(Barrier::new(100));
    let now = h.now();
    let consumers: Vec<_> = (0..100)
        .map(|n| {
            let (store, barrier, id) =
                (Arc::clone(&fleet[n % 3]), Arc::clone(&barrier), id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.consume(&id, fp("voucher"), now).await.unwrap()
            })
        })
        .collect();
    let mut claims = 0;
    for consumer in consumers {
        match consumer.await.unwrap() {
            Consumed::Admitted(Decision::Claimed { .. }) => claims += 1,
            Consumed::Admitted(Decision::InProgress { .. }) => {}
            other => panic!("every other consumer sees the claim: {other:?}"),
        }
    }
    assert_eq!(claims, 1);
    assert_eq!(
        h.store().get(&id).await.unwrap().map(|r| r.state()),
        Some(State::Pending)
    );
}

/// Issuing for an intent id answers the token issued for it while that one is unused
/// and unexpired, and writes nothing; another tenant's intent of the same name is
/// another intent; once the token is used, the intent gets a new one. Random bytes that
/// repeat an issued token are refused, not a second holder.
pub(crate) async fn an_intent_makes_issuing_idempotent_until_its_token_is_used<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let first = issue(&h, 8, MINUTE, Some("order-1")).await;
    assert!(matches!(first, Issue::New { .. }), "{first:?}");
    assert_eq!(first.entry().intent_id.as_deref(), Some("order-1"));
    h.pass(5).await;
    assert_eq!(
        issue(&h, 9, MINUTE, Some("order-1")).await,
        Issue::Existing {
            token: first.token().clone(),
            entry: first.entry().clone()
        }
    );
    assert_eq!(
        h.store()
            .get_token(&tid(&Token::from_random([9; 16])))
            .await
            .unwrap(),
        None,
        "nothing written"
    );
    let foreign = h
        .store()
        .issue_token(
            "shop-2",
            "redeem",
            MINUTE,
            Some("order-1"),
            [9; 16],
            h.now(),
        )
        .await
        .unwrap();
    assert!(matches!(foreign, Issue::New { .. }), "{foreign:?}");
    assert_ne!(foreign.token(), first.token());

    h.pass(1).await;
    use_once(&h, &tid(first.token()), fp("v"), "redeemed").await;
    h.pass(1).await;
    let after_use = issue(&h, 10, MINUTE, Some("order-1")).await;
    assert!(matches!(after_use, Issue::New { .. }), "{after_use:?}");
    assert_ne!(after_use.token(), first.token());
    let repeat = h
        .store()
        .issue_token("shop", "redeem", MINUTE, None, [10; 16], h.now())
        .await;
    assert!(matches!(repeat, Err(Error::TokenTaken)), "{repeat:?}");
}

/// An intent's token whose ttl passed unused is refused as expired, and the intent gets
/// a new token; the sweep removes the expired one (then it was never issued, as far as a
/// consume can tell) and leaves the new one, which the intent is answered again.
pub(crate) async fn an_intents_token_expired_unused_is_replaced_and_swept<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    let never = RecordId::new("shop", "redeem", "AAAAAAAAAAAAAAAAAAAAAA").unwrap();
    assert_eq!(
        consume(&h, &never, fp("x")).await,
        Consumed::Refused(TokenRefusal::NotIssued)
    );
    let issued = issue(&h, 3, MINUTE, Some("order-1")).await;
    let id = tid(issued.token());
    assert_eq!(
        h.store().get_token(&id).await.unwrap().as_ref(),
        Some(issued.entry())
    );
    // Its ttl passes unused.
    h.pass(MINUTE).await;
    assert_eq!(
        consume(&h, &id, fp("x")).await,
        Consumed::Refused(TokenRefusal::Expired {
            expires_at: issued.entry().expires_at
        })
    );
    let again = issue(&h, 4, MINUTE, Some("order-1")).await;
    assert!(matches!(again, Issue::New { .. }), "{again:?}");
    assert_ne!(again.token(), issued.token());
    let report = h.store().sweep_tokens(h.now(), 100).await.unwrap();
    assert_eq!((report.removed, report.remaining_expired), (1, false));
    assert_eq!(h.store().get_token(&id).await.unwrap(), None);
    assert_eq!(
        consume(&h, &id, fp("x")).await,
        Consumed::Refused(TokenRefusal::NotIssued)
    );
    // The intent's new token is untouched by the sweep, and answered again.
    let answered = issue(&h, 5, MINUTE, Some("order-1")).await;
    assert_eq!(
        answered,
        Issue::Existing {
            token: again.token().clone(),
            entry: again.entry().clone()
        }
    );
    let taken = h
        .store()
        .issue_token("shop", "redeem", MINUTE, None, [4; 16], h.now())
        .await;
    assert!(matches!(taken, Err(Error::TokenTaken)), "{taken:?}");
}

/// Sixteen issues for one intent at once, on the engine's replicas: one writes the
/// token, every other answers it.
pub(crate) async fn sixteen_issues_for_one_intent_at_once_answer_one_token<E: Engine>() {
    let h = E::open(Config::default()).await;
    let fleet = [h.shared(), h.replica().await, h.replica().await];
    let barrier = Arc::new(Barrier::new(16));
    let now = h.now();
    let issues: Vec<_> = (0..16u8)
        .map(|n| {
            let (store, barrier) = (Arc::clone(&fleet[usize::from(n) % 3]), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .issue_token(
                        "shop",
                        "redeem",
                        MINUTE,
                        Some("order-991"),
                        [n + 1; 16],
                        now,
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut tokens = Vec::new();
    let mut new = 0;
    for issue in issues {
        let issued = issue.await.unwrap();
        if matches!(issued, Issue::New { .. }) {
            new += 1;
        }
        tokens.push(issued.token().clone());
    }
    tokens.dedup();
    assert_eq!(tokens.len(), 1, "one token for one intent: {tokens:?}");
    assert_eq!(new, 1, "one issue wrote it, the others answered it");
}

/// The token sweep deletes tokens at their expiry, at most its limit a run, and says
/// when expired ones remain; a used token's record outlives it, so its use still
/// replays, while an unused one is now not issued.
pub(crate) async fn the_token_sweep_deletes_expired_tokens_in_batches_and_a_use_still_replays<
    E: Engine,
>() {
    let mut h = E::open(Config::default()).await;
    let mut tokens = Vec::new();
    for n in 0..5 {
        tokens.push(issue(&h, 20 + n, MINUTE, None).await.token().clone());
    }
    h.pass(1).await;
    let used = tid(&tokens[0]);
    use_once(&h, &used, fp("v"), "redeemed").await;
    let report = h.store().sweep_tokens(h.now(), 100).await.unwrap();
    assert_eq!((report.removed, report.remaining_expired), (0, false));
    h.pass(MINUTE - 1).await;
    let report = h.store().sweep_tokens(h.now(), 3).await.unwrap();
    assert_eq!((report.removed, report.remaining_expired), (3, true));
    let report = h.store().sweep_tokens(h.now(), 100).await.unwrap();
    assert_eq!((report.removed, report.remaining_expired), (2, false));
    for token in &tokens {
        assert_eq!(h.store().get_token(&tid(token)).await.unwrap(), None);
    }
    assert_eq!(
        consume(&h, &tid(&tokens[1]), fp("v")).await,
        Consumed::Refused(TokenRefusal::NotIssued)
    );
    assert!(matches!(
        consume(&h, &used, fp("v")).await,
        Consumed::Admitted(Decision::Replay { .. })
    ));
}

/// A ttl, an intent id or a token that breaks its rule is refused with a message that
/// names the field and the rule, and nothing is written.
pub(crate) async fn bad_token_input_names_the_field_and_the_rule_and_writes_nothing<E: Engine>() {
    let config = Config {
        success_retention_ms: 10 * MINUTE,
        ..Config::default()
    };
    let h = E::open(config).await;
    let token = issue(&h, 30, MINUTE, Some("order-1")).await;
    let before = without_ages(h.store().stats(h.now()).await.unwrap());
    let issue_err = |ttl: u64, intent: Option<&'static str>| {
        let store = h.store();
        let now = h.now();
        async move {
            store
                .issue_token("shop", "redeem", ttl, intent, [31; 16], now)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    assert_eq!(issue_err(0, None).await, "ttl: 0 ms, must be at least 1 ms");
    assert_eq!(
        issue_err(10 * MINUTE + 1, None).await,
        "ttl: 600001 ms, at most the store's retention of 600000 ms (the record of a token's use must outlive the token)"
    );
    assert_eq!(
        issue_err(MINUTE, Some("")).await,
        "intent: 0 bytes, needs 1 to 255 bytes of printable ASCII (0x20-0x7E)"
    );
    let consume_err = |text: String| {
        let store = h.store();
        let now = h.now();
        async move {
            let id = RecordId::new("shop", "redeem", &text).unwrap();
            let err = store.consume(&id, fp("v"), now).await.unwrap_err();
            assert!(matches!(err, Error::Token(_)), "{err:?}");
            err.to_string()
        }
    };
    assert_eq!(
        consume_err(token.token().as_str()[1..].to_string()).await,
        "token: 21 characters, expected 22 (128 bits in URL-safe base64 without padding)"
    );
    let mut bad = token.token().as_str().to_string();
    bad.replace_range(3..4, "+");
    assert_eq!(
        consume_err(bad.clone()).await,
        "token: '+' at offset 3 is outside the URL-safe base64 alphabet (A-Z a-z 0-9 - _)"
    );
    let read = h
        .store()
        .get_token(&RecordId::new("shop", "redeem", &bad).unwrap())
        .await;
    assert!(
        matches!(
            read,
            Err(Error::Token(TokenError::Alphabet { offset: 3, .. }))
        ),
        "{read:?}"
    );
    assert_eq!(
        without_ages(h.store().stats(h.now()).await.unwrap()),
        before,
        "nothing written"
    );
    assert_eq!(
        h.store()
            .get_token(&tid(&Token::from_random([31; 16])))
            .await
            .unwrap(),
        None,
        "no token written"
    );
    assert_eq!(
        issue(&h, 32, MINUTE, Some("order-1")).await,
        Issue::Existing {
            token: token.token().clone(),
            entry: token.entry().clone()
        },
        "the intent's token as it was"
    );
}

/// Restoring from an export keeps issued tokens: an unused one is still consumable
/// once, a used one still replays, and issuing again for an intent still answers its
/// latest token. A token line that breaks a rule is named, and nothing is imported.
pub(crate) async fn tokens_go_through_export_and_import<E: Engine>() {
    let mut source = E::open(Config::default()).await;
    let unused = issue(&source, 1, MINUTE, None).await.token().clone();
    let before = source.clock().await;
    let used = issue(&source, 2, MINUTE, Some("order-1")).await;
    let after = source.clock().await;
    source.pass(1).await;
    use_once(&source, &tid(used.token()), fp("v"), "redeemed").await;
    // Used, so the intent gets a new token, which the intent's entry now names.
    source.pass(1).await;
    let latest = issue(&source, 3, MINUTE, Some("order-1")).await;
    assert!(matches!(latest, Issue::New { .. }), "{latest:?}");

    let mut exported = Vec::new();
    let sent = source.store().export(&mut exported).await.unwrap();
    assert_eq!((sent.records, sent.tokens), (1, 3));
    let text = String::from_utf8(exported.clone()).unwrap();
    let entry = used.entry();
    assert_within(entry.issued_at, before, after, "issued_at");
    assert!(
        text.contains(&format!(
            r#"{{"token":{{"tenant":"shop","operation":"redeem","token":"{}","issued_at":{},"expires_at":{},"intent_id":"order-1"}}}}"#,
            used.token().as_str(),
            entry.issued_at.0,
            entry.issued_at.0 + MINUTE
        )),
        "{text}"
    );

    let target = E::open(Config::default()).await;
    let store = target.store();
    assert_eq!(store.import(&mut exported.as_slice()).await.unwrap(), sent);
    target.check_integrity();
    for token in [&unused, used.token(), latest.token()] {
        assert_eq!(
            store.get_token(&tid(token)).await.unwrap(),
            source.store().get_token(&tid(token)).await.unwrap()
        );
    }
    let again = issue(&target, 4, MINUTE, Some("order-1")).await;
    assert_eq!(again.token(), latest.token(), "the intent's latest token");
    assert!(matches!(
        consume(&target, &tid(used.token()), fp("v")).await,
        Consumed::Admitted(Decision::Replay { .. })
    ));
    assert!(matches!(
        consume(&target, &tid(&unused), fp("w")).await,
        Consumed::Admitted(Decision::Claimed { .. })
    ));
    // A token line that breaks a rule is named, and nothing is imported.
    let bad = text.replace(used.token().as_str(), "not-a-token");
    let fresh = E::open(Config::default()).await;
    let err = fresh.store().import(&mut bad.as_bytes()).await.unwrap_err();
    assert!(err.to_string().contains("token: "), "{err}");
    let stats = fresh.store().stats(fresh.now()).await.unwrap();
    assert_eq!(stats.records(), 0, "nothing imported");
    assert_eq!(
        fresh.store().get_token(&tid(&unused)).await.unwrap(),
        None,
        "nothing imported"
    );
}
