// The SQLite schema as an ordered list of migrations, and the runner that applies them under BEGIN IMMEDIATE.
// It knows table layouts only; reading and writing records is stores.ts's job.
import type Database from "better-sqlite3";

export interface Migration {
  /** Strictly increasing from 1; recorded in leash_schema_version once applied. */
  readonly version: number;
  readonly name: string;
  /** DDL (and any data rewrite) run inside the migrating transaction. */
  readonly sql: string;
}

/*
 * Layout rules (the PostgreSQL substrate mirrors the table and column names):
 * - STRICT tables, so a value of the wrong type is refused instead of silently coerced;
 * - decimal amounts are TEXT, exactly as written (never REAL);
 * - config/state and account lists are JSON TEXT;
 * - nanosecond times and counters are INTEGER (any integral JS number below 2^63 round-trips exactly);
 * - nonces are type-tagged TEXT ("s:" + string, "n:" + String(number)) so 7 and "7" never collide
 *   (leash_chain.nonce, and the read-only leash_nonces of versions 1–6);
 * - no foreign keys: the engine owns referential rules, and every substrate must behave alike.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "tables",
    sql: `
      CREATE TABLE leash_sessions (
        session_id TEXT NOT NULL PRIMARY KEY,
        agent_id TEXT NOT NULL,
        organization_id TEXT NOT NULL,
        status TEXT NOT NULL,
        config TEXT NOT NULL,
        state TEXT NOT NULL,
        call_count INTEGER NOT NULL,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL,
        last_heartbeat_ns INTEGER
      ) STRICT;
      CREATE TABLE leash_nonces (
        session_id TEXT NOT NULL,
        nonce TEXT NOT NULL,
        recorded_ns INTEGER NOT NULL,
        PRIMARY KEY (session_id, nonce)
      ) STRICT, WITHOUT ROWID;
      CREATE TABLE leash_budget_accounts (
        account_id TEXT NOT NULL PRIMARY KEY,
        scope TEXT NOT NULL,
        parent_id TEXT,
        limit_usd TEXT NOT NULL,
        spent_usd TEXT NOT NULL,
        reserved_usd TEXT NOT NULL,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL
      ) STRICT;
      CREATE TABLE leash_reservations (
        reservation_id TEXT NOT NULL PRIMARY KEY,
        account_ids TEXT NOT NULL,
        session_id TEXT NOT NULL,
        call_number INTEGER NOT NULL,
        amount_usd TEXT NOT NULL,
        actual_usd TEXT,
        status TEXT NOT NULL,
        idempotency_key TEXT,
        created_ns INTEGER NOT NULL,
        expires_ns INTEGER NOT NULL,
        resolved_ns INTEGER
      ) STRICT;
      CREATE TABLE leash_hitl_requests (
        request_id TEXT NOT NULL PRIMARY KEY,
        session_id TEXT NOT NULL,
        call_number INTEGER NOT NULL,
        tool_name TEXT NOT NULL,
        nonce TEXT,
        args_digest TEXT,
        reason TEXT NOT NULL,
        status TEXT NOT NULL,
        decision TEXT,
        operator_id TEXT,
        successor_nonce TEXT,
        successor_args_digest TEXT,
        created_ns INTEGER NOT NULL,
        decided_ns INTEGER
      ) STRICT;
    `,
  },
  {
    // Secondary indexes for the list queries (expiry sweep, per-session listings); the hot path
    // (point lookups by primary key) never needed them, which is why they came second.
    version: 2,
    name: "list indexes",
    sql: `
      CREATE INDEX leash_sessions_by_status ON leash_sessions (status, created_ns);
      CREATE INDEX leash_reservations_pending_by_expiry ON leash_reservations (expires_ns, created_ns)
        WHERE status = 'PENDING';
      CREATE INDEX leash_reservations_by_session ON leash_reservations (session_id, created_ns);
      CREATE INDEX leash_hitl_requests_by_session ON leash_hitl_requests (session_id, created_ns);
      CREATE INDEX leash_hitl_requests_by_status ON leash_hitl_requests (status, created_ns);
    `,
  },
  {
    // The audit log and its outbox. No head table, unlike PostgreSQL: every transaction holds the
    // database write lock (BEGIN IMMEDIATE), so reading the highest seq already locks the head.
    // body is TEXT and never JSON-normalized: it is hashed and signed byte for byte.
    version: 3,
    name: "chain and outbox",
    sql: `
      CREATE TABLE leash_chain (
        seq INTEGER NOT NULL PRIMARY KEY,
        entry_id TEXT NOT NULL UNIQUE,
        entry_hash TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        body TEXT NOT NULL,
        signature TEXT NOT NULL,
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        session_id TEXT,
        created_ns INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX leash_chain_by_session ON leash_chain (session_id, seq);
      CREATE TABLE leash_outbox (
        seq INTEGER NOT NULL PRIMARY KEY,
        entry_id TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        claimed_by TEXT,
        lease_until_ns INTEGER,
        last_error TEXT,
        created_ns INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX leash_outbox_by_status ON leash_outbox (status, seq);
      CREATE INDEX leash_outbox_by_session ON leash_outbox (session_id, seq);
    `,
  },
  {
    // No query reads chain entries or outbox items by session (relays claim in seq order), yet every
    // decision paid for both indexes: two more B-tree leaves written to the WAL per commit.
    version: 4,
    name: "drop unused per-session indexes",
    sql: `
      DROP INDEX leash_chain_by_session;
      DROP INDEX leash_outbox_by_session;
    `,
  },
  {
    // What an operator needs to judge a paused call, and when it stops waiting. Rows written before
    // keep NULL here: they show no params and never expire (the engine says so).
    version: 5,
    name: "hitl request content and expiry",
    sql: `
      ALTER TABLE leash_hitl_requests ADD COLUMN params_json TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN budget_spent_usd TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN budget_limit_usd TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN budget_remaining_usd TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN policy_id TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN expires_ns INTEGER;
      ALTER TABLE leash_hitl_requests ADD COLUMN comment TEXT;
      ALTER TABLE leash_hitl_requests ADD COLUMN successor_params_json TEXT;
    `,
  },
  {
    // The chain position each session and account snapshot reflects (the seq of the last entry folded
    // into it), set by the engine. Rows written before keep NULL: recovery checks them by replay alone.
    version: 6,
    name: "snapshot chain stamps",
    sql: `
      ALTER TABLE leash_sessions ADD COLUMN at_seq INTEGER;
      ALTER TABLE leash_budget_accounts ADD COLUMN at_seq INTEGER;
    `,
  },
  {
    // The nonce an entry spends (an ALLOW decision's), as a column of the entry itself: one row per
    // decision instead of an entry plus a leash_nonces row. The partial unique index is what refuses
    // a second spend, and what NonceStore reads; entries without a nonce take no index space.
    // leash_nonces stays, read-only: the nonces written there before this version still count as
    // spent (NonceStore reads both, and an append refuses a nonce found there). Nothing writes it.
    version: 7,
    name: "nonces on chain entries",
    sql: `
      ALTER TABLE leash_chain ADD COLUMN nonce TEXT;
      CREATE UNIQUE INDEX leash_chain_nonces ON leash_chain (session_id, nonce) WHERE nonce IS NOT NULL;
    `,
  },
  {
    // Decided request messages (MessageStore): one row per signed request the cluster answered, so a
    // re-delivered copy gets the recorded verdict. The primary key is what makes a second decision
    // of one message fail; the sent_ns index serves the prune of rows past the replay window.
    version: 8,
    name: "decided messages",
    sql: `
      CREATE TABLE leash_messages (
        session_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        entry_seq INTEGER NOT NULL,
        sent_ns INTEGER NOT NULL,
        PRIMARY KEY (session_id, message_id)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX leash_messages_by_sent ON leash_messages (sent_ns);
    `,
  },
  {
    // Params stored once by digest (content-addressed) beside the chain: an entry commits to the
    // digest, the text is kept once however many entries name it. Entries written before carry
    // theirs inline. The PostgreSQL substrate's version 9 mirrors it.
    version: 9,
    name: "params by digest",
    sql: `
      CREATE TABLE leash_params (hash TEXT NOT NULL PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID;
    `,
  },
  {
    // Budget escrow (#35): a shared account's per-shard allotments, which a shard charges without the
    // account's row. Version 12 (10 and 11 belong to other work); the PostgreSQL version 12 mirrors it.
    version: 12,
    name: "budget allotments",
    sql: `
      CREATE TABLE leash_budget_allotments (
        account_id TEXT NOT NULL,
        shard TEXT NOT NULL,
        holder TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        granted_usd TEXT NOT NULL,
        spent_usd TEXT NOT NULL,
        reserved_usd TEXT NOT NULL,
        lease_expires_ns INTEGER NOT NULL,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL,
        at_seq INTEGER,
        PRIMARY KEY (account_id, shard)
      ) STRICT, WITHOUT ROWID;
    `,
  },
  {
    // State the chain authenticates (#34): holds and HITL requests carry, as sessions and accounts
    // already do, the seq of the entry that last wrote them, whose row_digests names their digest.
    // Null for rows written before. The PostgreSQL version 13 mirrors it.
    version: 13,
    name: "row stamps on holds and HITL requests",
    sql: `
      ALTER TABLE leash_reservations ADD COLUMN at_seq INTEGER;
      ALTER TABLE leash_hitl_requests ADD COLUMN at_seq INTEGER;
    `,
  },
];

/** The schema version this build reads and writes. */
export const SCHEMA_VERSION: number = MIGRATIONS[MIGRATIONS.length - 1]!.version;

const VERSION_TABLE = `
  CREATE TABLE IF NOT EXISTS leash_schema_version (
    version INTEGER NOT NULL PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
  ) STRICT
`;

/** The highest applied migration; 0 for a database Leash never migrated. */
export function readSchemaVersion(db: Database.Database): number {
  const table = db
    .prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'leash_schema_version'")
    .get();
  if (table === undefined) return 0;
  const row = db.prepare("SELECT MAX(version) AS version FROM leash_schema_version").get() as {
    version: number | null;
  };
  return row.version ?? 0;
}

export class SchemaTooNewError extends Error {
  override readonly name = "SchemaTooNewError";
  constructor(
    readonly found: number,
    readonly supported: number,
  ) {
    super(`the database is at schema version ${found}, newer than this build supports (${supported})`);
  }
}

/**
 * Applies every migration above the database's version. The caller MUST hold the write lock
 * (BEGIN IMMEDIATE) and commit afterwards: the version is read under that lock, so of two processes
 * migrating at once the second waits for the first, then finds nothing left to do.
 * Returns the versions before and after.
 */
export function applyMigrations(
  db: Database.Database,
  migrations: readonly Migration[] = MIGRATIONS,
  nowMs: () => number = Date.now,
): { from: number; to: number } {
  if (!db.inTransaction) throw new Error("applyMigrations must run inside BEGIN IMMEDIATE … COMMIT");
  db.exec(VERSION_TABLE);
  const from = readSchemaVersion(db);
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1]!.version;
  if (from > latest) throw new SchemaTooNewError(from, latest);
  const record = db.prepare(
    "INSERT INTO leash_schema_version (version, name, applied_at_ms) VALUES (?, ?, ?)",
  );
  for (const migration of migrations) {
    if (migration.version <= from) continue;
    db.exec(migration.sql);
    record.run(migration.version, migration.name, Math.trunc(nowMs()));
  }
  return { from, to: Math.max(from, latest) };
}
