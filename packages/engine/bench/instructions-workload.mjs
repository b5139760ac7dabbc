// The fixed workload instructions.mjs counts under callgrind: N evaluate() calls by 16 callers on one store.
// Not a benchmark by itself (it times nothing) and not a test; run it through instructions.mjs.
//
//   node instructions-workload.mjs ROOT memory|sqlite N [SQLITE_FILE]
//
// ROOT is the checkout whose built packages are loaded, so two builds can be counted alike.

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [root, store, n, file] = process.argv.slice(2);
const N = Number(n);
const CALLERS = 16;
const load = (pkg) => import(pathToFileURL(resolve(root, "packages", pkg, "dist", "index.js")).href);

const [{ createEngine }, { generateKeyPair }] = await Promise.all([load("engine"), load("chain")]);
let substrate;
if (store === "sqlite") {
  const { openSqliteSubstrate } = await load("substrate-sqlite");
  substrate = await openSqliteSubstrate({ path: file });
} else {
  const { createMemorySubstrate } = await load("substrate-memory");
  substrate = await createMemorySubstrate();
}
await substrate.migrate?.();

// A fixed clock and rng: the same calls, states and entries in every run.
let nowNs = 1_790_000_000_000_000_000;
const engine = createEngine({
  substrate,
  signer: generateKeyPair().signer,
  clock: { nowNs: () => (nowNs += 1000) },
  rng: () => 0.5,
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
console.log(`decided ${seq}`);
