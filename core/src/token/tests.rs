//! Unit tests of the token rules and golden bytes of their persisted encodings.

use alloc::string::{String, ToString};

use super::*;
use crate::{Fingerprint, Generation, Outcome, Status, Verdict};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

fn config() -> Config {
    Config {
        success_retention_ms: 10_000,
        failure_retention_ms: 8_000,
        ..Config::default()
    }
}

fn entry(expires_at: u64) -> IssuedToken {
    IssuedToken {
        issued_at: Timestamp(1_000),
        expires_at: Timestamp(expires_at),
        intent_id: None,
    }
}

fn settled(expires_at: u64) -> Record {
    Record {
        fingerprint: Fingerprint([1; 32]),
        generation: Generation(1),
        created_at: Timestamp(1_000),
        updated_at: Timestamp(1_000),
        status: Status::Settled {
            verdict: Verdict::Succeeded,
            outcome: Outcome::new(200, "ok"),
            completed_at: Timestamp(1_000),
            expires_at: Timestamp(expires_at),
        },
    }
}

#[test]
fn token_text_is_url_safe_base64_of_the_random_bits() {
    // base64url of the bytes 00 01 .. 0f, without padding.
    let bytes: [u8; 16] = core::array::from_fn(|i| i as u8);
    assert_eq!(Token::from_random(bytes).as_str(), "AAECAwQFBgcICQoLDA0ODw");
    assert_eq!(
        Token::from_random([0xff; 16]).as_str(),
        "_____________________w"
    );
    assert_eq!(
        Token::from_random([0; 16]).as_str(),
        "AAAAAAAAAAAAAAAAAAAAAA"
    );
    for random in [bytes, [0xff; 16], [0; 16], [0x5a; 16]] {
        let token = Token::from_random(random);
        assert_eq!(token.as_str().len(), TOKEN_LEN);
        assert_eq!(Token::parse(token.as_str()).unwrap(), token);
    }
}

#[test]
fn malformed_tokens_name_the_field_and_the_rule() {
    let cases = [
        (
            "short",
            "token: 5 characters, expected 22 (128 bits in URL-safe base64 without padding)",
        ),
        (
            "AAECAwQFBgcICQoLDA0ODw=",
            "token: 23 characters, expected 22 (128 bits in URL-safe base64 without padding)",
        ),
        (
            "AAECAwQF+gcICQoLDA0ODw",
            "token: '+' at offset 8 is outside the URL-safe base64 alphabet (A-Z a-z 0-9 - _)",
        ),
        (
            "AAECAwQFBgcICQoLDA0ODx",
            "token: the last character sets bits beyond 128 (it must be one of A Q g w)",
        ),
    ];
    for (text, message) in cases {
        let err = Token::parse(text).unwrap_err();
        assert_eq!(err.to_string(), message);
        assert_eq!(err.field(), "token");
    }
    // 22 characters but more bytes: counted in characters, refused on length.
    let wide = "é".repeat(11);
    assert!(matches!(
        Token::parse(&wide),
        Err(TokenError::Length { chars: 11 })
    ));
    let wide = "AAECAwQFBgcICQoLDA0OD\u{e9}";
    assert!(matches!(
        Token::parse(wide),
        Err(TokenError::Length { chars: 22 })
    ));
}

#[test]
fn ttl_must_be_positive_and_within_the_retention() {
    let config = config();
    assert_eq!(max_ttl_ms(&config), 8_000);
    assert_eq!(check_ttl(0, &config), Err(TokenError::ZeroTtl));
    assert_eq!(check_ttl(1, &config), Ok(()));
    assert_eq!(check_ttl(8_000, &config), Ok(()));
    let err = check_ttl(8_001, &config).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ttl: 8001 ms, at most the store's retention of 8000 ms (the record of a token's use must outlive the token)"
    );
    assert_eq!(
        TokenError::ZeroTtl.to_string(),
        "ttl: 0 ms, must be at least 1 ms"
    );
    assert!(check_intent_id("order-1").is_ok());
    assert_eq!(
        check_intent_id("").unwrap_err().to_string(),
        "intent: 0 bytes, needs 1 to 255 bytes of printable ASCII (0x20-0x7E)"
    );
    assert!(check_intent_id("a\nb").is_err());
    assert!(check_intent_id(&"x".repeat(256)).is_err());
}

#[test]
fn admit_follows_the_table() {
    // Without tombstones, a record past its retention stands for nothing.
    let config = Config {
        tombstone_retention_ms: 0,
        ..config()
    };
    let admit = |entry: Option<&IssuedToken>, record: Option<&Record>, now: Timestamp| {
        admit(entry, record, now, &config)
    };
    let now = Timestamp(5_000);
    let live = entry(6_000);
    let expired = entry(5_000);
    // No live record: the entry decides.
    assert_eq!(admit(None, None, now), Err(TokenRefusal::NotIssued));
    assert_eq!(admit(Some(&live), None, now), Ok(()));
    assert_eq!(
        admit(Some(&expired), None, now),
        Err(TokenRefusal::Expired {
            expires_at: Timestamp(5_000)
        })
    );
    // A live record of a use: the protocol decides (replay, conflict, ...), whatever
    // the entry says, since the use came before the expiry.
    for entry in [None, Some(&live), Some(&expired)] {
        assert_eq!(admit(entry, Some(&settled(9_000)), now), Ok(()));
    }
    // A record past its retention is no use any more: it never admits a second claim.
    assert_eq!(
        admit(None, Some(&settled(5_000)), now),
        Err(TokenRefusal::NotIssued)
    );
    assert!(matches!(
        admit(Some(&expired), Some(&settled(4_000)), now),
        Err(TokenRefusal::Expired { .. })
    ));
}

#[test]
fn a_record_past_its_retention_admits_while_its_tombstone_lasts() {
    // Tombstones kept 3 s past a record's retention: the used token's retry is answered
    // by the protocol (Forgotten), never "expired before its first use".
    let config = Config {
        tombstone_retention_ms: 3_000,
        ..config()
    };
    let expired = entry(4_000);
    let used = settled(5_000);
    for now in [Timestamp(5_000), Timestamp(7_999)] {
        assert_eq!(admit(Some(&expired), Some(&used), now, &config), Ok(()));
        assert_eq!(admit(None, Some(&used), now, &config), Ok(()));
    }
    // Past the tombstone's time too, the entry decides again.
    let now = Timestamp(8_000);
    assert_eq!(
        admit(Some(&expired), Some(&used), now, &config),
        Err(TokenRefusal::Expired {
            expires_at: Timestamp(4_000)
        })
    );
    assert_eq!(
        admit(None, Some(&used), now, &config),
        Err(TokenRefusal::NotIssued)
    );
}

#[test]
fn issue_with_an_intent_returns_the_unused_unexpired_token() {
    let config = config();
    let now = Timestamp(2_000);
    let first = issue(None, 5_000, Some("order-1"), [7; 16], now, &config).unwrap();
    let Issue::New { token, entry } = first.clone() else {
        panic!("a first issue is new: {first:?}");
    };
    assert_eq!(entry.expires_at, Timestamp(7_000));
    assert_eq!(entry.intent_id.as_deref(), Some("order-1"));
    let earlier = |used| Earlier {
        token: &token,
        entry: Some(&entry),
        used,
    };
    // The reply was lost; issuing again answers the same token.
    let again = issue(
        Some(earlier(false)),
        5_000,
        Some("order-1"),
        [8; 16],
        Timestamp(6_999),
        &config,
    )
    .unwrap();
    assert_eq!(
        again,
        Issue::Existing {
            token: token.clone(),
            entry: entry.clone()
        }
    );
    // Used, expired or swept: a new one.
    for (earlier, at) in [
        (earlier(true), 3_000),
        (earlier(false), 7_000),
        (
            Earlier {
                token: &token,
                entry: None,
                used: false,
            },
            3_000,
        ),
    ] {
        let next = issue(
            Some(earlier),
            5_000,
            Some("order-1"),
            [8; 16],
            Timestamp(at),
            &config,
        )
        .unwrap();
        assert!(matches!(next, Issue::New { .. }), "{next:?}");
        assert_ne!(next.token(), &token);
    }
    // Bad input is refused before anything else.
    assert_eq!(
        issue(
            Some(earlier(false)),
            0,
            Some("order-1"),
            [8; 16],
            now,
            &config
        ),
        Err(TokenError::ZeroTtl)
    );
    assert!(matches!(
        issue(None, 5_000, Some(""), [8; 16], now, &config),
        Err(TokenError::IntentId { len: 0 })
    ));
}

/// Golden bytes: a change here is a change of the file format, and needs a new format
/// version and a migration, not an edit of the expected text.
#[test]
fn token_bytes_are_frozen() {
    let plain = IssuedToken {
        issued_at: Timestamp(1_700_000_000_000),
        expires_at: Timestamp(1_700_000_060_000),
        intent_id: None,
    };
    assert_eq!(hex(&plain.encode()), "0180d095ffbc31e0a499ffbc3100");
    let with_intent = IssuedToken {
        intent_id: Some("order-1".to_string()),
        ..plain.clone()
    };
    assert_eq!(
        hex(&with_intent.encode()),
        "0180d095ffbc31e0a499ffbc3101076f726465722d31"
    );
    for value in [plain, with_intent] {
        assert_eq!(IssuedToken::decode(&value.encode()).unwrap(), value);
    }
    let token = Token::from_random([0; 16]);
    assert_eq!(
        hex(&token.encode()),
        "011641414141414141414141414141414141414141414141"
    );
    assert_eq!(Token::decode(&token.encode()).unwrap(), token);
    let not_a_token = encoding::encode(&"short");
    assert_eq!(
        Token::decode(&not_a_token),
        Err(DecodeError::Invalid { what: "token" })
    );
    for bytes in [&[][..], &[2, 0][..], &[1, 0xff][..]] {
        assert!(IssuedToken::decode(bytes).is_err());
        assert!(Token::decode(bytes).is_err());
    }
    // Every truncation of valid bytes is an error, never a panic.
    let bytes = IssuedToken {
        issued_at: Timestamp(1),
        expires_at: Timestamp(2),
        intent_id: Some("x".to_string()),
    }
    .encode();
    for n in 0..bytes.len() {
        assert!(IssuedToken::decode(&bytes[..n]).is_err(), "{n} bytes");
    }
}
