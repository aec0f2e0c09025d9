//! Export and import on PostgreSQL: the same JSON lines as a file's export, read through
//! the one line reader both engines share (`seam/transfer/`). Records, intents,
//! entities, claimed values and tokens move; an import writes all or nothing.

use std::io::{BufRead, Write};

use idem_core::{Entity, Generation, IssuedToken, RecordId, Timestamp, Token};
use tokio_postgres::IsolationLevel;

use super::PgStore;
use super::entity::{entity_on, entity_row, holder_on};
use super::error::database;
use super::intent::{INTENT_COLUMNS, import_intent, intent_at};
use super::row::{Columns, columns, id_at, record_at, signed};
use super::token::{entry_at, entry_on};
use crate::error::{Error, ImportError, MaintainError};
use crate::seam::entity::EntityId;
use crate::seam::report::Transferred;
use crate::seam::transfer::view::RecordView;
use crate::seam::transfer::{
    BusinessLine, EntityView, IntentLine, Line, Lines, TokenLine, UniqueView, write_header,
    write_line,
};

/// Records an export reads per statement.
const EXPORT_PAGE: i64 = 1_000;

impl PgStore {
    pub(super) async fn export_records(
        &self,
        out: &mut (dyn Write + Send),
    ) -> Result<Transferred, MaintainError> {
        let mut connection = self.connection("export").await?;
        // One snapshot for the header and every line.
        let txn = connection
            .client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(database("export"))?;
        let head = txn
            .query_one(
                "SELECT count(*), \
                        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM idem_generation), \
                        GREATEST(max(updated_at), \
                                 (SELECT value FROM idem_meta WHERE name = 'clock_floor'), 0), \
                        (SELECT count(*) FROM idem_entities), (SELECT count(*) FROM idem_unique), \
                        (SELECT count(*) FROM idem_tokens), (SELECT count(*) FROM idem_intents) \
                   FROM idem_records",
                &[],
            )
            .await
            .map_err(database("export"))?;
        let number = |i: usize| -> Result<u64, Error> {
            let value: i64 = head.try_get(i).map_err(database("export"))?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        let counts = Transferred {
            records: number(0)?,
            entities: number(3)?,
            unique: number(4)?,
            tokens: number(5)?,
            intents: number(6)?,
        };
        let mut out = std::io::BufWriter::new(out);
        write_header(
            &mut out,
            Generation(number(1)?),
            Timestamp(number(2)?),
            counts,
        )?;
        let page = format!(
            "SELECT tenant, operation, key, {} FROM idem_records \
              WHERE (tenant, operation, key) > ($1, $2, $3) \
              ORDER BY tenant, operation, key LIMIT $4",
            columns("")
        );
        let mut after = (String::new(), String::new(), String::new());
        let mut written = 0;
        loop {
            let rows = txn
                .query(&page, &[&after.0, &after.1, &after.2, &EXPORT_PAGE])
                .await
                .map_err(database("export"))?;
            for row in &rows {
                let id = id_at(row, 0)?;
                let record = record_at(row, 3, &id)?;
                write_line(&mut out, &RecordView::new(&id, &record))?;
                written += 1;
                after = (
                    id.tenant().to_owned(),
                    id.operation().to_owned(),
                    id.key().to_owned(),
                );
            }
            if rows.len() < EXPORT_PAGE as usize {
                break;
            }
        }
        let intents = txn
            .query(
                &format!("SELECT {INTENT_COLUMNS} FROM idem_intents ORDER BY key"),
                &[],
            )
            .await
            .map_err(database("export"))?;
        for row in &intents {
            write_line(&mut out, &IntentLine::new(&intent_at(row)?))?;
        }
        let entities = txn
            .query(
                "SELECT tenant, kind, id, state, version, updated_at FROM idem_entities \
                  ORDER BY tenant, kind, id",
                &[],
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
        let claimed = txn
            .query(
                "SELECT tenant, scope, value, holder FROM idem_unique ORDER BY tenant, scope, value",
                &[],
            )
            .await
            .map_err(database("export"))?;
        for row in &claimed {
            let part = |i| row.try_get::<_, String>(i).map_err(database("export"));
            let view = UniqueView::new(&part(0)?, &part(1)?, &part(2)?, &part(3)?);
            write_line(&mut out, &BusinessLine::Unique(view))?;
        }
        let tokens = txn
            .query(
                "SELECT tenant, operation, token, issued_at, expires_at, intent_id FROM idem_tokens \
                  ORDER BY tenant, operation, token",
                &[],
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
        let mut connection = self.connection("import").await?;
        let txn = connection
            .client
            .transaction()
            .await
            .map_err(database("import"))?;
        // Claims wait for the import: a claim's statement takes its lock on the records'
        // table before it draws a generation, so none is drawn between the read of the
        // sequence and its raise below, and none can be handed out twice.
        txn.batch_execute("LOCK TABLE idem_records IN SHARE ROW EXCLUSIVE MODE")
            .await
            .map_err(database("import"))?;
        let insert = format!(
            "INSERT INTO idem_records (tenant, operation, key, {}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
             ON CONFLICT DO NOTHING RETURNING generation",
            columns("")
        );
        let get = format!(
            "SELECT {} FROM idem_records WHERE tenant = $1 AND operation = $2 AND key = $3",
            columns("")
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
                    import_intent(&txn, &intent).await?.map_err(bad)?;
                    continue;
                }
                Line::Business(BusinessLine::Entity(view)) => {
                    let (id, entity) = view.to_entity().map_err(|m| bad(format!("entity: {m}")))?;
                    import_entity(&txn, &id, &entity).await?.map_err(bad)?;
                    continue;
                }
                Line::Business(BusinessLine::Unique(view)) => {
                    let claim = view.to_claim().map_err(|m| bad(format!("unique: {m}")))?;
                    import_unique(&txn, claim).await?.map_err(bad)?;
                    continue;
                }
                Line::Token(line) => {
                    let (token, id, entry) = line.to_token().map_err(bad)?;
                    import_token(&txn, &token, &id, &entry)
                        .await?
                        .map_err(bad)?;
                    floor = floor.max(entry.issued_at);
                    continue;
                }
            };
            let c = Columns::of(&record)?;
            let inserted = txn
                .query_opt(
                    &insert,
                    &[
                        &id.tenant(),
                        &id.operation(),
                        &id.key(),
                        &c.fingerprint,
                        &c.generation,
                        &c.state,
                        &c.verdict,
                        &c.created_at,
                        &c.updated_at,
                        &c.lease_until,
                        &c.completed_at,
                        &c.expires_at,
                        &c.outcome_code,
                        &c.outcome_body,
                    ],
                )
                .await
                .map_err(database("import"))?;
            if inserted.is_none() {
                let existing = txn
                    .query_one(&get, &[&id.tenant(), &id.operation(), &id.key()])
                    .await
                    .map_err(database("import"))?;
                if record_at(&existing, 0, &id)? != record {
                    return Err(bad(format!(
                        "{id}: the database already holds a different record under this id"
                    )));
                }
            }
            highest = highest.max(record.generation);
            floor = floor.max(record.updated_at);
        }
        let transferred = lines.finish()?;
        // Raised before the commit: a raise that outlives a rolled-back import only
        // leaves a gap, and no generation imported is ever handed out again. No claim
        // draws one meanwhile: they wait on the lock taken above.
        let highest = signed("generation", highest.0)?;
        if highest > 0 {
            txn.execute(
                "SELECT setval('idem_generation', GREATEST($1, \
                   (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM idem_generation)))",
                &[&highest],
            )
            .await
            .map_err(database("import"))?;
        }
        let floor = signed("clock_floor", floor.0)?;
        txn.execute(
            "INSERT INTO idem_meta (name, value) VALUES ('clock_floor', $1) \
             ON CONFLICT (name) DO UPDATE SET value = GREATEST(idem_meta.value, EXCLUDED.value)",
            &[&floor],
        )
        .await
        .map_err(database("import"))?;
        txn.commit().await.map_err(database("import"))?;
        Ok(transferred)
    }
}

/// Writes an imported entity: `Ok(Err(message))` when the database holds a different one.
async fn import_entity(
    txn: &tokio_postgres::Transaction<'_>,
    id: &EntityId,
    entity: &Entity,
) -> Result<Result<(), String>, Error> {
    let version = signed("version", entity.version)?;
    let updated_at = signed("updated_at", entity.updated_at.0)?;
    let inserted = txn
        .execute(
            "INSERT INTO idem_entities (tenant, kind, id, state, version, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &id.tenant(),
                &id.kind(),
                &id.id(),
                &entity.state,
                &version,
                &updated_at,
            ],
        )
        .await
        .map_err(database("import"))?;
    if inserted == 1 {
        return Ok(Ok(()));
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
async fn import_token(
    txn: &tokio_postgres::Transaction<'_>,
    token: &Token,
    id: &RecordId,
    entry: &IssuedToken,
) -> Result<Result<(), String>, Error> {
    let (tenant, operation) = (id.tenant(), id.operation());
    let issued_at = signed("issued_at", entry.issued_at.0)?;
    let expires_at = signed("expires_at", entry.expires_at.0)?;
    let inserted = txn
        .execute(
            "INSERT INTO idem_tokens (tenant, operation, token, issued_at, expires_at, intent_id) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &tenant,
                &operation,
                &token.as_str(),
                &issued_at,
                &expires_at,
                &entry.intent_id,
            ],
        )
        .await
        .map_err(database("import"))?;
    if inserted == 0 {
        return Ok(if entry_on(txn, id).await?.as_ref() == Some(entry) {
            Ok(())
        } else {
            Err(format!(
                "token {id}: the database already holds a different token under this id"
            ))
        });
    }
    if let Some(intent_id) = &entry.intent_id {
        // The intent's entry names the latest token issued for it, as issuing leaves it.
        txn.execute(
            "INSERT INTO idem_token_intents (tenant, operation, intent_id, token) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, operation, intent_id) DO UPDATE SET token = EXCLUDED.token \
             WHERE COALESCE((SELECT t.issued_at FROM idem_tokens t \
                              WHERE t.tenant = EXCLUDED.tenant AND t.operation = EXCLUDED.operation \
                                AND t.token = idem_token_intents.token), $5) <= $5",
            &[&tenant, &operation, intent_id, &token.as_str(), &issued_at],
        )
        .await
        .map_err(database("import"))?;
    }
    Ok(Ok(()))
}

/// Writes an imported claimed value: `Ok(Err(message))` when another holder has it.
async fn import_unique(
    txn: &tokio_postgres::Transaction<'_>,
    (tenant, scope, value, holder): (&str, &str, &str, &str),
) -> Result<Result<(), String>, Error> {
    let inserted = txn
        .execute(
            "INSERT INTO idem_unique (tenant, scope, value, holder) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
            &[&tenant, &scope, &value, &holder],
        )
        .await
        .map_err(database("import"))?;
    if inserted == 1 {
        return Ok(Ok(()));
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
