// The schema's history as ordered migrations, and the runner that applies them under an advisory lock.
// Migrations only ever add; nothing here rewrites or drops data a running daemon might still read.

import { SubstrateError } from "@leash/core";
import type { ClientBase } from "pg";
import type { TableNames } from "./codec.js";
import { toSubstrateError } from "./errors.js";

export interface Migration {
  readonly version: number;
  readonly description: string;
  /** Statements run in order inside the migration transaction. */
  statements(t: TableNames): readonly string[];
}

// Money is kept as the exact text written plus a generated NUMERIC for SQL reports and sums; the
// text is what the stores return, so "1e-7" and "0.0010" come back unchanged.
const money = (column: string, nullable = false) =>
  `${column} text${nullable ? "" : " NOT NULL"},
  ${column}_num numeric GENERATED ALWAYS AS (${column}::numeric) STORED`;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: "sessions, nonces, budget accounts and reservations",
    statements: (t) => [
      `CREATE TABLE ${t.sessions} (
  session_id text PRIMARY KEY,
  agent_id text NOT NULL,
  organization_id text NOT NULL,
  status text NOT NULL,
  config jsonb NOT NULL,
  state jsonb NOT NULL,
  call_count bigint NOT NULL,
  created_ns bigint NOT NULL,
  updated_ns bigint NOT NULL,
  last_heartbeat_ns bigint
)`,
      // nonce_json is the nonce's JSON text: "7" (quoted) is a string nonce, 7 a number nonce.
      `CREATE TABLE ${t.nonces} (
  session_id text NOT NULL,
  nonce_json text NOT NULL,
  recorded_ns bigint NOT NULL,
  PRIMARY KEY (session_id, nonce_json)
)`,
      `CREATE TABLE ${t.accounts} (
  account_id text PRIMARY KEY,
  scope text NOT NULL,
  parent_id text,
  ${money("limit_usd")},
  ${money("spent_usd")},
  ${money("reserved_usd")},
  created_ns bigint NOT NULL,
  updated_ns bigint NOT NULL
)`,
      `CREATE TABLE ${t.reservations} (
  reservation_id text PRIMARY KEY,
  account_ids text[] NOT NULL,
  session_id text NOT NULL,
  call_number bigint NOT NULL,
  ${money("amount_usd")},
  ${money("actual_usd", true)},
  status text NOT NULL,
  idempotency_key text,
  created_ns bigint NOT NULL,
  expires_ns bigint NOT NULL,
  resolved_ns bigint
)`,
    ],
  },
  {
    version: 2,
    description: "HITL requests and the indexes the list queries use",
    statements: (t) => [
      `CREATE TABLE ${t.hitl} (
  request_id text PRIMARY KEY,
  session_id text NOT NULL,
  call_number bigint NOT NULL,
  tool_name text NOT NULL,
  nonce_json text,
  args_digest text,
  reason text NOT NULL,
  status text NOT NULL,
  decision text,
  operator_id text,
  successor_nonce_json text,
  successor_args_digest text,
  created_ns bigint NOT NULL,
  decided_ns bigint
)`,
      // Recovery scans PENDING reservations by expiry; a partial index stays small as history grows.
      `CREATE INDEX leash_reservations_pending_expiry ON ${t.reservations} (expires_ns) WHERE status = 'PENDING'`,
      `CREATE INDEX leash_reservations_session ON ${t.reservations} (session_id, created_ns)`,
      `CREATE INDEX leash_sessions_status ON ${t.sessions} (status, created_ns)`,
      `CREATE INDEX leash_hitl_requests_session ON ${t.hitl} (session_id, created_ns)`,
      `CREATE INDEX leash_hitl_requests_status ON ${t.hitl} (status, created_ns)`,
    ],
  },
  {
    version: 3,
    description: "the audit chain, its head row and the outbox",
    statements: (t) => [
      // body is text, never jsonb: it is hashed and signed, and jsonb would reorder keys and respell numbers.
      `CREATE TABLE ${t.chain} (
  seq bigint PRIMARY KEY,
  entry_id text NOT NULL UNIQUE,
  entry_hash text NOT NULL,
  prev_hash text NOT NULL,
  body text NOT NULL,
  signature text NOT NULL,
  key_id text NOT NULL,
  kind text NOT NULL,
  session_id text,
  created_ns bigint NOT NULL
)`,
      `CREATE INDEX leash_chain_session ON ${t.chain} (session_id, seq)`,
      // A row lock can only be taken on a row: appenders queue on this one (FOR UPDATE), created here so
      // that even the first append of an empty chain has something to lock. seq is null while it is empty.
      `CREATE TABLE ${t.chainHead} (
  id smallint PRIMARY KEY CHECK (id = 1),
  seq bigint,
  entry_hash text,
  CHECK ((seq IS NULL) = (entry_hash IS NULL))
)`,
      `INSERT INTO ${t.chainHead} (id, seq, entry_hash) VALUES (1, NULL, NULL)`,
      `CREATE TABLE ${t.outbox} (
  seq bigint PRIMARY KEY,
  entry_id text NOT NULL,
  session_id text,
  status text NOT NULL,
  attempts integer NOT NULL,
  claimed_by text,
  lease_until_ns bigint,
  last_error text,
  created_ns bigint NOT NULL
)`,
      // Claims scan PENDING by seq; list and counts filter by status.
      `CREATE INDEX leash_outbox_claim ON ${t.outbox} (status, seq)`,
      `CREATE INDEX leash_outbox_session ON ${t.outbox} (session_id, seq)`,
    ],
  },
  {
    version: 4,
    // No statement reads chain entries or outbox items by session (relays claim in seq order), yet
    // every decision paid for both indexes. The SQLite substrate dropped its twins in its version 4.
    description: "drop unused per-session indexes of the chain and the outbox",
    statements: (t) => {
      const at = t.schema === null ? "" : `${t.schema}.`;
      return [`DROP INDEX ${at}leash_chain_session`, `DROP INDEX ${at}leash_outbox_session`];
    },
  },
  {
    version: 5,
    // What an operator needs to judge a paused call, and when it stops waiting. Rows written before
    // keep NULL here: they show no params and never expire. The SQLite substrate's version 5 mirrors it.
    description: "HITL request content (params, budget, policy, comment) and expiry",
    statements: (t) => [
      `ALTER TABLE ${t.hitl}
  ADD COLUMN params_json text,
  ADD COLUMN budget_spent_usd text,
  ADD COLUMN budget_limit_usd text,
  ADD COLUMN budget_remaining_usd text,
  ADD COLUMN policy_id text,
  ADD COLUMN expires_ns bigint,
  ADD COLUMN comment text,
  ADD COLUMN successor_params_json text`,
    ],
  },
  {
    version: 6,
    // The chain position each session and account snapshot reflects (the seq of the last entry folded
    // into it), set by the engine. Rows written before keep NULL. The SQLite substrate's version 6 mirrors it.
    description: "snapshot chain stamps (at_seq) on sessions and budget accounts",
    statements: (t) => [
      `ALTER TABLE ${t.sessions} ADD COLUMN at_seq bigint`,
      `ALTER TABLE ${t.accounts} ADD COLUMN at_seq bigint`,
    ],
  },
  {
    version: 7,
    // The nonce an entry spends (an ALLOW decision's), as a column of the entry: one row per decision
    // instead of an entry plus a nonce row. The partial unique index refuses a second spend (the
    // append's ON CONFLICT turns that into "nothing inserted") and answers NonceStore. The nonce
    // table stays, read-only: nonces recorded there before still count as spent (NonceStore reads
    // both; an append refuses one found there). The SQLite substrate's version 7 mirrors it.
    description: "nonces on chain entries (the nonce table kept read-only)",
    statements: (t) => [
      `ALTER TABLE ${t.chain} ADD COLUMN nonce text`,
      `CREATE UNIQUE INDEX leash_chain_nonces ON ${t.chain} (session_id, nonce) WHERE nonce IS NOT NULL`,
    ],
  },
  {
    version: 8,
    // Decided request messages (MessageStore, messages.ts): the primary key is what lets one of two
    // daemons racing on a message record it, the sent_ns index serves the prune of rows past the
    // replay window. The SQLite substrate's version 8 mirrors it.
    description: "decided messages",
    statements: (t) => [
      `CREATE TABLE ${t.messages} (
  session_id text NOT NULL,
  message_id text NOT NULL,
  entry_seq bigint NOT NULL,
  sent_ns bigint NOT NULL,
  PRIMARY KEY (session_id, message_id)
)`,
      `CREATE INDEX leash_messages_by_sent ON ${t.messages} (sent_ns)`,
    ],
  },
  {
    version: 9,
    // Params stored once by digest (content-addressed) beside the chain: an entry commits to the
    // digest, the text is kept once however many entries name it. Entries written before carry
    // theirs inline. The SQLite substrate's version 9 mirrors it.
    description: "params by digest (leash_params)",
    statements: (t) => [`CREATE TABLE ${t.params} (hash text PRIMARY KEY, text text NOT NULL)`],
  },
  {
    version: 12,
    // Budget escrow (#35): a shared account's per-shard allotments, charged by the shard without the
    // account's row. Version 12 (10 and 11 belong to other work); the SQLite version 12 mirrors it.
    description: "budget allotments (leash_budget_allotments)",
    statements: (t) => [
      `CREATE TABLE ${t.allotments} (
  account_id text NOT NULL,
  shard text NOT NULL,
  holder text NOT NULL,
  epoch bigint NOT NULL,
  ${money("granted_usd")},
  ${money("spent_usd")},
  ${money("reserved_usd")},
  lease_expires_ns bigint NOT NULL,
  created_ns bigint NOT NULL,
  updated_ns bigint NOT NULL,
  at_seq bigint,
  PRIMARY KEY (account_id, shard)
)`,
    ],
  },
  {
    version: 13,
    // State the chain authenticates (#34): holds and HITL requests carry, as sessions and accounts
    // already do, the seq of the entry that last wrote them. The SQLite version 13 mirrors it.
    description: "row stamps on holds and HITL requests (at_seq)",
    statements: (t) => [
      `ALTER TABLE ${t.reservations} ADD COLUMN at_seq bigint`,
      `ALTER TABLE ${t.hitl} ADD COLUMN at_seq bigint`,
    ],
  },
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

export interface MigrationResult {
  readonly from: number;
  readonly to: number;
}

/**
 * Brings the schema to `target` (default: the latest) in one transaction. The transaction-scoped
 * advisory lock makes processes migrating the same schema at once queue up: the first applies, the
 * rest then see the new version and do nothing. DDL is transactional in PostgreSQL, so a failure
 * leaves the previous version intact.
 */
export async function runMigrations(
  client: ClientBase,
  t: TableNames,
  target: number = LATEST_SCHEMA_VERSION,
): Promise<MigrationResult> {
  let step = "begin the migration transaction";
  try {
    await client.query("BEGIN");
    step = "take the migration lock";
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [t.lockKey]);
    step = "create the schema";
    // Under the lock: concurrent CREATE SCHEMA IF NOT EXISTS can otherwise fail on a unique index.
    if (t.schema !== null) await client.query(`CREATE SCHEMA IF NOT EXISTS ${t.schema}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${t.version} (
  version integer PRIMARY KEY,
  description text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`,
    );
    step = "read the schema version";
    const { rows } = await client.query<{ version: number }>(
      `SELECT coalesce(max(version), 0)::integer AS version FROM ${t.version}`,
    );
    const from = rows[0]?.version ?? 0;
    if (from > LATEST_SCHEMA_VERSION) {
      throw new SubstrateError(
        "corrupt",
        `schema version ${from} is newer than this build of @leash/substrate-postgres understands (${LATEST_SCHEMA_VERSION}); upgrade it`,
      );
    }
    let to = from;
    for (const migration of MIGRATIONS) {
      if (migration.version <= from || migration.version > target) continue;
      step = `apply migration ${migration.version} (${migration.description})`;
      for (const statement of migration.statements(t)) await client.query(statement);
      await client.query(`INSERT INTO ${t.version} (version, description) VALUES ($1, $2)`, [
        migration.version,
        migration.description,
      ]);
      to = migration.version;
    }
    step = "commit the migration";
    await client.query("COMMIT");
    return { from, to };
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw toSubstrateError(error, `migrate: ${step}`);
  }
}
