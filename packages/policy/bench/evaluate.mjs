// Benchmark (not a test): CPU cost of evaluatePolicy per call, for a five-rule policy against none,
// so it can be set beside the engine's decision (a few hundred µs). Needs `npx tsc --build` first.
// Usage: node packages/policy/bench/evaluate.mjs [--seconds 2] [--calls 20000]
// Prints one JSON line per policy: µs of CPU (user+system) per call, and calls per CPU second.
// "five-rules" is a realistic mix (each call meets about two rules); "five-conditions" runs all five.

import { applyCounterUpdates, EMPTY_STATE, evaluatePolicy, loadPolicy } from "../dist/index.js";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const seconds = Number(flag("seconds", "2"));
const callCount = Number(flag("calls", "20000"));

const empty = loadPolicy({ version: 1, name: "none", rules: [] });
// Five rules of the kinds the examples use: two conditions over args, one over session counters,
// a rate limit and a budget, so every call passes a match, a CEL condition and a counter read.
const five = loadPolicy(`
version: 1
name: five
rules:
  - name: big-payments
    match: { tool: "payments.*" }
    when: "has(args.amount_usd) && args.amount_usd > 500"
    action: hitl
  - name: no-parent-paths
    match: { tool: "fs.*" }
    when: "has(args.path) && args.path.contains('..')"
    action: deny
    message: no '..' in paths
  - name: busy-sessions
    when: "session.calls > 10000 && session.repeat > 3"
    action: deny
    message: too busy
  - name: search-rate
    match: { tool: "search.*" }
    action: { rate: { limit: 1000000, window_s: 60, per: session } }
  - name: llm-budget
    match: { tool: "llm.*" }
    action: { budget_usd: { limit: 1000000, period: day } }
`);

// The worst case for five rules: each matches every call and runs its condition.
const fiveConditions = loadPolicy(`
version: 1
name: five-conditions
rules:
  - { name: c1, when: "has(args.amount_usd) && args.amount_usd > 100000", action: hitl }
  - { name: c2, when: "has(args.path) && args.path.startsWith('/etc/')", action: deny, message: m }
  - { name: c3, when: "session.calls > 10000 && session.repeat > 3", action: deny, message: m }
  - { name: c4, when: "tool.matches('^admin[.]') || agent == 'root'", action: deny, message: m }
  - { name: c5, when: "time.hour_utc < 0 || size(args.q) > 100000", action: hitl }
`);

// A mixed call stream: every rule's tool family, params of 50–300 bytes.
const tools = ["payments.send", "fs.read", "search.web", "llm.complete", "crm.lookup"];
const calls = Array.from({ length: callCount }, (_, i) => ({
  tool: tools[i % tools.length],
  agent: `agent-${i % 8}`,
  args: {
    amount_usd: (i * 37) % 900,
    path: `/workspace/src/file-${i % 50}.ts`,
    q: "x".repeat(20 + (i % 200)),
  },
  session: { id: `s${i % 16}`, calls: i % 500, repeat: i % 4 },
  estimate_usd: 0.01,
  time: { unix_s: 1_700_000_000 + Math.floor(i / 10) },
}));

function measure(policy) {
  let state = EMPTY_STATE;
  let n = 0;
  let verdicts = 0;
  const run = (limitMs) => {
    const until = performance.now() + limitMs;
    while (performance.now() < until) {
      for (let k = 0; k < 1000; k++) {
        const c = calls[n++ % calls.length];
        const r = evaluatePolicy(policy, c, state);
        if (r.counterUpdates.length > 0) state = applyCounterUpdates(state, r.counterUpdates, c.time.unix_s);
        if (r.verdict !== "ALLOW") verdicts++;
      }
    }
  };
  run(300); // warm-up: JIT and the planner's caches
  n = 0;
  const cpu0 = process.cpuUsage();
  run(seconds * 1000);
  const cpu = process.cpuUsage(cpu0);
  const cpuUs = cpu.user + cpu.system;
  return {
    calls: n,
    cpu_us_per_call: Number((cpuUs / n).toFixed(3)),
    calls_per_cpu_s: Math.round(n / (cpuUs / 1e6)),
    non_allow: verdicts,
  };
}

for (const [name, policy] of [
  ["none", empty],
  ["five-rules", five],
  ["five-conditions", fiveConditions],
]) {
  console.log(
    JSON.stringify({
      bench: "policy.evaluate",
      policy: name,
      rules: policy.rules.length,
      ...measure(policy),
    }),
  );
}
