// The floor under `leash bench engine` on SQLite (not a test): the same reads and five writes per decision,
// the same signed chain entry and receipt, group-committed and durable — with the engine's own logic taken out.
//
// No decide, feedback, budget arithmetic or audit-data copying: each decision writes fixed-shape rows
// through the real SQLite substrate, so what it measures is the least a durable, signed decision
// costs on this machine with Leash's store. Compare it with `bench engine` in the same minutes.
//
// Run after `tsc --build` (it imports dist):  node packages/engine/bench/floor.mjs
// Environment: DURATION (seconds measured, default 10; not SECONDS, which bash keeps for itself),
// CONCURRENCY (default 16), SIGN=0 to put a fixed string where the signature goes (the signature's
// share of the floor), DB (default a new file in the temp directory).

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildEntry, chainIdOf, compactJws, generateKeyPair } from "@leash/chain";
import { enqueueEntry } from "@leash/outbox";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";

const SECONDS = Number(process.env.DURATION ?? 10);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 16);
const SIGN = process.env.SIGN !== "0";
const WARMUP_SECONDS = 1;
const ACCOUNT = "agent:floor";

const dir = process.env.DB === undefined ? mkdtempSync(join(tmpdir(), "leash-floor-")) : null;
const path = process.env.DB ?? join(dir, "floor.db");
const { signer: realSigner } = generateKeyPair();
// SIGN=0: the same 64 bytes every time, so everything but the signature's computation is kept.
const fixed = realSigner.sign(new Uint8Array(1));
const signer = SIGN ? realSigner : { ...realSigner, sign: () => fixed, implementation: "none" };

const substrate = await openSqliteSubstrate({ path });
await substrate.migrate();

let nowNs = Date.now() * 1e6;
const tick = () => (nowNs += 1000);
const sessions = Array.from({ length: CONCURRENCY }, (_, i) => `floor-s${i}`);
let chainId = null;

// Sessions and the shared account, as `bench engine` registers them (one genesis entry first).
await substrate.transaction(async (tx) => {
  const at = tick();
  const genesis = buildEntry({ head: null, kind: "floor_start", data: {}, signer, nowNs: at });
  await tx.chain.append(genesis);
  chainId = chainIdOf(genesis);
  await tx.budgets.insertAccount({
    account_id: ACCOUNT,
    scope: "agent",
    parent_id: null,
    limit_usd: "1000000000",
    spent_usd: "0",
    reserved_usd: "0",
    created_ns: at,
    updated_ns: at,
  });
  for (const session_id of sessions) {
    await tx.sessions.insert({
      session_id,
      agent_id: "floor",
      organization_id: "default",
      status: "ACTIVE",
      config: { budget_usd: 1_000_000_000, budget_scope: "agent" },
      state: { circuit_tripped: false, total_calls: 0, session_started_ns: at },
      call_count: 0,
      created_ns: at,
      updated_ns: at,
      last_heartbeat_ns: at,
    });
  }
});

let seq = 0;
/** One decision's store work: the engine's reads and writes, with fixed-shape values. */
function decision(tx, sessionId) {
  return (async () => {
    const n = seq++;
    const nonce = `0.${n}`;
    const [session, seen] = await Promise.all([tx.sessions.get(sessionId), tx.nonces.has(sessionId, nonce)]);
    if (session === null || seen) throw new Error("floor: unexpected state");
    const [account, head] = await Promise.all([tx.budgets.getAccount(ACCOUNT), tx.chain.head()]);
    const at = tick();
    const callNumber = session.call_count + 1;
    const reservationId = `${sessionId}#${callNumber}`;
    const reserved = `${n}.001`;
    await Promise.all([
      tx.budgets.updateAccount({ ...account, reserved_usd: reserved, updated_ns: at }),
      tx.budgets.insertReservation({
        reservation_id: reservationId,
        account_ids: [ACCOUNT],
        session_id: sessionId,
        call_number: callNumber,
        amount_usd: "0.001",
        actual_usd: null,
        status: "PENDING",
        idempotency_key: null,
        created_ns: at,
        expires_ns: at + 300e9,
        resolved_ns: null,
      }),
    ]);
    const state = { ...session.state, total_calls: callNumber, last_activity_ns: at };
    const entry = buildEntry({
      head,
      chainId,
      kind: "decision",
      signer,
      nowNs: at,
      data: {
        session_id: sessionId,
        agent_id: session.agent_id,
        organization_id: session.organization_id,
        call_number: callNumber,
        tool_name: "search",
        params_hash: "9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e",
        nonce,
        estimated_cost_usd: 0.001,
        verdict: "ALLOW",
        reason: "within_thresholds",
        budget_before_usd: "999998765.432",
        budget_after_usd: "999998765.431",
        reservation_id: reservationId,
        rng: null,
        operator_id: null,
        // Nanosecond times as decimal strings, as the engine's audit data has them.
        state: {
          circuit_tripped: false,
          total_calls: session.state.total_calls,
          session_started_ns: String(session.state.session_started_ns),
          last_activity_ns: String(session.state.last_activity_ns ?? at),
          seen_nonces: [],
        },
        now_ns: String(at),
      },
    });
    await Promise.all([
      tx.sessions.update({ ...session, state, call_count: callNumber, updated_ns: at }),
      // The entry spends the nonce (its indexed nonce column), as the engine's decision entry does.
      tx.chain.append({ ...entry, nonce }),
      enqueueEntry(tx, entry),
    ]);
    return entry;
  })();
}

async function run(seconds) {
  const deadline = performance.now() + seconds * 1000;
  let done = 0;
  await Promise.all(
    sessions.map(async (sessionId) => {
      while (performance.now() < deadline) {
        const entry = await substrate.transaction((tx) => decision(tx, sessionId));
        compactJws(entry); // the receipt, built after COMMIT as evaluate does
        done++;
      }
    }),
  );
  return done;
}

try {
  await run(WARMUP_SECONDS);
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const decisions = await run(SECONDS);
  const seconds = (performance.now() - t0) / 1000;
  const { user, system } = process.cpuUsage(cpu);
  console.log(
    JSON.stringify({
      bench: "floor",
      store: "sqlite",
      concurrency: CONCURRENCY,
      signed: SIGN,
      signer: signer.implementation ?? "custom",
      seconds: Number(seconds.toFixed(3)),
      decisions,
      decisions_per_sec: Math.round(decisions / seconds),
      cpu_us_per_decision: Math.round((user + system) / decisions),
      node: process.version,
    }),
  );
} finally {
  await substrate.close();
  if (dir !== null) rmSync(dir, { recursive: true, force: true });
}
