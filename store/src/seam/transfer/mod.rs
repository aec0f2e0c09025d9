//! The export format, the same on every engine: a header line, then one JSON object a
//! line (records, intents, entities, claimed values, tokens); how it is read and
//! written.

pub(crate) mod intent;
pub(crate) mod view;

use std::io::{self, BufRead, Write};

use idem_core::machine::{self, Entity};
use idem_core::{Generation, Intent, IssuedToken, Record, RecordId, Timestamp, Token, token};
use intent::IntentView;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use view::{RecordView, unsigned};

use crate::error::{ImportError, MaintainError, ViewError, view_error};
use crate::seam::entity::{EntityId, check_holder, check_unique};
use crate::seam::report::Transferred;

/// An entity as a line of an export: `{"entity":{"tenant":…,"kind":…,"id":…,"state":…,
/// "version":N,"updated_at":MS}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EntityView {
    tenant: String,
    kind: String,
    id: String,
    state: String,
    version: u64,
    updated_at: u64,
}

impl EntityView {
    pub(crate) fn new(id: &EntityId, entity: &Entity) -> EntityView {
        EntityView {
            tenant: id.tenant().into(),
            kind: id.kind().into(),
            id: id.id().into(),
            state: entity.state.clone(),
            version: entity.version,
            updated_at: entity.updated_at.as_millis(),
        }
    }

    /// The entity this line describes, checking every rule; the message names the field.
    pub(crate) fn to_entity(&self) -> Result<(EntityId, Entity), String> {
        let id = EntityId::new(&self.tenant, &self.kind, &self.id).map_err(|e| e.to_string())?;
        if self.state.is_empty()
            || self.state.len() > machine::MAX_STATE_LEN
            || self.state.chars().any(char::is_control)
        {
            return Err(format!(
                "state: {:?} must be 1 to {} bytes without control characters",
                self.state,
                machine::MAX_STATE_LEN
            ));
        }
        if self.version == 0 {
            return Err("version: 0, an entity that exists has made at least one move".into());
        }
        let entity = Entity {
            state: self.state.clone(),
            version: self.version,
            updated_at: Timestamp(self.updated_at),
        };
        Ok((id, entity))
    }
}

/// A claimed business value as a line of an export: `{"unique":{"tenant":…,"scope":…,
/// "value":…,"holder":…}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UniqueView {
    pub(crate) tenant: String,
    pub(crate) scope: String,
    pub(crate) value: String,
    pub(crate) holder: String,
}

impl UniqueView {
    /// The line of `value` in `scope`, held by `holder`.
    pub(crate) fn new(tenant: &str, scope: &str, value: &str, holder: &str) -> UniqueView {
        UniqueView {
            tenant: tenant.into(),
            scope: scope.into(),
            value: value.into(),
            holder: holder.into(),
        }
    }

    /// `(tenant, scope, value, holder)`, checking every rule; the message names the field.
    pub(crate) fn to_claim(&self) -> Result<(&str, &str, &str, &str), String> {
        check_unique(&self.tenant, &self.scope, &self.value)
            .and_then(|()| check_holder(&self.holder))
            .map_err(|e| e.to_string())?;
        Ok((&self.tenant, &self.scope, &self.value, &self.holder))
    }
}

/// One line of the business layers in an export: an entity or a claimed value.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum BusinessLine {
    /// An entity and its state.
    Entity(EntityView),
    /// A claimed value and its holder.
    Unique(UniqueView),
}

/// An issued token as a line of an export: `{"token":{"tenant":…,"operation":…,
/// "token":…,"issued_at":MS,"expires_at":MS,"intent_id":…}}` (`intent_id` only when
/// it was issued for one). Its use, if any, is an ordinary record line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenLine {
    pub(crate) token: TokenView,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenView {
    pub(crate) tenant: String,
    pub(crate) operation: String,
    pub(crate) token: String,
    pub(crate) issued_at: u64,
    pub(crate) expires_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) intent_id: Option<String>,
}

impl TokenLine {
    /// The line of the token `id` (`(tenant, operation, token)`) issued as `entry`.
    pub(crate) fn new(id: &RecordId, entry: &IssuedToken) -> TokenLine {
        TokenLine {
            token: TokenView {
                tenant: id.tenant().into(),
                operation: id.operation().into(),
                token: id.key().into(),
                issued_at: entry.issued_at.as_millis(),
                expires_at: entry.expires_at.as_millis(),
                intent_id: entry.intent_id.clone(),
            },
        }
    }

    /// The token, its id and its entry, checking every rule; the message names the field.
    pub(crate) fn to_token(&self) -> Result<(Token, RecordId, IssuedToken), String> {
        let view = &self.token;
        let token = Token::parse(&view.token).map_err(|e| format!("token: {e}"))?;
        let id = RecordId::new(&view.tenant, &view.operation, token.as_str())
            .map_err(|e| format!("token: {e}"))?;
        if let Some(intent_id) = &view.intent_id {
            token::check_intent_id(intent_id).map_err(|e| format!("token: {e}"))?;
        }
        if view.expires_at <= view.issued_at {
            return Err(format!(
                "token: expires_at {} is not after issued_at {}",
                view.expires_at, view.issued_at
            ));
        }
        let entry = IssuedToken {
            issued_at: Timestamp(view.issued_at),
            expires_at: Timestamp(view.expires_at),
            intent_id: view.intent_id.clone(),
        };
        Ok((token, id, entry))
    }
}

/// The version of the export format, in the header's `idem_export` field: 2 since
/// exports carry the outbox's intents, 3 since they carry entities, claimed values and
/// one-time tokens.
/// Versions 1 and 2 are read too.
pub(crate) const EXPORT_VERSION: u64 = 3;

/// The first line of an export.
#[derive(Debug, Serialize)]
struct Header {
    idem_export: u64,
    generation: u64,
    clock_floor: u64,
    records: u64,
    intents: u64,
    entities: u64,
    unique: u64,
    tokens: u64,
}

/// An intent line of an export.
#[derive(Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentLine {
    intent: IntentView,
}

impl IntentLine {
    /// The line of `intent`.
    pub(crate) fn new(intent: &Intent) -> IntentLine {
        IntentLine {
            intent: IntentView::new(intent),
        }
    }
}

/// One line of an export, read and checked on its own.
pub(crate) enum Line {
    /// The header: what the export's store had handed out and the time it had reached.
    Header {
        /// The generation counter.
        generation: Generation,
        /// The clock floor (0 before version 2).
        clock_floor: Timestamp,
    },
    /// A record of the receiver.
    Record(RecordId, Record),
    /// An intent of the outbox.
    Intent(Intent),
    /// An entity or a claimed business value.
    Business(BusinessLine),
    /// An issued one-time token.
    Token(TokenLine),
}

/// The lines of an export, in order: the header first if any, then records, intents,
/// entities and claimed values, tokens; [`Lines::finish`] checks the counts the header
/// announced. Every engine's import reads through it.
pub(crate) struct Lines<R> {
    input: io::Lines<R>,
    number: u64,
    announced: Option<Announced>,
    found: Transferred,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R) -> Lines<R> {
        Lines {
            input: input.lines(),
            number: 0,
            announced: None,
            found: Transferred::default(),
        }
    }

    /// The next line and its number, or `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, Line)>, ImportError> {
        loop {
            let Some(line) = self.input.next() else {
                return Ok(None);
            };
            self.number += 1;
            let number = self.number;
            let bad = |message: String| ImportError::Line {
                line: number,
                message,
            };
            let line = line.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let object = match serde_json::from_str::<Value>(&line) {
                Ok(Value::Object(object)) => object,
                Ok(_) => return Err(bad("expected a JSON object".into())),
                Err(e) => return Err(bad(format!("not JSON: {e}"))),
            };
            let found = &mut self.found;
            let business = found.entities + found.unique;
            if object.contains_key("idem_export") {
                if found.records > 0
                    || found.intents > 0
                    || business > 0
                    || self.announced.is_some()
                {
                    return Err(bad("a header line may only come first".into()));
                }
                let header = read_header(&object).map_err(|e| bad(e.to_string()))?;
                let line = Line::Header {
                    generation: Generation(header.generation),
                    clock_floor: Timestamp(header.clock_floor.unwrap_or(0)),
                };
                self.announced = Some(header);
                return Ok(Some((number, line)));
            }
            if object.contains_key("token") {
                let line: TokenLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(e.to_string()))?;
                found.tokens += 1;
                return Ok(Some((number, Line::Token(line))));
            }
            if found.tokens > 0 {
                return Err(bad("a line after the tokens: tokens come last".into()));
            }
            if object.contains_key("entity") || object.contains_key("unique") {
                let line: BusinessLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(e.to_string()))?;
                match line {
                    BusinessLine::Entity(_) => found.entities += 1,
                    BusinessLine::Unique(_) => found.unique += 1,
                }
                return Ok(Some((number, Line::Business(line))));
            }
            if object.contains_key("intent") {
                if business > 0 {
                    return Err(bad(
                        "an intent line after the entities: intents come first".into()
                    ));
                }
                let line: IntentLine = serde_json::from_value(Value::Object(object))
                    .map_err(|e| bad(format!("intent: {e}")))?;
                let intent = line
                    .intent
                    .to_intent()
                    .map_err(|e| bad(format!("intent {e}")))?;
                found.intents += 1;
                return Ok(Some((number, Line::Intent(intent))));
            }
            if found.intents + business > 0 {
                return Err(bad(
                    "a record line after the intents or entities: records come first".into(),
                ));
            }
            let (id, record) = RecordView::from_json(&object)
                .and_then(|view| view.to_record())
                .map_err(|e| bad(e.to_string()))?;
            found.records += 1;
            return Ok(Some((number, Line::Record(id, record))));
        }
    }

    /// What the lines held, once all are read: refused when a header announced other
    /// counts (a truncated export).
    pub(crate) fn finish(self) -> Result<Transferred, ImportError> {
        let found = self.found;
        if let Some(header) = self.announced {
            let announced = Transferred {
                records: header.records,
                intents: header.intents.unwrap_or(0),
                entities: header.entities.unwrap_or(0),
                unique: header.unique.unwrap_or(0),
                tokens: header.tokens.unwrap_or(0),
            };
            if announced != found {
                return Err(ImportError::Line {
                    line: self.number,
                    message: format!(
                        "the header announces {} records, {} intents, {} entities, {} claimed values and {} tokens, the input holds {}, {}, {}, {} and {} (truncated?)",
                        announced.records,
                        announced.intents,
                        announced.entities,
                        announced.unique,
                        announced.tokens,
                        found.records,
                        found.intents,
                        found.entities,
                        found.unique,
                        found.tokens
                    ),
                });
            }
        }
        Ok(found)
    }
}

/// Writes an export's header line.
pub(crate) fn write_header(
    out: &mut impl Write,
    generation: Generation,
    clock_floor: Timestamp,
    counts: Transferred,
) -> Result<(), MaintainError> {
    let header = Header {
        idem_export: EXPORT_VERSION,
        generation: generation.0,
        clock_floor: clock_floor.as_millis(),
        records: counts.records,
        intents: counts.intents,
        entities: counts.entities,
        unique: counts.unique,
        tokens: counts.tokens,
    };
    let written = MaintainError::Export;
    serde_json::to_writer(&mut *out, &header).map_err(|e| written(io::Error::from(e)))?;
    out.write_all(b"\n").map_err(written)
}

/// Writes one line of an export.
pub(crate) fn write_line(out: &mut impl Write, line: &impl Serialize) -> Result<(), MaintainError> {
    let written = MaintainError::Export;
    serde_json::to_writer(&mut *out, line).map_err(|e| written(io::Error::from(e)))?;
    out.write_all(b"\n").map_err(written)
}

/// What a header line announces.
struct Announced {
    generation: u64,
    /// Version 2 and later.
    clock_floor: Option<u64>,
    records: u64,
    /// Version 2 and later.
    intents: Option<u64>,
    /// Version 3 and later.
    entities: Option<u64>,
    /// Version 3 and later.
    unique: Option<u64>,
    /// Version 3 and later.
    tokens: Option<u64>,
}

fn read_header(object: &Map<String, Value>) -> Result<Announced, ViewError> {
    let version = unsigned(object, "idem_export")?;
    let fields: &[&str] = match version {
        1 => &["idem_export", "generation", "records"],
        2 => &[
            "idem_export",
            "generation",
            "clock_floor",
            "records",
            "intents",
        ],
        EXPORT_VERSION => &[
            "idem_export",
            "generation",
            "clock_floor",
            "records",
            "intents",
            "entities",
            "unique",
            "tokens",
        ],
        _ => {
            return Err(view_error(
                "idem_export",
                format!(
                    "export version {version}, this build reads versions 1 to {EXPORT_VERSION}"
                ),
            ));
        }
    };
    if let Some(unknown) = object.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(view_error("header", format!("unknown field {unknown:?}")));
    }
    Ok(Announced {
        generation: unsigned(object, "generation")?,
        clock_floor: (version >= 2)
            .then(|| unsigned(object, "clock_floor"))
            .transpose()?,
        records: unsigned(object, "records")?,
        intents: (version >= 2)
            .then(|| unsigned(object, "intents"))
            .transpose()?,
        entities: (version >= 3)
            .then(|| unsigned(object, "entities"))
            .transpose()?,
        unique: (version >= 3)
            .then(|| unsigned(object, "unique"))
            .transpose()?,
        tokens: (version >= 3)
            .then(|| unsigned(object, "tokens"))
            .transpose()?,
    })
}
