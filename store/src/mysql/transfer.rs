//! Export and import on MariaDB: the same JSON lines as a file's export, read through the
//! one line reader every engine shares (`seam/transfer/`). Records, intents, entities,
//! claimed values and tokens move; an import writes all or nothing (one transaction),
//! except the generation sequence, which it only ever raises.

use std::io::{BufRead, Write};

use idem_core::{Entity, Generation, IssuedToken, Record, RecordId, Timestamp, Token};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Row, TxOpts, Value};

use super::MySqlStore;
use super::entity::{entity_on, entity_row, holder_on};
use super::error::{DUPLICATE_KEY, code, database};
use super::intent::{INTENT_COLUMNS, import_intent, intent_at};
use super::row::{COLUMNS, Columns, get, id_at, key_values, record_at, signed};
use super::statements::{GET, exec_count};
use super::token::{entry_at, entry_on};
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::entity::EntityId;
use crate::seam::report::Transferred;
use crate::seam::transfer::view::RecordView;
use crate::seam::transfer::{
    BusinessLine, EntityView, IntentLine, Line, Lines, TokenLine, UniqueView, write_header,
    write_line,
};

/// The tables an import writes or reads, locked for its whole transaction: claims, which
/// insert into `idem_records` and draw from `idem_generation`, wait until it ends.
const LOCK_FOR_IMPORT: &str = "LOCK TABLES idem_records WRITE, idem_generation WRITE, \
       idem_meta WRITE, idem_intents WRITE, idem_entities WRITE, idem_unique WRITE, \
       idem_tokens WRITE, idem_token_intents WRITE";

/// Records an export reads per statement.
const EXPORT_PAGE: usize = 1_000;

fn count(row: &Row, index: usize) -> Result<u64, Error> {
    let value: Option<i64> = get(row, index, "export")?;
    Ok(value.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

impl MySqlStore {
    pub(super) async fn export_records(
        &self,
        out: &mut (dyn Write + Send),
    ) -> Result<Transferred, MaintainError> {
        let mut conn = self.conn("export").await?;
        // One snapshot for the header and every line.
        let mut options = TxOpts::default();
        options
            .with_isolation_level(IsolationLevel::RepeatableRead)
            .with_consistent_snapshot(true)
            .with_readonly(true);
        let mut txn = conn
            .start_transaction(options)
            .await
            .map_err(database("export"))?;
        let head: Option<Row> = txn
            .query_first(
                "SELECT COUNT(*), \
                        (SELECT CAST(next_not_cached_value - 1 AS SIGNED) FROM idem_generation), \
                        GREATEST(COALESCE(MAX(updated_at), 0), \
                                 COALESCE((SELECT value FROM idem_meta WHERE name = 'clock_floor'), 0)), \
                        (SELECT COUNT(*) FROM idem_entities), (SELECT COUNT(*) FROM idem_unique), \
                        (SELECT COUNT(*) FROM idem_tokens), (SELECT COUNT(*) FROM idem_intents) \
                   FROM idem_records",
            )
            .await
            .map_err(database("export"))?;
        let head = head.ok_or_else(|| Error::Corrupt {
            detail: "the export's counts returned no row".into(),
        })?;
        let counts = Transferred {
            records: count(&head, 0)?,
            entities: count(&head, 3)?,
            unique: count(&head, 4)?,
            tokens: count(&head, 5)?,
            intents: count(&head, 6)?,
        };
        let mut out = std::io::BufWriter::new(out);
        write_header(
            &mut out,
            Generation(count(&head, 1)?),
            Timestamp(count(&head, 2)?),
            counts,
        )?;
        // Pages in key order; a key after the last one written, part by part, so that the
        // primary key's index finds it.
        let page = format!(
            "SELECT tenant, operation, idem_key, {COLUMNS} FROM idem_records \
              WHERE tenant > ? OR (tenant = ? AND (operation > ? OR (operation = ? AND idem_key > ?))) \
              ORDER BY tenant, operation, idem_key LIMIT ?"
        );
        let mut after: [Value; 3] = [Value::from(""), Value::from(""), Value::from("")];
        let mut written = 0;
        loop {
            let [t, o, k] = after.clone();
            let rows: Vec<Row> = txn
                .exec(
                    &page,
                    vec![
                        t.clone(),
                        t,
                        o.clone(),
                        o,
                        k,
                        Value::from(EXPORT_PAGE as i64),
                    ],
                )
                .await
                .map_err(database("export"))?;
            for row in &rows {
                let id = id_at(row, 0)?;
                let record = record_at(row, 3, &id)?;
                write_line(&mut out, &RecordView::new(&id, &record))?;
                written += 1;
                after = key_values(&id);
            }
            if rows.len() < EXPORT_PAGE {
                break;
            }
        }
        let intents: Vec<Row> = txn
            .query(format!(
                "SELECT {INTENT_COLUMNS} FROM idem_intents ORDER BY idem_key"
            ))
            .await
            .map_err(database("export"))?;
        for row in &intents {
            write_line(&mut out, &IntentLine::new(&intent_at(row)?))?;
        }
        let entities: Vec<Row> = txn
            .query(
                "SELECT tenant, kind, id, state, version, updated_at FROM idem_entities \
                  ORDER BY tenant, kind, id",
            )
            .await
            .map_err(database("export"))?;
        for row in &entities {
            let (id, entity) = entity_row(row)?;
            write_line(
                &mut out,
                &BusinessLine::Entity(EntityView::new(&id, &entity)),
            )?;
        }
        let claimed: Vec<(String, String, String, String)> = txn
            .query(
                "SELECT tenant, scope, value, holder FROM idem_unique ORDER BY tenant, scope, value",
            )
            .await
            .map_err(database("export"))?;
        for (tenant, scope, value, holder) in &claimed {
            let view = UniqueView::new(tenant, scope, value, holder);
            write_line(&mut out, &BusinessLine::Unique(view))?;
        }
        let tokens: Vec<Row> = txn
            .query(
                "SELECT tenant, operation, token, issued_at, expires_at, intent_id FROM idem_tokens \
                  ORDER BY tenant, operation, token",
            )
            .await
            .map_err(database("export"))?;
        for row in &tokens {
            let id = id_at(row, 0)?;
            write_line(&mut out, &TokenLine::new(&id, &entry_at(row, 3)?))?;
        }
        out.flush().map_err(MaintainError::Export)?;
        txn.commit().await.map_err(database("export"))?;
        Ok(Transferred {
            records: written,
            entities: entities.len() as u64,
            unique: claimed.len() as u64,
            tokens: tokens.len() as u64,
            intents: intents.len() as u64,
        })
    }

    pub(super) async fn import_records(
        &self,
        input: &mut (dyn BufRead + Send),
    ) -> Result<Transferred, ImportError> {
        // A connection of its own, closed at the end: its table locks and its
        // transaction end with it, whatever becomes of this future.
        let mut conn = self
            .inner
            .hosts
            .connect_own()
            .await
            .map_err(database("import"))?;
        // Claims wait for the import: with the tables locked, a claim's statement waits
        // before it draws a generation, so none is drawn between the import's writes
        // and its raise of the sequence, and none is handed out twice. The locks hold
        // until the commit (`autocommit` off: LOCK TABLES would commit a transaction
        // started before it).
        let locked = async {
            conn.query_drop("SET autocommit = 0").await?;
            conn.query_drop(LOCK_FOR_IMPORT).await
        };
        let imported = match locked.await {
            Ok(()) => self.import_locked(&mut conn, input).await,
            Err(e) => Err(database("import")(e).into()),
        };
        let imported = match imported {
            Ok(transferred) => conn
                .query_drop("COMMIT")
                .await
                .map(|()| transferred)
                .map_err(|e| database("import")(e).into()),
            // Rolled back by the server as the connection closes.
            Err(e) => Err(e),
        };
        let _ = conn.disconnect().await;
        imported
    }

    /// The import's reads and writes, on a connection that holds [`LOCK_FOR_IMPORT`];
    /// its caller commits.
    async fn import_locked(
        &self,
        txn: &mut Conn,
        input: &mut (dyn BufRead + Send),
    ) -> Result<Transferred, ImportError> {
        let insert = format!(
            "INSERT INTO idem_records (tenant, operation, idem_key, revision, {COLUMNS}) \
             VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        );
        let mut lines = Lines::new(input);
        let mut highest = Generation(0);
        let mut floor = Timestamp(0);
        while let Some((number, line)) = lines.next_line()? {
            let bad = |message: String| ImportError::Line {
                line: number,
                message,
            };
            let (id, record) = match line {
                Line::Header {
                    generation,
                    clock_floor,
                } => {
                    highest = highest.max(generation);
                    floor = floor.max(clock_floor);
                    continue;
                }
                Line::Record(id, record) => (id, record),
                Line::Intent(intent) => {
                    import_intent(txn, &intent).await?.map_err(bad)?;
                    continue;
                }
                Line::Business(BusinessLine::Entity(view)) => {
                    let (id, entity) = view.to_entity().map_err(|m| bad(format!("entity: {m}")))?;
                    import_entity(txn, &id, &entity).await?.map_err(bad)?;
                    continue;
                }
                Line::Business(BusinessLine::Unique(view)) => {
                    let claim = view.to_claim().map_err(|m| bad(format!("unique: {m}")))?;
                    import_unique(txn, claim).await?.map_err(bad)?;
                    continue;
                }
                Line::Token(line) => {
                    let (token, id, entry) = line.to_token().map_err(bad)?;
                    import_token(txn, &token, &id, &entry).await?.map_err(bad)?;
                    floor = floor.max(entry.issued_at);
                    continue;
                }
            };
            let mut params = key_values(&id).to_vec();
            params.extend(Columns::of(&record)?.values());
            match exec_count(txn, &insert, params).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(DUPLICATE_KEY) => {
                    if existing(txn, &id).await?.as_ref() != Some(&record) {
                        return Err(bad(format!(
                            "{id}: the database already holds a different record under this id"
                        )));
                    }
                }
                Err(e) => return Err(database("import")(e).into()),
            }
            highest = highest.max(record.generation);
            floor = floor.max(record.updated_at);
        }
        let transferred = lines.finish()?;
        // Raised once the whole input was read and written, before the commit: a raise
        // that outlives a failed commit only leaves a gap (a sequence is not rolled
        // back), and no generation imported is handed out after it: claims wait on the
        // tables' locks meanwhile.
        raise_generation(txn, highest).await?;
        let floor = signed("clock_floor", floor.0)?;
        txn.exec_drop(
            "INSERT INTO idem_meta (name, value) VALUES ('clock_floor', ?) \
             ON DUPLICATE KEY UPDATE value = GREATEST(value, VALUES(value))",
            vec![Value::from(floor)],
        )
        .await
        .map_err(database("import"))?;
        Ok(transferred)
    }
}

/// Raises the generation sequence to at least `generation` (never lowers it).
async fn raise_generation<Q: Queryable>(txn: &mut Q, generation: Generation) -> Result<(), Error> {
    let value = signed("generation", generation.0)?;
    if value > 0 {
        // SETVAL takes constants only; the value is a number this engine formats.
        txn.query_drop(format!("SELECT SETVAL(idem_generation, {value})"))
            .await
            .map_err(database("import"))?;
    }
    Ok(())
}

async fn existing<Q: Queryable>(txn: &mut Q, id: &RecordId) -> Result<Option<Record>, Error> {
    let row: Option<Row> = txn
        .exec_first(GET, key_values(id).to_vec())
        .await
        .map_err(database("import"))?;
    row.map(|row| record_at(&row, 0, id)).transpose()
}

/// Writes an imported entity: `Ok(Err(message))` when the database holds a different one.
async fn import_entity<Q: Queryable>(
    txn: &mut Q,
    id: &EntityId,
    entity: &Entity,
) -> Result<Result<(), String>, Error> {
    let inserted = exec_count(
        txn,
        "INSERT INTO idem_entities (tenant, kind, id, state, version, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
        vec![
            Value::from(id.tenant()),
            Value::from(id.kind()),
            Value::from(id.id()),
            Value::from(entity.state.as_str()),
            Value::from(signed("version", entity.version)?),
            Value::from(signed("updated_at", entity.updated_at.0)?),
        ],
    )
    .await;
    match inserted {
        Ok(_) => return Ok(Ok(())),
        Err(e) if code(&e) == Some(DUPLICATE_KEY) => {}
        Err(e) => return Err(database("import")(e)),
    }
    Ok(if entity_on(txn, id).await?.as_ref() == Some(entity) {
        Ok(())
    } else {
        Err(format!(
            "entity {id}: the database already holds a different entity under this id"
        ))
    })
}

/// Writes an imported token, and points its intent's entry at it when it is the latest
/// issued for that intent: `Ok(Err(message))` when the database holds a different token
/// under its id.
async fn import_token<Q: Queryable>(
    txn: &mut Q,
    token: &Token,
    id: &RecordId,
    entry: &IssuedToken,
) -> Result<Result<(), String>, Error> {
    let (tenant, operation) = (id.tenant(), id.operation());
    let issued_at = signed("issued_at", entry.issued_at.0)?;
    let inserted = exec_count(
        txn,
        "INSERT INTO idem_tokens (tenant, operation, token, issued_at, expires_at, intent_id) \
         VALUES (?, ?, ?, ?, ?, ?)",
        vec![
            Value::from(tenant),
            Value::from(operation),
            Value::from(token.as_str()),
            Value::from(issued_at),
            Value::from(signed("expires_at", entry.expires_at.0)?),
            Value::from(entry.intent_id.as_deref()),
        ],
    )
    .await;
    match inserted {
        Ok(_) => {}
        Err(e) if code(&e) == Some(DUPLICATE_KEY) => {
            return Ok(if entry_on(txn, id).await?.as_ref() == Some(entry) {
                Ok(())
            } else {
                Err(format!(
                    "token {id}: the database already holds a different token under this id"
                ))
            });
        }
        Err(e) => return Err(database("import")(e)),
    }
    if let Some(intent_id) = &entry.intent_id {
        // The intent's entry names the latest token issued for it, as issuing leaves it.
        let current: Option<(String, Option<i64>)> = txn
            .exec_first(
                // No aliases: under LOCK TABLES a table is named as it was locked.
                "SELECT idem_token_intents.token, idem_tokens.issued_at FROM idem_token_intents \
                   LEFT JOIN idem_tokens ON idem_tokens.tenant = idem_token_intents.tenant \
                     AND idem_tokens.operation = idem_token_intents.operation \
                     AND idem_tokens.token = idem_token_intents.token \
                  WHERE idem_token_intents.tenant = ? AND idem_token_intents.operation = ? \
                    AND idem_token_intents.intent_id = ? FOR UPDATE",
                vec![
                    Value::from(tenant),
                    Value::from(operation),
                    Value::from(intent_id.as_str()),
                ],
            )
            .await
            .map_err(database("import"))?;
        let params = vec![
            Value::from(token.as_str()),
            Value::from(tenant),
            Value::from(operation),
            Value::from(intent_id.as_str()),
        ];
        match current {
            None => exec_count(
                txn,
                "INSERT INTO idem_token_intents (token, tenant, operation, intent_id) \
                 VALUES (?, ?, ?, ?)",
                params,
            )
            .await
            .map_err(database("import"))?,
            Some((_, issued)) if issued.unwrap_or(issued_at) <= issued_at => exec_count(
                txn,
                "UPDATE idem_token_intents SET token = ? \
                  WHERE tenant = ? AND operation = ? AND intent_id = ?",
                params,
            )
            .await
            .map_err(database("import"))?,
            Some(_) => 0,
        };
    }
    Ok(Ok(()))
}

/// Writes an imported claimed value: `Ok(Err(message))` when another holder has it.
async fn import_unique<Q: Queryable>(
    txn: &mut Q,
    (tenant, scope, value, holder): (&str, &str, &str, &str),
) -> Result<Result<(), String>, Error> {
    let inserted = exec_count(
        txn,
        "INSERT INTO idem_unique (tenant, scope, value, holder) VALUES (?, ?, ?, ?)",
        vec![
            Value::from(tenant),
            Value::from(scope),
            Value::from(value),
            Value::from(holder),
        ],
    )
    .await;
    match inserted {
        Ok(_) => return Ok(Ok(())),
        Err(e) if code(&e) == Some(DUPLICATE_KEY) => {}
        Err(e) => return Err(database("import")(e)),
    }
    Ok(
        if holder_on(txn, tenant, scope, value).await?.as_deref() == Some(holder) {
            Ok(())
        } else {
            Err(format!(
                "unique {tenant}/{scope}/{value}: the database already holds it for another holder"
            ))
        },
    )
}
