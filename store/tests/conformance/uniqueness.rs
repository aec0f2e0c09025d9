//! Claimed business values (docs/design.md §8) through the seam
//! ([`idem_store::entity::Entities`]): a value claimed once, held until released through
//! every sweep, and the rules of its names. (A claim inside a caller's transaction,
//! `claim_unique_in`, is each engine's own test; export and import, `entities.rs`.)

use idem_core::{Config, Outcome, Verdict};
use idem_store::Receiver;
use idem_store::entity::{Entities, Uniqueness};

use crate::{DAY, Engine, id, settle};

/// A business value is claimed once: its holder claiming it again is Claimed, another
/// holder gets Taken with who holds it. The same value in another scope or tenant is
/// another value. The claim outlives the sweep of its holder's record, and ends only when
/// released; then another holder may claim it.
pub(crate) async fn a_business_value_is_claimed_once_and_held_until_released<E: Engine>() {
    let mut h = E::open(Config::default()).await;
    // The holder's own record, a sale, which the sweep will remove.
    settle(&h, &id("k1"), Verdict::Succeeded, Outcome::new(201, "sold")).await;
    let claim = |tenant: &'static str, scope: &'static str, by: &'static str| {
        let store = h.shared();
        async move {
            store
                .claim_unique(tenant, scope, "R-100", by)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim("shop", "receipt", "k1").await, Uniqueness::Claimed);
    assert_eq!(
        claim("shop", "receipt", "k1").await,
        Uniqueness::Claimed,
        "its holder again"
    );
    assert_eq!(
        claim("shop", "receipt", "k2").await,
        Uniqueness::Taken { by: "k1".into() }
    );
    assert_eq!(claim("shop", "invoice", "k2").await, Uniqueness::Claimed);
    assert_eq!(claim("mall", "receipt", "k2").await, Uniqueness::Claimed);
    let holder = |h: &E| {
        let store = h.shared();
        async move {
            store
                .unique_holder("shop", "receipt", "R-100")
                .await
                .unwrap()
        }
    };
    assert_eq!(holder(&h).await.as_deref(), Some("k1"));

    // Far past every retention: the sale's record is swept, its claim stays.
    h.pass(400 * DAY).await;
    let swept = h.store().sweep(h.now(), 1_000, false).await.unwrap();
    assert_eq!(swept.removed + swept.tombstoned, 1, "{swept:?}");
    assert_eq!(holder(&h).await.as_deref(), Some("k1"));

    let store = h.store();
    assert!(
        store
            .release_unique("shop", "receipt", "R-100")
            .await
            .unwrap()
    );
    assert_eq!(holder(&h).await, None);
    assert!(
        !store
            .release_unique("shop", "receipt", "R-100")
            .await
            .unwrap(),
        "released already"
    );
    assert_eq!(
        store
            .unique_holder("shop", "invoice", "R-100")
            .await
            .unwrap()
            .as_deref(),
        Some("k2"),
        "another scope's value stays"
    );
    assert_eq!(
        store
            .claim_unique("shop", "receipt", "R-100", "k2")
            .await
            .unwrap(),
        Uniqueness::Claimed
    );
    assert_eq!(holder(&h).await.as_deref(), Some("k2"));
}

/// A tenant, scope, value or holder that breaks its rule (a record's tenant, operation
/// and key rules; a holder of 1 to 255 bytes) is refused by every call, with a message
/// that names the field, and nothing is written.
pub(crate) async fn a_claimed_value_that_breaks_a_rule_is_refused_naming_the_field<E: Engine>() {
    let h = E::open(Config::default()).await;
    let store = h.store();
    let long = "k".repeat(256);
    let claims = [
        (
            "",
            "receipt",
            "R-1",
            "k1",
            "tenant: empty, needs 1 to 255 bytes",
        ),
        (
            "shop",
            "",
            "R-1",
            "k1",
            "scope: empty, needs 1 to 255 bytes",
        ),
        (
            "shop",
            "receipt",
            "",
            "k1",
            "value: empty, needs 1 to 255 bytes",
        ),
        ("shop", "receipt", "R-1", "", "by: 0 bytes, needs 1 to 255"),
        (
            "shop",
            "receipt",
            "R-1",
            long.as_str(),
            "by: 256 bytes, needs 1 to 255",
        ),
    ];
    for (tenant, scope, value, by, message) in claims {
        let err = store
            .claim_unique(tenant, scope, value, by)
            .await
            .unwrap_err();
        assert!(
            matches!(err, idem_store::Error::Name { .. }),
            "{message}: {err:?}"
        );
        assert_eq!(err.to_string(), message);
    }
    let err = store.unique_holder("shop", "", "R-100").await.unwrap_err();
    assert_eq!(err.to_string(), "scope: empty, needs 1 to 255 bytes");
    let err = store
        .release_unique("shop", "receipt", "")
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "value: empty, needs 1 to 255 bytes");
    assert_eq!(
        store.unique_holder("shop", "receipt", "R-1").await.unwrap(),
        None,
        "nothing written"
    );
}
