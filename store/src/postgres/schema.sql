-- idem's schema on PostgreSQL, version 4 (docs/postgres.md). Version 1 had no
-- entities, claimed values or tokens, version 2 no intents, version 3 no claimant;
-- applying this text to any of them upgrades it.
-- Applied by the first idem that connects with a role allowed to create tables, or by
-- hand: `idem schema` prints this text. Every statement may run again.

CREATE TABLE IF NOT EXISTS idem_meta (
  name  text PRIMARY KEY,
  value bigint NOT NULL
);

-- Fencing tokens: one sequence for the whole database, so a generation is never handed
-- out twice, also after sweep deleted the row that held it. CACHE 1 keeps the values
-- rising across sessions.
CREATE SEQUENCE IF NOT EXISTS idem_generation AS bigint MINVALUE 1 CACHE 1;

-- One row per (tenant, operation, key). state and verdict mirror idem-core's Status:
-- state 0 pending (lease_until), 1 settled (verdict, completed_at, expires_at,
-- outcome_code, outcome_body), 2 unknown, 3 tombstone (verdict, completed_at,
-- expires_at); verdict 0 succeeded, 1 failed. Times are milliseconds since the Unix
-- epoch, on the database's clock. claimant marks the begin that wrote the claim, so that
-- a begin whose answer was lost finds its own claim and gives it back (docs/design.md
-- §16); null on rows written before version 4 and by an atomic execute.
CREATE TABLE IF NOT EXISTS idem_records (
  tenant       text COLLATE "C" NOT NULL,
  operation    text COLLATE "C" NOT NULL,
  key          text COLLATE "C" NOT NULL,
  fingerprint  bytea    NOT NULL,
  generation   bigint   NOT NULL,
  state        smallint NOT NULL,
  verdict      smallint,
  created_at   bigint   NOT NULL,
  updated_at   bigint   NOT NULL,
  lease_until  bigint,
  completed_at bigint,
  expires_at   bigint,
  outcome_code integer,
  outcome_body bytea,
  claimant     bigint,
  PRIMARY KEY (tenant, operation, key)
);
-- Version 4: a nullable column without a default, added without rewriting the table.
ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS claimant bigint;

-- Sweep finds what is past its time without a scan.
CREATE INDEX IF NOT EXISTS idem_records_expiry ON idem_records (expires_at)
  WHERE expires_at IS NOT NULL;
-- The reconciler and stats find pending and unknown records without a scan.
CREATE INDEX IF NOT EXISTS idem_records_open ON idem_records (state, updated_at)
  WHERE state IN (0, 2);

-- The fleet's one clock: the database's, in ms. Within one statement (and one
-- transaction) it does not move.
CREATE OR REPLACE FUNCTION idem_now() RETURNS bigint LANGUAGE sql STABLE
  AS $$ SELECT (extract(epoch FROM now()) * 1000)::bigint $$;

-- The layers after the key (docs/design.md §8), which sweep never touches: entities
-- moved by a state machine with a version check, and business values claimed once.
CREATE TABLE IF NOT EXISTS idem_entities (
  tenant     text COLLATE "C" NOT NULL,
  kind       text COLLATE "C" NOT NULL,
  id         text COLLATE "C" NOT NULL,
  state      text COLLATE "C" NOT NULL,
  version    bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (tenant, kind, id)
);
CREATE INDEX IF NOT EXISTS idem_entities_state ON idem_entities (kind, state, tenant, id);

CREATE TABLE IF NOT EXISTS idem_unique (
  tenant text COLLATE "C" NOT NULL,
  scope  text COLLATE "C" NOT NULL,
  value  text COLLATE "C" NOT NULL,
  holder text NOT NULL,
  PRIMARY KEY (tenant, scope, value)
);

-- One-time tokens (docs/design.md §9): what was issued, and the token issued last for
-- each intent id. A token's use is an ordinary record under (tenant, operation, token).
CREATE TABLE IF NOT EXISTS idem_tokens (
  tenant     text COLLATE "C" NOT NULL,
  operation  text COLLATE "C" NOT NULL,
  token      text COLLATE "C" NOT NULL,
  issued_at  bigint NOT NULL,
  expires_at bigint NOT NULL,
  intent_id  text COLLATE "C",
  PRIMARY KEY (tenant, operation, token)
);
CREATE INDEX IF NOT EXISTS idem_tokens_expiry ON idem_tokens (expires_at);

CREATE TABLE IF NOT EXISTS idem_token_intents (
  tenant    text COLLATE "C" NOT NULL,
  operation text COLLATE "C" NOT NULL,
  intent_id text COLLATE "C" NOT NULL,
  token     text COLLATE "C" NOT NULL,
  PRIMARY KEY (tenant, operation, intent_id)
);

-- A sender's outbox intents, as export and import carry them between a box's file and
-- the shared database (the outbox itself runs on the file). Columns mirror idem-core's
-- Intent; state and resolved_as are the names idem's export writes.
CREATE TABLE IF NOT EXISTS idem_intents (
  key               text COLLATE "C" PRIMARY KEY,
  operation         text COLLATE "C" NOT NULL,
  state             text NOT NULL,
  attempts          bigint NOT NULL,
  created_at        bigint NOT NULL,
  next_attempt_at   bigint NOT NULL,
  deadline          bigint NOT NULL,
  fingerprint       bytea NOT NULL,
  payload           bytea NOT NULL,
  last_status       integer,
  outcome_code      integer,
  outcome_body      bytea,
  resolved_as       text,
  resolution_reason text,
  resolved_at       bigint
);

INSERT INTO idem_meta (name, value) VALUES ('schema_version', 4)
  ON CONFLICT (name) DO UPDATE SET value = GREATEST(idem_meta.value, EXCLUDED.value);
