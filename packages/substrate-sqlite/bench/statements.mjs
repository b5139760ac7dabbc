// The SQLite floor of one decision (not a test): the five writes, the nonce read and COMMIT that
// the substrate runs per `bench engine` decision, as bare better-sqlite3 statements, each statement kind timed.
//
// No substrate, engine, signature or fsync: what is left is SQLite's own cost on this machine for the
// rows a decision writes, with the schema and pragmas the substrate uses. WAL checkpoints run inside
// COMMIT here (SQLite's default) unless CHECKPOINT=none; the substrate runs them on a worker thread.
//
// Run after `tsc --build` (it imports dist):  node packages/substrate-sqlite/bench/statements.mjs
// Environment: BATCHES (default 4000), BATCH (decisions per COMMIT, default 7 as `bench engine` gets
// here), SESSIONS (default 16), SAVEPOINTS=1 (a savepoint per decision, as the substrate takes only in the
// batches after a failed transaction that had written undid its batch), CHECKPOINT=none.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { DECISION_SQL } from "../dist/decision-sql.js";
import { MIGRATIONS } from "../dist/index.js";

const BATCHES = Number(process.env.BATCHES ?? 4000);
const BATCH = Number(process.env.BATCH ?? 7);
const SESSIONS = Number(process.env.SESSIONS ?? 16);
const SAVEPOINTS = process.env.SAVEPOINTS === "1";
const CHECKPOINT = process.env.CHECKPOINT === "none" ? "none" : "inline";

const dir = mkdtempSync(join(tmpdir(), "leash-statements-"));
const db = new Database(join(dir, "statements.db"));
db.pragma("journal_mode = WAL");
db.pragma("synchronous = NORMAL"); // the substrate's setting: its fsync runs on another thread
db.pragma("mmap_size = 268435456");
db.pragma("cache_size = -65536");
db.pragma("temp_store = MEMORY");
db.pragma(`wal_autocheckpoint = ${CHECKPOINT === "none" ? 0 : 1000}`);
db.exec("BEGIN");
for (const migration of MIGRATIONS) db.exec(migration.sql);
db.exec("COMMIT");

// The substrate's own statement texts (src/decision-sql.ts, which stores.ts runs): what is timed here
// is what the substrate runs.
const sql = {
  begin: db.prepare("BEGIN IMMEDIATE"),
  savepoint: db.prepare("SAVEPOINT leash_tx"),
  nonceHas: db.prepare(DECISION_SQL.nonceHas),
  account: db.prepare(DECISION_SQL.accountUpdate),
  reservation: db.prepare(DECISION_SQL.reservationInsert),
  session: db.prepare(DECISION_SQL.sessionUpdateKeepingStatus),
  chain: db.prepare(DECISION_SQL.chainInsert),
  outbox: db.prepare(DECISION_SQL.outboxInsert),
  release: db.prepare("RELEASE leash_tx"),
  commit: db.prepare("COMMIT"),
};

const T0 = 1_790_000_000_000_000_000;
const CONFIG = JSON.stringify({ budget_usd: 1_000_000_000, budget_scope: "agent" });
const STATE = JSON.stringify({
  circuit_tripped: false,
  total_calls: 1233,
  session_started_ns: T0,
  budget_initial_usd: 1_000_000_000,
  budget_remaining_usd: 999998765.432,
  repeat_counts: { search: 1 },
  last_tool_name: "search",
  last_tool_params_hash: "9f".repeat(32),
  last_activity_ns: T0,
});
const BODY = "b".repeat(980); // a decision entry's canonical body is ~980 bytes
const HASH = "ab".repeat(32);
const SIGNATURE = "s".repeat(86); // 64 bytes, base64url
const sessionId = (i) => `bench-0123abcd-p0-s${i}`;

db.exec("BEGIN");
db.prepare(
  "INSERT INTO leash_budget_accounts VALUES ('agent:bench', 'agent', NULL, '1000000000', '0', '0', 1, 1, NULL)",
).run();
const addSession = db.prepare(
  "INSERT INTO leash_sessions VALUES (?, 'bench', 'default', 'ACTIVE', ?, ?, 0, 1, 1, 1, NULL)",
);
for (let i = 0; i < SESSIONS; i++) addSession.run(sessionId(i), CONFIG, STATE);
db.exec("COMMIT");

const spent = Object.fromEntries(Object.keys(sql).map((name) => [name, 0n]));
let timing = false;
function run(name, statement, ...args) {
  if (!timing) return statement[statement.reader ? "get" : "run"](...args);
  const t0 = process.hrtime.bigint();
  const result = statement[statement.reader ? "get" : "run"](...args);
  spent[name] += process.hrtime.bigint() - t0;
  return result;
}

let n = 0;
function decision() {
  n++;
  const session = sessionId(n % SESSIONS);
  const nonce = `s:0.${n}`;
  const at = T0 + n * 1000;
  const entryId = `0192f0c4-0000-7000-8000-${String(n).padStart(12, "0")}`;
  run("nonceHas", sql.nonceHas, { session_id: session, nonce });
  run("account", sql.account, {
    account_id: "agent:bench",
    scope: "agent",
    parent_id: null,
    limit_usd: "1000000000",
    spent_usd: "0",
    reserved_usd: `${n}.001`,
    created_ns: 1,
    updated_ns: at,
    at_seq: n,
  });
  run("reservation", sql.reservation, {
    reservation_id: `${session}#${n}`,
    account_ids: '["agent:bench"]',
    session_id: session,
    call_number: n,
    amount_usd: "0.001",
    actual_usd: null,
    status: "PENDING",
    idempotency_key: null,
    created_ns: at,
    expires_ns: at + 300e9,
    resolved_ns: null,
  });
  run("session", sql.session, {
    session_id: session,
    agent_id: "bench",
    organization_id: "default",
    status: "ACTIVE",
    config: CONFIG,
    state: STATE,
    call_count: n,
    created_ns: 1,
    updated_ns: at,
    at_seq: n,
  });
  run("chain", sql.chain, {
    seq: n,
    entry_id: entryId,
    entry_hash: HASH,
    prev_hash: HASH,
    body: BODY,
    signature: SIGNATURE,
    key_id: "0123456789abcdef",
    kind: "decision",
    session_id: session,
    created_ns: at,
    nonce,
  });
  run("outbox", sql.outbox, n, entryId, session, at);
}

function batch() {
  run("begin", sql.begin);
  for (let i = 0; i < BATCH; i++) {
    if (SAVEPOINTS) run("savepoint", sql.savepoint);
    decision();
    if (SAVEPOINTS) run("release", sql.release);
  }
  run("commit", sql.commit);
}

try {
  for (let i = 0; i < Math.min(2000, BATCHES); i++) batch(); // warm: caches, JIT, a WAL of some size
  timing = true;
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < BATCHES; i++) batch();
  const wallUs = (performance.now() - t0) * 1000;
  const { user, system } = process.cpuUsage(cpu);
  const decisions = BATCHES * BATCH;
  const perDecision = (value) => Number((Number(value) / 1000 / decisions).toFixed(2));
  console.log(
    JSON.stringify({
      bench: "sqlite-statements",
      batch: BATCH,
      sessions: SESSIONS,
      savepoints: SAVEPOINTS,
      checkpoint: CHECKPOINT,
      decisions,
      us_per_decision: Number((wallUs / decisions).toFixed(1)),
      cpu_us_per_decision: Number(((user + system) / decisions).toFixed(1)),
      // Wall time inside each statement kind, per decision (COMMIT's share spread over its batch).
      statement_us: Object.fromEntries(Object.entries(spent).map(([name, ns]) => [name, perDecision(ns)])),
      node: process.version,
    }),
  );
} finally {
  db.close();
  rmSync(dir, { recursive: true, force: true });
}
