// Benchmark (not a test): `leash verify --replay`'s second pass, replayChain, on one core over a chain a
// real engine wrote (memory store): decide, feedback and the budget arithmetic per entry, no signatures.
// Prints one JSON line. Needs the built packages: `npx tsc --build` first.
// Usage: node packages/recovery/bench/replay.mjs [--entries 20000] [--sessions 64] [--rounds 5] [--save FILE]
import { writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { replayChain } from "../dist/index.js";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const wanted = Number(flag("entries", "20000"));
const sessionCount = Number(flag("sessions", "64"));
const rounds = Number(flag("rounds", "5"));

// A mix like real traffic: budgeted sessions with settlements, repeat limits, HITL, plain ALLOWs.
const substrate = createMemorySubstrate();
await substrate.migrate();
let now = 1_750_000_000_000_000_000;
const clock = { nowNs: () => (now += 1_000_000) };
const engine = createEngine({ substrate, signer: generateKeyPair().signer, clock, rng: () => 0.5 });
const configs = [
  { budget_usd: 1000, max_repeat_calls: 5 },
  { budget_usd: 50, default_estimate_usd: 0.01, hitl_budget_threshold: 0.1 },
  {},
  { hitl_mode: "always" },
  { max_total_calls: 1_000_000, window_max_calls: 100_000, window_duration_s: 60, error_amplification: true },
];
const sessions = [];
for (let i = 0; i < sessionCount; i++) {
  const config = configs[i % configs.length];
  sessions.push({ id: (await engine.register({ agent_id: `a${i}`, config })).session_id, config });
}
let entries = sessionCount;
for (let n = 0; entries < wanted; n++) {
  const s = sessions[n % sessions.length];
  const r = await engine.evaluate({
    session_id: s.id,
    tool_name: n % 3 === 0 ? "search" : "fetch",
    params: { q: `query ${n} ü`, page: n % 7, filters: { lang: "en", safe: true } },
    nonce: `n${n}`,
    estimated_cost_usd: 0.01,
  });
  entries++;
  if (r.verdict === "ALLOW" && r.reservation_id !== null && n % 2 === 0) {
    await engine.postExec({ session_id: s.id, call_number: r.call_number, actual_cost_usd: "0.005" });
    entries++;
  } else if (r.verdict === "HITL" && n % 4 === 1) {
    await engine.resume({ session_id: s.id, decision: "approve", operator_id: "op" });
    entries++;
  } else if (r.verdict === "DENY" && r.reason === "circuit_open") {
    await engine.reset(s.id, "op");
    entries++;
  }
}
const chain = await substrate.transaction((tx) => tx.chain.range(0, Number.MAX_SAFE_INTEGER));
// --save FILE keeps the chain (JSON) for profiling replay alone: node --cpu-prof on a script that loads it.
if (flag("save", "") !== "") writeFileSync(flag("save", ""), JSON.stringify(chain));

// Wall time moves 2x with the machine's load; the process's CPU time (all its threads, GC included)
// much less, so both are printed. The best of the rounds: the first one also pays for the JIT.
let bestWall = Number.POSITIVE_INFINITY;
let bestCpu = Number.POSITIVE_INFINITY;
let result;
for (let round = 0; round < rounds; round++) {
  const cpu = process.cpuUsage();
  const started = performance.now();
  result = await replayChain(chain);
  const used = process.cpuUsage(cpu);
  bestWall = Math.min(bestWall, (performance.now() - started) / 1000);
  bestCpu = Math.min(bestCpu, (used.user + used.system) / 1e6);
  if (!result.ok) throw new Error(`replay failed: ${result.mismatch.message}`);
}
console.log(
  JSON.stringify({
    bench: "replay",
    entries: chain.length,
    decisions: result.verdicts_checked,
    kinds: result.kinds,
    best_wall_seconds: Number(bestWall.toFixed(3)),
    entries_per_s: Math.round(chain.length / bestWall),
    entries_per_cpu_s: Math.round(chain.length / bestCpu),
    target_entries_per_s: 20_000,
    load_average_1m: Number(loadavg()[0].toFixed(2)),
    node: process.version,
  }),
);
