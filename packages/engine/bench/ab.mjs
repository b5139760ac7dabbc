// Two builds of the engine in one process, on the in-memory store, timed in alternating slices (not a test):
// a ratio of their CPU per decision that a shared machine's drift from minute to minute mostly cancels out.
//
// Both checkouts must be built (`tsc --build`); their packages load side by side, each with its own
// copy of every module. Measure the same build against itself first to see this machine's noise.
//
//   node packages/engine/bench/ab.mjs /path/to/base-checkout /path/to/new-checkout
//
// Environment: SLICES (default 20 per build), SLICE (decisions per slice, default 1600), CALLERS (16).
// Prints one JSON line: each build's CPU µs per decision and new/base (below 1: the new build is cheaper).

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [baseRoot, newRoot] = process.argv.slice(2);
if (baseRoot === undefined || newRoot === undefined) {
  console.error("usage: node packages/engine/bench/ab.mjs BASE_CHECKOUT NEW_CHECKOUT");
  process.exit(2);
}
const SLICES = Number(process.env.SLICES ?? 20);
const SLICE = Number(process.env.SLICE ?? 1600);
const CALLERS = Number(process.env.CALLERS ?? 16);

const load = (root, pkg) => import(pathToFileURL(resolve(root, "packages", pkg, "dist", "index.js")).href);

/** One build's engine on a fresh memory store with CALLERS sessions; returns "run n decisions". */
async function workload(root) {
  const [{ createEngine }, { createMemorySubstrate }, { generateKeyPair }] = await Promise.all([
    load(root, "engine"),
    load(root, "substrate-memory"),
    load(root, "chain"),
  ]);
  const substrate = await createMemorySubstrate();
  await substrate.migrate?.();
  const engine = createEngine({ substrate, signer: generateKeyPair().signer });
  const sessions = [];
  for (let i = 0; i < CALLERS; i++) {
    const config = { budget_usd: 1_000_000_000, budget_scope: "agent" };
    sessions.push((await engine.register({ agent_id: "ab", config })).session_id);
  }
  let seq = 0;
  // The calls `leash bench engine` makes: ALLOW with a budget hold, params and nonces never repeating.
  return (n) =>
    Promise.all(
      sessions.map(async (session_id, caller) => {
        for (let k = 0; k < n / CALLERS; k++) {
          const s = seq++;
          const r = await engine.evaluate({
            session_id,
            tool_name: `tool${s % 8}`,
            params: { q: `query ${s}`, page: s % 7, caller },
            nonce: `n${s}`,
            estimated_cost_usd: 0.001,
          });
          if (r.verdict !== "ALLOW") throw new Error(`${root}: ${r.verdict} ${r.reason}`);
        }
      }),
    );
}

async function cpuOf(run, n) {
  const before = process.cpuUsage();
  await run(n);
  const { user, system } = process.cpuUsage(before);
  return user + system;
}

const base = await workload(baseRoot);
const next = await workload(newRoot);
await base(SLICE * 2); // warm-up: JIT and the stores' first rows
await next(SLICE * 2);
let baseUs = 0;
let newUs = 0;
for (let i = 0; i < SLICES; i++) {
  // Alternate which goes first, so neither always runs right after the other's garbage.
  if (i % 2 === 0) {
    baseUs += await cpuOf(base, SLICE);
    newUs += await cpuOf(next, SLICE);
  } else {
    newUs += await cpuOf(next, SLICE);
    baseUs += await cpuOf(base, SLICE);
  }
}
const decisions = SLICES * SLICE;
console.log(
  JSON.stringify({
    bench: "engine-ab",
    store: "memory",
    decisions_each: decisions,
    base_cpu_us_per_decision: Number((baseUs / decisions).toFixed(1)),
    new_cpu_us_per_decision: Number((newUs / decisions).toFixed(1)),
    new_over_base: Number((newUs / baseUs).toFixed(3)),
    node: process.version,
  }),
);
