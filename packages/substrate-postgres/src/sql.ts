// Every statement the stores run, built once per schema, with a stable prepared-statement name.
// Only text lives here; parameters are encoded by codec.ts and bound by the stores.
import type { TableNames } from "./codec.js";

export interface Statement {
  /** What the statement is for, for error messages ("sessions.get"). */
  readonly op: string;
  /** Prepared-statement name: derived from the text, so two schemas sharing a pool never collide. */
  readonly name: string;
  readonly text: string;
  /**
   * A SELECT: run by mistake outside a transaction it would leave nothing behind (its row and
   * advisory locks end with it), which is what lets it travel right behind a BEGIN not yet confirmed.
   */
  readonly readOnly: boolean;
}

// FNV-1a: the name only has to differ when the text differs, within PostgreSQL's 63-byte limit.
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, "0");
}

export function statement(op: string, text: string): Statement {
  // Two 32-bit hashes of different spellings make an accidental collision negligible.
  return {
    op,
    // PostgreSQL truncates names past 63 bytes, which could make two names one: keep well under.
    name: `leash_${op.replace(/\W/g, "_").slice(0, 38)}_${fnv1a(text)}${fnv1a(`${text}\u0001`)}`,
    text,
    readOnly: /^SELECT\b/.test(text),
  };
}

const SESSION_COLUMNS =
  "session_id, agent_id, organization_id, status, config, state, call_count, created_ns, updated_ns, last_heartbeat_ns, at_seq";
const ACCOUNT_COLUMNS =
  "account_id, scope, parent_id, limit_usd, spent_usd, reserved_usd, created_ns, updated_ns, at_seq";
const RESERVATION_COLUMNS =
  "reservation_id, account_ids, session_id, call_number, amount_usd, actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns, at_seq";
const CHAIN_COLUMNS =
  "seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns, nonce";
const OUTBOX_COLUMNS =
  "seq, entry_id, session_id, status, attempts, claimed_by, lease_until_ns, last_error, created_ns";
/** A DEAD item made PENDING again (OutboxStore.requeue): free, attempts afresh, its reason kept behind $1. */
const REQUEUED = `status = 'PENDING', attempts = 0, claimed_by = NULL, lease_until_ns = NULL,
last_error = $1 || coalesce(last_error, 'no error recorded')`;
const HITL_COLUMNS =
  "request_id, session_id, call_number, tool_name, nonce_json, args_digest, reason, status, decision, operator_id, successor_nonce_json, successor_args_digest, created_ns, decided_ns, params_json, budget_spent_usd, budget_limit_usd, budget_remaining_usd, policy_id, expires_ns, comment, successor_params_json, at_seq";

/**
 * An insert that first takes the row's key lock (see keys.lock), so a transaction that found the id
 * absent and locked that absence keeps it absent until it ends. ON CONFLICT turns a duplicate into
 * "INSERT 0 0" instead of an error that would abort the caller's transaction.
 *
 * Writes that only need to know whether a row was inserted (or matched) read the count in the
 * command tag (rowCount) and return no rows: no RETURNING, so pg parses no row description and
 * builds no row objects for them, which is most of what such a statement costs the client.
 */
function insert(
  op: string,
  table: string,
  columns: string,
  values: readonly string[],
  key: string,
): Statement {
  return statement(
    op,
    `INSERT INTO ${table} (${columns}) SELECT ${values.join(", ")}
FROM (SELECT pg_advisory_xact_lock(hashtextextended(${key}, 0))) AS key_lock
ON CONFLICT DO NOTHING`,
  );
}

const params = (count: number) => Array.from({ length: count }, (_, i) => `$${i + 1}`);

/** Filters become separate statements so each gets a plan that can use its index. */
function filtered(op: string, select: string, order: string, filters: readonly string[]) {
  const variants = new Map<string, Statement>();
  const count = 1 << filters.length;
  for (let mask = 0; mask < count; mask++) {
    const used = filters.filter((_, i) => mask & (1 << i));
    const where =
      used.length === 0 ? "" : ` WHERE ${used.map((column, i) => `${column} = $${i + 1}`).join(" AND ")}`;
    variants.set(
      used.join(","),
      statement(`${op}(${used.join(",")})`, `${select}${where} ORDER BY ${order}`),
    );
  }
  return (used: readonly string[]): Statement => variants.get(used.join(","))!;
}

export type Statements = ReturnType<typeof buildStatements>;

export function buildStatements(t: TableNames) {
  return {
    keys: {
      // Row locks cannot lock a row that does not exist. A locked get that finds nothing takes this
      // transaction-scoped lock on the key instead, and inserts take it too: "absent" then stays
      // true until the reader ends, as it would under a serial order. The key is namespaced text
      // (schema, table, id) hashed to 64 bits; a collision only makes two keys wait for each other.
      lock: statement("keys.lock", "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"),
    },
    sessions: sessionStatements(t),
    nonces: nonceStatements(t),
    accounts: accountStatements(t),
    reservations: reservationStatements(t),
    hitl: hitlStatements(t),
    chain: chainStatements(t),
    outbox: outboxStatements(t),
  };
}

/** The statements of SessionStore. */
function sessionStatements(t: TableNames) {
  return {
    get: statement(
      "sessions.get",
      `SELECT ${SESSION_COLUMNS} FROM ${t.sessions} WHERE session_id = $1 FOR UPDATE`,
    ),
    insert: insert(
      "sessions.insert",
      t.sessions,
      SESSION_COLUMNS,
      params(11).map((p, i) => (i === 4 || i === 5 ? `${p}::jsonb` : p)),
      "$12",
    ),
    // No last_heartbeat_ns: only touch writes it (SessionStore.update).
    update: statement(
      "sessions.update",
      `UPDATE ${t.sessions} SET agent_id = $2, organization_id = $3, status = $4, config = $5::jsonb, state = $6::jsonb,
call_count = $7, created_ns = $8, updated_ns = $9, at_seq = $10 WHERE session_id = $1`,
    ),
    touch: statement(
      "sessions.touch",
      `UPDATE ${t.sessions} SET last_heartbeat_ns = $2 WHERE session_id = $1`,
    ),
    list: statement(
      "sessions.list",
      `SELECT ${SESSION_COLUMNS} FROM ${t.sessions} ORDER BY created_ns, session_id LIMIT $1`,
    ),
    listByStatus: statement(
      "sessions.list(status)",
      `SELECT ${SESSION_COLUMNS} FROM ${t.sessions} WHERE status = $1 ORDER BY created_ns, session_id LIMIT $2`,
    ),
  };
}

// Spent nonces: the chain's nonce column (its partial unique index) and the nonce table of
// schema versions 1–6, read-only since version 7. Both hold a nonce as its JSON text (codec.ts).
function nonceStatements(t: TableNames) {
  return {
    // No column (rowCount says whether it exists): nothing for pg to parse but the row count.
    has: statement(
      "nonces.has",
      `SELECT FROM ${t.chain} WHERE session_id = $1 AND nonce = $2
UNION ALL SELECT FROM ${t.nonces} WHERE session_id = $1 AND nonce_json = $2`,
    ),
    // The positions (1-based) of the spent pairs among those given, each probed by both indexes.
    // Scalar subqueries (each unique index gives at most one row), not EXISTS: PostgreSQL may plan
    // an EXISTS under OR as a hashed subplan, a scan of the whole chain, when the table was small
    // as the statement was first planned, and a prepared statement keeps that plan.
    hasEach: statement(
      "nonces.hasEach",
      `SELECT u.i FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(session_id, nonce, i)
WHERE (SELECT c.seq FROM ${t.chain} AS c WHERE c.session_id = u.session_id AND c.nonce = u.nonce) IS NOT NULL
  OR (SELECT 1 FROM ${t.nonces} AS n WHERE n.session_id = u.session_id AND n.nonce_json = u.nonce) IS NOT NULL`,
    ),
    count: statement(
      "nonces.count",
      `SELECT (SELECT count(*) FROM ${t.chain} WHERE session_id = $1 AND nonce IS NOT NULL)
  + (SELECT count(*) FROM ${t.nonces} WHERE session_id = $1) AS count`,
    ),
  };
}

/** The statements of BudgetStore (accounts). */
function accountStatements(t: TableNames) {
  return {
    get: statement(
      "accounts.get",
      `SELECT ${ACCOUNT_COLUMNS} FROM ${t.accounts} WHERE account_id = $1 FOR UPDATE`,
    ),
    insert: insert("accounts.insert", t.accounts, ACCOUNT_COLUMNS, params(9), "$10"),
    update: statement(
      "accounts.update",
      `UPDATE ${t.accounts} SET scope = $2, parent_id = $3, limit_usd = $4, spent_usd = $5, reserved_usd = $6,
created_ns = $7, updated_ns = $8, at_seq = $9 WHERE account_id = $1`,
    ),
  };
}

/** The statements of BudgetStore (reservations). */
function reservationStatements(t: TableNames) {
  return {
    get: statement(
      "reservations.get",
      `SELECT ${RESERVATION_COLUMNS} FROM ${t.reservations} WHERE reservation_id = $1 FOR UPDATE`,
    ),
    insert: insert(
      "reservations.insert",
      t.reservations,
      RESERVATION_COLUMNS,
      params(12).map((p, i) => (i === 1 ? `${p}::text[]` : p)),
      "$13",
    ),
    update: statement(
      "reservations.update",
      `UPDATE ${t.reservations} SET account_ids = $2::text[], session_id = $3, call_number = $4, amount_usd = $5,
actual_usd = $6, status = $7, idempotency_key = $8, created_ns = $9, expires_ns = $10, resolved_ns = $11,
at_seq = $12 WHERE reservation_id = $1`,
    ),
    listExpired: statement(
      "reservations.listExpired",
      `SELECT ${RESERVATION_COLUMNS} FROM ${t.reservations} WHERE status = 'PENDING' AND expires_ns <= $1
ORDER BY expires_ns, created_ns, reservation_id LIMIT $2`,
    ),
    list: filtered(
      "reservations.list",
      `SELECT ${RESERVATION_COLUMNS} FROM ${t.reservations}`,
      "created_ns, reservation_id",
      ["session_id", "status"],
    ),
  };
}

/** The statements of HitlStore. */
function hitlStatements(t: TableNames) {
  return {
    get: statement("hitl.get", `SELECT ${HITL_COLUMNS} FROM ${t.hitl} WHERE request_id = $1 FOR UPDATE`),
    insert: insert("hitl.insert", t.hitl, HITL_COLUMNS, params(23), "$24"),
    update: statement(
      "hitl.update",
      `UPDATE ${t.hitl} SET session_id = $2, call_number = $3, tool_name = $4, nonce_json = $5, args_digest = $6,
reason = $7, status = $8, decision = $9, operator_id = $10, successor_nonce_json = $11, successor_args_digest = $12,
created_ns = $13, decided_ns = $14, params_json = $15, budget_spent_usd = $16, budget_limit_usd = $17,
budget_remaining_usd = $18, policy_id = $19, expires_ns = $20, comment = $21, successor_params_json = $22,
at_seq = $23 WHERE request_id = $1`,
    ),
    list: filtered("hitl.list", `SELECT ${HITL_COLUMNS} FROM ${t.hitl}`, "created_ns, request_id", [
      "session_id",
      "status",
    ]),
  };
}

/** The statements of ChainStore. */
function chainStatements(t: TableNames) {
  return {
    // The head row, locked until the transaction ends: of two transactions that want to append,
    // the second waits here and then reads the head the first one left.
    head: statement("chain.head", `SELECT seq, entry_hash FROM ${t.chainHead} WHERE id = 1 FOR UPDATE`),
    // One round trip: lock the head (already held when the caller read head() first), insert only
    // the next seq, and move the head only when the insert happened. An earlier seq, a later one,
    // a taken entry_id or a spent nonce (the unique index, or a row of the read-only nonce table)
    // inserts nothing and moves nothing, without an error that would abort the caller's
    // transaction; the answer says which (heads = 0: the head row is missing; spent, asked only
    // when nothing moved, whether the nonce is found spent).
    append: statement(
      "chain.append",
      `WITH head AS (
  SELECT seq FROM ${t.chainHead} WHERE id = 1 FOR UPDATE
), added AS (
  INSERT INTO ${t.chain} (${CHAIN_COLUMNS})
  SELECT $1::bigint, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint, $11 FROM head
  WHERE coalesce(head.seq, -1) = $1::bigint - 1
    AND ($11::text IS NULL OR NOT EXISTS
      (SELECT FROM ${t.nonces} AS n WHERE n.session_id = $9 AND n.nonce_json = $11))
  ON CONFLICT DO NOTHING
  RETURNING seq, entry_hash
), moved AS (
  UPDATE ${t.chainHead} AS h SET seq = added.seq, entry_hash = added.entry_hash FROM added
  WHERE h.id = 1 RETURNING 1
)
SELECT (SELECT count(*) FROM head) AS heads, (SELECT seq FROM head) AS head_seq,
  (SELECT count(*) FROM moved) AS moved,
  CASE WHEN $11::text IS NOT NULL AND NOT EXISTS (SELECT FROM moved) THEN
    EXISTS (SELECT FROM ${t.chain} AS c WHERE c.session_id = $9 AND c.nonce = $11)
    OR EXISTS (SELECT FROM ${t.nonces} AS n WHERE n.session_id = $9 AND n.nonce_json = $11)
  END AS spent`,
    ),
    range: statement(
      "chain.range",
      `SELECT ${CHAIN_COLUMNS} FROM ${t.chain} WHERE seq >= $1 ORDER BY seq LIMIT $2`,
    ),
    count: statement("chain.count", `SELECT count(*) AS count FROM ${t.chain}`),
    // A digest already stored keeps its text: the same params of another entry are the same text.
    putParams: statement(
      "chain.putParams",
      `INSERT INTO ${t.params} (hash, text) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
    ),
    params: statement("chain.params", `SELECT hash, text FROM ${t.params} WHERE hash = ANY($1::text[])`),
  };
}

/** The statements of OutboxStore. */
function outboxStatements(t: TableNames) {
  return {
    // No key lock as for the other inserts: nothing reads an absent outbox item under lock, and
    // ON CONFLICT makes a concurrent duplicate wait for the first one's outcome.
    enqueue: statement(
      "outbox.enqueue",
      `INSERT INTO ${t.outbox} (seq, entry_id, session_id, status, attempts, created_ns)
VALUES ($1, $2, $3, 'PENDING', 0, $4) ON CONFLICT DO NOTHING`,
    ),
    // SKIP LOCKED: rows another relay is claiming (or acking) right now are passed over rather
    // than waited for, and once that relay commits they carry a live lease and no longer qualify.
    claim: statement(
      "outbox.claim",
      `UPDATE ${t.outbox} SET claimed_by = $1, lease_until_ns = $2, attempts = attempts + 1
WHERE seq IN (
  SELECT seq FROM ${t.outbox}
  WHERE status = 'PENDING' AND (lease_until_ns IS NULL OR lease_until_ns <= $3)
  ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED)
RETURNING ${OUTBOX_COLUMNS}`,
    ),
    ack: statement(
      "outbox.ack",
      `UPDATE ${t.outbox} SET status = 'DELIVERED', lease_until_ns = NULL
WHERE seq = ANY($2::bigint[]) AND status = 'PENDING' AND claimed_by = $1`,
    ),
    // Released at once: backoff is the relay's to decide, not the store's.
    retry: statement(
      "outbox.fail(retry)",
      `UPDATE ${t.outbox} SET claimed_by = NULL, lease_until_ns = NULL, last_error = $3
WHERE seq = $2 AND status = 'PENDING' AND claimed_by = $1`,
    ),
    // A lease given back untried: the claim's attempt is taken back (OutboxStore.fail, `unsent`).
    release: statement(
      "outbox.fail(unsent)",
      `UPDATE ${t.outbox} SET claimed_by = NULL, lease_until_ns = NULL, last_error = $3,
  attempts = GREATEST(attempts - 1, 0)
WHERE seq = $2 AND status = 'PENDING' AND claimed_by = $1`,
    ),
    dead: statement(
      "outbox.fail(dead)",
      `UPDATE ${t.outbox} SET status = 'DEAD', lease_until_ns = NULL, last_error = $3
WHERE seq = $2 AND status = 'PENDING' AND claimed_by = $1`,
    ),
    // $1 is the "requeued at <nowNs>: " prefix, built by the store so every substrate prints it alike.
    requeueAll: statement("outbox.requeue(all)", `UPDATE ${t.outbox} SET ${REQUEUED} WHERE status = 'DEAD'`),
    requeueSeqs: statement(
      "outbox.requeue(seqs)",
      `UPDATE ${t.outbox} SET ${REQUEUED} WHERE seq = ANY($2::bigint[]) AND status = 'DEAD'`,
    ),
    list: statement("outbox.list", `SELECT ${OUTBOX_COLUMNS} FROM ${t.outbox} ORDER BY seq LIMIT $1`),
    listByStatus: statement(
      "outbox.list(status)",
      `SELECT ${OUTBOX_COLUMNS} FROM ${t.outbox} WHERE status = $1 ORDER BY seq LIMIT $2`,
    ),
    counts: statement("outbox.counts", `SELECT status, count(*) AS count FROM ${t.outbox} GROUP BY status`),
  };
}
