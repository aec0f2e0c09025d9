-- idem's schema on MariaDB, version 2 (docs/mariadb.md). Version 1 had no claimant.
-- Applied by the first idem that connects with a user allowed to create tables,
-- sequences and functions, or by hand: `idem schema --db mysql://…` prints this text.
-- Every statement may run again; the version row is written last, so a schema cut
-- short is completed by the next connect.
-- Names are VARBINARY: compared byte for byte (no collation folds case, accents or
-- trailing spaces), and (tenant, operation, key) fits InnoDB's key limit.

CREATE TABLE IF NOT EXISTS idem_meta (
  name  VARBINARY(64) NOT NULL PRIMARY KEY,
  value BIGINT NOT NULL
) ENGINE = InnoDB;

-- Fencing tokens: one sequence for the whole database, so a generation is never handed
-- out twice, also after sweep deleted the row that held it, also across a restart.
-- INCREMENT BY 0 steps by auto_increment_increment from auto_increment_offset: by 1 on
-- one server, and on a Galera cluster by each node's own offset, so that two nodes never
-- hand out the same value (counting by 1 there, they do). The ALTER turns a sequence made
-- by an earlier idem (which counted by 1) into this one.
CREATE SEQUENCE IF NOT EXISTS idem_generation START WITH 1 MINVALUE 1 INCREMENT BY 0 NOCACHE ENGINE = InnoDB;
ALTER SEQUENCE idem_generation INCREMENT BY 0;

-- One row per (tenant, operation, key). state and verdict mirror idem-core's Status:
-- state 0 pending (lease_until), 1 settled (verdict, completed_at, expires_at,
-- outcome_code, outcome_body), 2 unknown, 3 tombstone (verdict, completed_at,
-- expires_at); verdict 0 succeeded, 1 failed. Times are milliseconds since the Unix
-- epoch, on the database's clock. revision rises with every write of the row: a write
-- is conditioned on the revision it read. claimant marks the begin that wrote the claim,
-- so that a begin whose answer was lost finds its own claim and gives it back
-- (docs/design.md §16); null on rows written before version 2 and by an atomic execute.
CREATE TABLE IF NOT EXISTS idem_records (
  tenant       VARBINARY(255) NOT NULL,
  operation    VARBINARY(255) NOT NULL,
  idem_key     VARBINARY(255) NOT NULL,
  fingerprint  VARBINARY(32) NOT NULL,
  generation   BIGINT   NOT NULL,
  revision     BIGINT   NOT NULL,
  state        SMALLINT NOT NULL,
  verdict      SMALLINT NULL,
  created_at   BIGINT   NOT NULL,
  updated_at   BIGINT   NOT NULL,
  lease_until  BIGINT   NULL,
  completed_at BIGINT   NULL,
  expires_at   BIGINT   NULL,
  outcome_code INT      NULL,
  outcome_body LONGBLOB NULL,
  claimant     BIGINT   NULL,
  PRIMARY KEY (tenant, operation, idem_key),
  -- Sweep finds what is past its time without a scan.
  KEY idem_records_expiry (expires_at),
  -- The reconciler and stats find pending and unknown records without a scan.
  KEY idem_records_open (state, updated_at)
) ENGINE = InnoDB;

-- Version 2: a nullable last column, added in place (no copy of the table).
ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS claimant BIGINT NULL;

-- The fleet's one clock: the database's, in ms. NOW() is fixed for a statement.
CREATE OR REPLACE FUNCTION idem_now() RETURNS BIGINT NOT DETERMINISTIC NO SQL SQL SECURITY INVOKER
  RETURN CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED);

-- The layers after the key (docs/design.md §8), which sweep never touches: entities
-- moved by a state machine with a version check, and business values claimed once.
CREATE TABLE IF NOT EXISTS idem_entities (
  tenant     VARBINARY(255) NOT NULL,
  kind       VARBINARY(255) NOT NULL,
  id         VARBINARY(255) NOT NULL,
  state      VARBINARY(255) NOT NULL,
  version    BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (tenant, kind, id),
  KEY idem_entities_state (kind, state, tenant, id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS idem_unique (
  tenant VARBINARY(255) NOT NULL,
  scope  VARBINARY(255) NOT NULL,
  value  VARBINARY(255) NOT NULL,
  holder VARBINARY(255) NOT NULL,
  PRIMARY KEY (tenant, scope, value)
) ENGINE = InnoDB;

-- One-time tokens (docs/design.md §9): what was issued, and the token issued last for
-- each intent id. A token's use is an ordinary record under (tenant, operation, token).
CREATE TABLE IF NOT EXISTS idem_tokens (
  tenant     VARBINARY(255) NOT NULL,
  operation  VARBINARY(255) NOT NULL,
  token      VARBINARY(255) NOT NULL,
  issued_at  BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  intent_id  VARBINARY(255) NULL,
  PRIMARY KEY (tenant, operation, token),
  KEY idem_tokens_expiry (expires_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS idem_token_intents (
  tenant    VARBINARY(255) NOT NULL,
  operation VARBINARY(255) NOT NULL,
  intent_id VARBINARY(255) NOT NULL,
  token     VARBINARY(255) NOT NULL,
  PRIMARY KEY (tenant, operation, intent_id)
) ENGINE = InnoDB;

-- A sender's outbox intents, as export and import carry them between a box's file and
-- the shared database (the outbox itself runs on the file).
CREATE TABLE IF NOT EXISTS idem_intents (
  idem_key          VARBINARY(255) NOT NULL PRIMARY KEY,
  operation         VARBINARY(255) NOT NULL,
  state             VARBINARY(32) NOT NULL,
  attempts          BIGINT NOT NULL,
  created_at        BIGINT NOT NULL,
  next_attempt_at   BIGINT NOT NULL,
  deadline          BIGINT NOT NULL,
  fingerprint       VARBINARY(32) NOT NULL,
  payload           LONGBLOB NOT NULL,
  last_status       INT NULL,
  outcome_code      INT NULL,
  outcome_body      LONGBLOB NULL,
  resolved_as       VARBINARY(32) NULL,
  resolution_reason BLOB NULL,
  resolved_at       BIGINT NULL
) ENGINE = InnoDB;

INSERT INTO idem_meta (name, value) VALUES ('schema_version', 2)
  ON DUPLICATE KEY UPDATE value = GREATEST(value, VALUES(value));
