// The policy layer's cost (not a test): one engine with no policy and one with a five-rule policy, on the
// in-memory store in one process (and one with an empty policy), timed in rotating slices, so a shared machine's drift mostly cancels.
//
//   node packages/engine/bench/policy.mjs        (after `npx tsc --build`)
//
// Environment: SLICES (default 20 per engine), SLICE (decisions per slice, default 1600), CALLERS (16).
// Every call is ALLOW with a budget hold (the calls `leash bench engine` makes); the policy's rules
// (policy-rules.mjs) all run on them and decide nothing else. `POLICY=five node instructions.mjs` counts
// the same five rules' instructions, which the machine's load does not move.
// Prints one JSON line: each engine's CPU µs per decision and five/none (the target is ≤ 1.10).

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { EMPTY_RULES, FIVE_RULES } from "./policy-rules.mjs";

const SLICES = Number(process.env.SLICES ?? 20);
const SLICE = Number(process.env.SLICE ?? 1600);
const CALLERS = Number(process.env.CALLERS ?? 16);
const root = resolve(import.meta.dirname, "..", "..", "..");
const load = (pkg) => import(pathToFileURL(resolve(root, "packages", pkg, "dist", "index.js")).href);

const [{ createEngine }, { createMemorySubstrate }, { generateKeyPair }, { loadPolicy }] = await Promise.all([
  load("engine"),
  load("substrate-memory"),
  load("chain"),
  load("policy"),
]);

/** An engine on a fresh memory store with CALLERS sessions; returns "run n decisions". */
async function workload(policy) {
  const substrate = await createMemorySubstrate();
  await substrate.migrate?.();
  const engine = createEngine({
    substrate,
    signer: generateKeyPair().signer,
    ...(policy === undefined ? {} : { policy }),
  });
  const sessions = [];
  for (let i = 0; i < CALLERS; i++) {
    const config = { budget_usd: 1_000_000_000, budget_scope: "agent" };
    sessions.push((await engine.register({ agent_id: "bench", config })).session_id);
  }
  let seq = 0;
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
          if (r.verdict !== "ALLOW") throw new Error(`${policy?.name ?? "none"}: ${r.verdict} ${r.reason}`);
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

// A policy with no rules too: what recording the policy in every entry costs, apart from the rules.
const none = await workload(undefined);
const empty = await workload(loadPolicy(EMPTY_RULES));
const five = await workload(loadPolicy(FIVE_RULES));
const runs = [none, empty, five];
const us = [0, 0, 0];
for (const run of runs) await run(SLICE * 2); // warm-up: JIT, the compiled conditions, the first rows
for (let i = 0; i < SLICES; i++) {
  // Rotate which goes first, so none always runs right after another's garbage.
  for (let k = 0; k < runs.length; k++) {
    const j = (i + k) % runs.length;
    us[j] += await cpuOf(runs[j], SLICE);
  }
}
const decisions = SLICES * SLICE;
const perDecision = (x) => Number((x / decisions).toFixed(1));
console.log(
  JSON.stringify({
    bench: "engine-policy",
    store: "memory",
    decisions_each: decisions,
    none_cpu_us_per_decision: perDecision(us[0]),
    empty_policy_cpu_us_per_decision: perDecision(us[1]),
    five_rules_cpu_us_per_decision: perDecision(us[2]),
    empty_over_none: Number((us[1] / us[0]).toFixed(3)),
    five_over_none: Number((us[2] / us[0]).toFixed(3)),
    node: process.version,
  }),
);
