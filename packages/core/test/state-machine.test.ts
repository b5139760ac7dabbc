// State-machine invariants of decide + feedback over random call sequences (docs/architecture.md §4).
import fc from "fast-check";
import { describe, it } from "vitest";
import { type Call, type Config, canonicalHash, decide, feedback, type State } from "../src/index.js";
import * as arb from "./arbitraries.js";

const opts = { numRuns: arb.RUNS };
const callSeq = fc.array(
  fc.record({
    tool_name: arb.tools,
    params: arb.ordinaryParams,
    nonce: arb.nonce,
    estimated_cost_usd: arb.money,
  }),
  { minLength: 1, maxLength: 30 },
);
const cfgArb = arb.config.map(
  (c) => ({ ...c, hitl_mode: c.hitl_mode === "always" ? "never" : c.hitl_mode }) as Config,
);

function run(config: Config, calls: Call[], start: State = {}) {
  let state: State = start;
  const trace: { call: Call; before: State; after: State; verdict: string; reason: string }[] = [];
  calls.forEach((call, i) => {
    const nowNs = 1e12 + i * 1e9;
    const decision = decide(config, state, call, { nowNs, rng: 0.5 });
    const after = feedback(config, state, call, decision, { nowNs });
    trace.push({ call, before: state, after, verdict: decision.verdict, reason: decision.reason });
    state = after;
  });
  return trace;
}

describe("decide + feedback invariants", () => {
  it("budget never increases and never goes negative", () => {
    fc.assert(
      fc.property(cfgArb, callSeq, (config, calls) =>
        run({ ...config, budget_usd: 1 }, calls, { budget_initial_usd: 1, budget_remaining_usd: 1 }).every(
          (t) =>
            t.after.budget_remaining_usd! <= t.before.budget_remaining_usd! &&
            t.after.budget_remaining_usd! >= 0,
        ),
      ),
      opts,
    );
  });

  it("repeat counts never decrease within a run of the same call", () => {
    fc.assert(
      fc.property(cfgArb, callSeq, (config, calls) =>
        run(config, calls).every((t, i, all) => {
          const prev = all[i - 1];
          if (!prev || t.verdict !== "ALLOW") return true;
          const same =
            prev.call.tool_name === t.call.tool_name &&
            canonicalHash(prev.call.params) === canonicalHash(t.call.params);
          if (!same) return true;
          return (
            (t.after.repeat_counts?.[t.call.tool_name] ?? 0) >=
            (t.before.repeat_counts?.[t.call.tool_name] ?? 0)
          );
        }),
      ),
      opts,
    );
  });

  it("once tripped, the circuit stays tripped and every later call is denied", () => {
    fc.assert(
      fc.property(cfgArb, callSeq, (config, calls) => {
        let tripped = false;
        return run(config, calls).every((t) => {
          if (tripped && (t.verdict !== "DENY" || !t.after.circuit_tripped)) return false;
          tripped ||= t.after.circuit_tripped === true;
          return true;
        });
      }),
      opts,
    );
  });

  it("a fresh state with ordinary params ALLOWs", () => {
    fc.assert(
      fc.property(arb.tools, arb.ordinaryParams, arb.nonce, (tool, params, nonce) => {
        return (
          decide(
            { budget_usd: 1, max_repeat_calls: 3 },
            { budget_initial_usd: 1, budget_remaining_usd: 1 },
            { tool_name: tool, params, nonce, estimated_cost_usd: 0.01 },
          ).verdict === "ALLOW"
        );
      }),
      opts,
    );
  });

  it("a nonce already accepted is always denied afterwards", () => {
    fc.assert(
      fc.property(cfgArb, callSeq, (config, calls) => {
        const accepted = new Set<unknown>();
        return run(config, calls).every((t) => {
          if (accepted.has(t.call.nonce) && t.verdict !== "DENY") return false;
          if (t.verdict === "ALLOW") accepted.add(t.call.nonce);
          return true;
        });
      }),
      opts,
    );
  });

  it("with hitl_mode always, no call is ever ALLOWed (HITL unless a higher rule denies)", () => {
    fc.assert(
      fc.property(cfgArb, callSeq, (config, calls) =>
        run({ ...config, hitl_mode: "always" }, calls).every((t) =>
          t.verdict === "HITL" ? t.reason === "hitl_all_calls" : t.verdict === "DENY",
        ),
      ),
      opts,
    );
  });
});
