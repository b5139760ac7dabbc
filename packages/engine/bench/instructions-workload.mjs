// The fixed workload instructions.mjs counts under callgrind: N evaluate() calls by 16 callers on one store.
// Not a benchmark by itself (it times nothing) and not a test; run it through instructions.mjs.
//
//   node instructions-workload.mjs ROOT memory|sqlite|postgres|none N [SQLITE_FILE | POSTGRES_URL]
//
// ROOT is the checkout whose built packages are loaded, so two builds can be counted alike. The
// environment's POLICY (five or empty, policy-rules.mjs) gives the engine that policy; unset, none.

import { createRequire } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { EMPTY_RULES, FIVE_RULES } from "./policy-rules.mjs";

const [root, store, n, file] = process.argv.slice(2);
const N = Number(n);
const CALLERS = 16;
const load = (pkg) => import(pathToFileURL(resolve(root, "packages", pkg, "dist", "index.js")).href);

const [{ createEngine }, { buildEntry, generateKeyPair }] = await Promise.all([
  load("engine"),
  load("chain"),
]);

if (store === "none") {
  // No engine and no store: only a decision's signed chain entry (canonical JSON, SHA-256, Ed25519),
  // with data shaped like the engine's (the machine reference's workload in `leash bench engine`).
  const { signer } = generateKeyPair();
  const data = {
    session_id: "instructions-s0",
    agent_id: "instructions",
    organization_id: "default",
    call_number: 1234,
    tool_name: "tool1",
    params_hash: "9f2c1e4b7a0d3c6e".repeat(4),
    nonce: "n1234",
    estimated_cost_usd: 0.001,
    verdict: "ALLOW",
    reason: "within_thresholds",
    budget_before_usd: "999998765.432",
    budget_after_usd: "999998765.431",
    reservation_id: "instructions-s0#1234",
    rng: null,
    operator_id: null,
    state: {
      circuit_tripped: false,
      total_calls: 1233,
      session_started_ns: "1790000000000000000",
      budget_initial_usd: 1_000_000_000,
      budget_remaining_usd: 999998765.432,
      repeat_counts: { tool1: 1 },
      seen_nonces: [],
    },
    now_ns: "1790000000012345678",
  };
  const head = { seq: 41, entry_hash: "a".repeat(64) };
  const chainId = "0192f0c4-0000-7000-8000-000000000000";
  for (let i = 0; i < N; i++) {
    buildEntry({ head, chainId, kind: "decision", data, signer, nowNs: 1.79e18 + i * 1000 });
  }
  console.log(`decided ${N}`);
  process.exit(0);
}

let substrate;
let dropSchema = async () => {};
if (store === "postgres") {
  // A schema of its own on the server at `file` (a postgres:// URL here), dropped at the end.
  const { openPostgresSubstrate } = await load("substrate-postgres");
  const schema = `leash_instructions_${process.pid}`;
  substrate = await openPostgresSubstrate({ url: file, schema });
  dropSchema = async () => {
    // pg as the substrate resolves it (the engine package does not depend on it).
    const pg = createRequire(resolve(root, "packages", "substrate-postgres", "package.json"))("pg");
    const client = new pg.Client({ connectionString: file });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  };
} else if (store === "sqlite") {
  const { openSqliteSubstrate } = await load("substrate-sqlite");
  substrate = await openSqliteSubstrate({ path: file });
} else {
  const { createMemorySubstrate } = await load("substrate-memory");
  substrate = await createMemorySubstrate();
}
await substrate.migrate?.();

const rules = { five: FIVE_RULES, empty: EMPTY_RULES }[process.env.POLICY ?? ""];
const policy = rules === undefined ? undefined : (await load("policy")).loadPolicy(rules);

// A fixed clock and rng: the same calls, states and entries in every run.
let nowNs = 1_790_000_000_000_000_000;
const engine = createEngine({
  substrate,
  signer: generateKeyPair().signer,
  clock: { nowNs: () => (nowNs += 1000) },
  rng: () => 0.5,
  ...(policy === undefined ? {} : { policy }),
});
const sessions = [];
for (let i = 0; i < CALLERS; i++) {
  const config = { budget_usd: 1_000_000_000, budget_scope: "agent" };
  sessions.push((await engine.register({ agent_id: "instructions", config })).session_id);
}

// The calls `leash bench engine` makes: ALLOW with a budget hold, params and nonces never repeating.
let seq = 0;
await Promise.all(
  sessions.map(async (session_id, caller) => {
    for (let k = 0; k < N / CALLERS; k++) {
      const s = seq++;
      const { verdict, reason } = await engine.evaluate({
        session_id,
        tool_name: `tool${s % 8}`,
        params: { q: `query ${s}`, page: s % 7, caller },
        nonce: `n${s}`,
        estimated_cost_usd: 0.001,
      });
      if (verdict !== "ALLOW") throw new Error(`call ${s}: ${verdict} ${reason}`);
    }
  }),
);
await substrate.close?.();
await dropSchema();
console.log(`decided ${seq}`);
