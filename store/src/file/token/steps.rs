//! One-time tokens: issuing them and admitting their first use (their sweep is with the
//! other sweeps, in `maintain/steps.rs`).
//!
//! A token's entry lives in `idem.tokens` under the id bytes of `(tenant, operation,
//! token)`; its use is an ordinary record in `idem.records` under the same bytes. A
//! consume reads both in the write transaction that runs the protocol's `begin`
//! ([`idem_core::token::admit`], then the claim), so two consumers can never both pass
//! the check: the second sees the first one's record. Nothing deletes a token when it
//! is used: a consume whose work fails rolls back its claim and leaves the token as it
//! was, consumable.

use idem_core::protocol::Decision;
use idem_core::token::{self, Earlier, Issue};
use idem_core::{
    Config, Fingerprint, IssuedToken, Record, RecordId, Timestamp, Token, TokenRefusal, Write,
};
use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::error::Error;
use crate::file::group::Step;
use crate::file::schema::{self as tables, TOKEN_EXPIRY, TOKEN_INTENTS, TOKENS, Tables, open_read};
use crate::file::two_phase::steps as two_phase;
use crate::file::writer::Writer;
use crate::seam::report::Consumed;
use crate::seam::transfer::TokenLine;

/// Issues a token for `(tenant, operation)`, or answers the one issued earlier for the
/// same intent id while it is unused and unexpired.
// The arguments of `Store::issue_token`, plus the writer and the config it holds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn issue(
    writer: &Writer,
    config: &Config,
    tenant: &str,
    operation: &str,
    ttl_ms: u64,
    intent_id: Option<&str>,
    random: [u8; 16],
    now: Timestamp,
) -> Result<Issue, Error> {
    // Input rules first, before any transaction: bad input changes nothing.
    token::check_ttl(ttl_ms, config)?;
    let intent_key = match intent_id {
        Some(intent_id) => {
            token::check_intent_id(intent_id)?;
            Some(RecordId::new(tenant, operation, intent_id)?.to_key_bytes())
        }
        None => {
            RecordId::new(tenant, operation, "-")?;
            None
        }
    };
    writer.transact("issue_token", |txn, tables| {
        let now = tables.effective(now)?;
        let mut intents = txn.open_table(TOKEN_INTENTS)?;
        let earlier_token = match &intent_key {
            Some(key) => match intents.get(key.as_slice())? {
                Some(bytes) => {
                    Some(
                        Token::decode(bytes.value()).map_err(|source| Error::Decode {
                            what: format!("token of intent {}", tables::describe_key(key)),
                            source,
                        })?,
                    )
                }
                None => None,
            },
            None => None,
        };
        let earlier = match &earlier_token {
            Some(token) => {
                let id_key = RecordId::new(tenant, operation, token.as_str())?.to_key_bytes();
                Some((
                    token,
                    tables.token(&id_key)?,
                    tables.get(&id_key)?.is_some(),
                ))
            }
            None => None,
        };
        let issue = token::issue(
            earlier.as_ref().map(|(token, entry, used)| Earlier {
                token,
                entry: entry.as_ref(),
                used: *used,
            }),
            ttl_ms,
            intent_id,
            random,
            now,
            config,
        )?;
        if let Issue::New { token, entry } = &issue {
            let id_key = RecordId::new(tenant, operation, token.as_str())?.to_key_bytes();
            if tables.token(&id_key)?.is_some() || tables.get(&id_key)?.is_some() {
                return Err(Error::TokenTaken);
            }
            tables.put_token(&id_key, entry)?;
            txn.open_table(TOKEN_EXPIRY)?
                .insert(tables::timed_key(entry.expires_at, &id_key).as_slice(), ())?;
            if let Some(key) = &intent_key {
                intents.insert(key.as_slice(), token.encode().as_slice())?;
            }
            tables.raise_floor(now)?;
        }
        let new = matches!(issue, Issue::New { .. });
        Ok((issue, new))
    })
}

/// The two-phase consume as a group-commit step: admit the token, then the protocol's
/// begin, in the transaction that applies the begin's write.
pub(crate) fn consume(id_key: Vec<u8>, fingerprint: Fingerprint) -> impl Step<Consumed<Decision>> {
    let mut begin = two_phase::begin(fingerprint);
    move |tables: &mut Tables<'_>, current, config: &Config, now| {
        let entry = tables.token(&id_key)?;
        if let Err(refusal) = token::admit(entry.as_ref(), current, now, config) {
            return Ok((Write::Nothing, Consumed::Refused(refusal)));
        }
        let (write, decision) = begin(tables, current, config, now)?;
        Ok((write, Consumed::Admitted(decision)))
    }
}

/// The admission of an atomic consume ([`crate::Store::consume_execute`]): the token's
/// entry in the transaction that claims its use, so two consumers never both pass.
pub(crate) fn admit(
    tables: &mut Tables<'_>,
    id_key: &[u8],
    current: Option<&Record>,
    now: Timestamp,
    config: &Config,
) -> Result<Result<(), TokenRefusal>, Error> {
    let entry = tables.token(id_key)?;
    Ok(token::admit(entry.as_ref(), current, now, config))
}

/// The issued token under `id`, from a read snapshot.
pub(crate) fn get(writer: &Writer, id: &RecordId) -> Result<Option<IssuedToken>, Error> {
    let db = writer.read();
    let txn = db.begin_read()?;
    match open_read(&txn, TOKENS)? {
        Some(tokens) => tables::read_token(&tokens, &id.to_key_bytes()),
        None => Ok(None),
    }
}

/// Verifies the tokens' tables for [`crate::Store::check`]: every entry decodes under a
/// valid token id and has its expiry entry, the expiry index holds nothing else, and
/// every intent's entry names a token. Reports each problem to `problem`.
pub(crate) fn check(txn: &ReadTransaction, problem: &mut dyn FnMut(String)) -> Result<(), Error> {
    let (Some(tokens), Some(expiry)) = (open_read(txn, TOKENS)?, open_read(txn, TOKEN_EXPIRY)?)
    else {
        // A file written before tokens existed, or one where none was ever issued.
        return Ok(());
    };
    let mut count = 0u64;
    for entry in tokens.iter()? {
        let (key, _) = entry?;
        count += 1;
        let id_key = key.value();
        let name = tables::describe_key(id_key);
        match tables::decode_id(id_key) {
            Ok(id) if Token::parse(id.key()).is_err() => {
                problem(format!("token entry {name}: its key is not a token"));
            }
            Ok(_) => {}
            Err(e) => problem(e.to_string()),
        }
        match tables::read_token(&tokens, id_key) {
            Ok(Some(issued)) => {
                if expiry
                    .get(tables::timed_key(issued.expires_at, id_key).as_slice())?
                    .is_none()
                {
                    problem(format!("token {name}: missing from the token expiry index"));
                }
            }
            Ok(None) => {}
            Err(e) => problem(e.to_string()),
        }
    }
    let len = expiry.len()?;
    if len != count {
        problem(format!(
            "token expiry index holds {len} entries for {count} tokens"
        ));
    }
    if let Some(intents) = open_read(txn, TOKEN_INTENTS)? {
        for entry in intents.iter()? {
            let (key, value) = entry?;
            if let Err(e) = Token::decode(value.value()) {
                problem(format!(
                    "token of intent {}: {e}",
                    tables::describe_key(key.value())
                ));
            }
        }
    }
    Ok(())
}

/// The number of issued tokens in the file.
pub(crate) fn count(txn: &ReadTransaction) -> Result<u64, Error> {
    match open_read(txn, TOKENS)? {
        Some(tokens) => Ok(tokens.len()?),
        None => Ok(0),
    }
}

/// Calls `line` with every issued token, in key order.
pub(crate) fn for_each<E: From<Error>>(
    txn: &ReadTransaction,
    mut line: impl FnMut(TokenLine) -> Result<(), E>,
) -> Result<(), E> {
    let Some(tokens) = open_read(txn, TOKENS)? else {
        return Ok(());
    };
    for entry in tokens.iter().map_err(Error::from)? {
        let (key, _) = entry.map_err(Error::from)?;
        let id = tables::decode_id(key.value())?;
        let Some(issued) = tables::read_token(&tokens, key.value())? else {
            continue;
        };
        line(TokenLine::new(&id, &issued))?;
    }
    Ok(())
}

/// Writes an imported token with its expiry entry and, when it was issued for an
/// intent, the intent's entry (pointing at the latest token issued for it, as issuing
/// leaves it). `Ok(Err(message))` when the line breaks a rule or the store holds a
/// different token under its key (the same is accepted as is).
pub(crate) fn import(
    txn: &WriteTransaction,
    tables: &mut Tables<'_>,
    line: &TokenLine,
) -> Result<Result<(), String>, Error> {
    let view = &line.token;
    let (token, id, entry) = match line.to_token() {
        Ok(found) => found,
        Err(message) => return Ok(Err(message)),
    };
    let id_key = id.to_key_bytes();
    match tables.token(&id_key)? {
        Some(existing) if existing == entry => return Ok(Ok(())),
        Some(_) => {
            return Ok(Err(format!(
                "token {id}: the store already holds a different token under this id"
            )));
        }
        None => {}
    }
    tables.put_token(&id_key, &entry)?;
    txn.open_table(TOKEN_EXPIRY)?
        .insert(tables::timed_key(entry.expires_at, &id_key).as_slice(), ())?;
    tables.raise_floor(entry.issued_at)?;
    if let Some(intent_id) = &entry.intent_id {
        let intent_key = RecordId::new(&view.tenant, &view.operation, intent_id)
            .map_err(Error::from)?
            .to_key_bytes();
        let mut intents = txn.open_table(TOKEN_INTENTS)?;
        let mapped = match intents.get(intent_key.as_slice())? {
            Some(bytes) => Some(
                Token::decode(bytes.value()).map_err(|source| Error::Decode {
                    what: format!("token of intent {}", tables::describe_key(&intent_key)),
                    source,
                })?,
            ),
            None => None,
        };
        let later = match &mapped {
            None => true,
            Some(other) => {
                let other_key =
                    RecordId::new(&view.tenant, &view.operation, other.as_str())?.to_key_bytes();
                tables
                    .token(&other_key)?
                    .is_none_or(|other| other.issued_at <= entry.issued_at)
            }
        };
        if later {
            intents.insert(intent_key.as_slice(), token.encode().as_slice())?;
        }
    }
    Ok(Ok(()))
}
