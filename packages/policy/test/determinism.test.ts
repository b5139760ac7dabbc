// Property: evaluation is deterministic — the same policy, call and state give the same outcome, and
// reordering rules that do not apply to the call (another tool) changes nothing.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  applyCounterUpdates,
  EMPTY_STATE,
  evaluatePolicy,
  loadPolicy,
  type PolicyInput,
} from "../src/index.js";

const TOOLS = ["t0", "t1", "t2", "t3"];

const action = fc.oneof(
  fc.constantFrom("allow", "deny", "hitl"),
  fc.record({
    rate: fc.record({ limit: fc.integer({ min: 1, max: 3 }), window_s: fc.constantFrom(10, 60) }),
  }),
  fc.record({ max_repeat: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ estimate_usd: fc.constantFrom(0.1, 0.5) }),
  fc.record({
    budget_usd: fc.record({ limit: fc.constantFrom(0.3, 1), period: fc.constantFrom("hour", "day") }),
  }),
  fc.constant({ require_estimate: true }),
);
const when = fc.option(
  fc.constantFrom(
    "has(args.n) && args.n > 5",
    "args.n < 3",
    "session.calls > 2",
    "time.unix_s % 2 == 0",
    "[1, 2, 3].exists(x, x == session.repeat)",
  ),
  { nil: undefined },
);
const rule = fc.record({
  tool: fc.constantFrom(...TOOLS),
  action,
  when,
  monitor: fc.boolean(),
});
const input = fc.record({
  tool: fc.constantFrom(...TOOLS),
  n: fc.option(fc.integer({ min: 0, max: 10 }), { nil: undefined }),
  calls: fc.nat(5),
  repeat: fc.nat(4),
  estimate: fc.option(fc.constantFrom(0.1, 0.2, 0.7), { nil: undefined }),
  unix_s: fc.integer({ min: 0, max: 200 }),
});

type Rule = typeof rule extends fc.Arbitrary<infer R> ? R : never;

function policyOf(rules: readonly (Rule & { name: string })[], deny: boolean) {
  return loadPolicy({
    version: 1,
    name: "prop",
    default: deny ? "deny" : "allow",
    rules: rules.map((r) => ({
      name: r.name,
      match: { tool: r.tool },
      action: r.action,
      ...(r.action === "deny" ? { message: "no" } : {}),
      ...(r.when === undefined ? {} : { when: r.when }),
      ...(r.monitor ? { mode: "monitor" } : {}),
    })),
  });
}

function callOf(i: typeof input extends fc.Arbitrary<infer I> ? I : never): PolicyInput {
  return {
    tool: i.tool,
    agent: "a",
    args: i.n === undefined ? {} : { n: i.n },
    session: { id: "s", calls: i.calls, repeat: i.repeat },
    ...(i.estimate === undefined ? {} : { estimate_usd: i.estimate }),
    time: { unix_s: i.unix_s },
  };
}

/** The outcome without the policy hash and `counted` (which name the rule order, so differ when rules move). */
function outcome(p: ReturnType<typeof policyOf>, calls: PolicyInput[]) {
  let state = EMPTY_STATE;
  return calls.map((c) => {
    const { policy_hash: _, counted: _counted, ...r } = evaluatePolicy(p, c, state);
    state = applyCounterUpdates(state, r.counterUpdates, c.time.unix_s);
    return r;
  });
}

describe("policy evaluation is deterministic", () => {
  it("same inputs, same outcome; unrelated rules in any order, same outcome", () => {
    fc.assert(
      fc.property(
        fc.array(rule, { minLength: 1, maxLength: 8 }),
        fc.array(input, { minLength: 1, maxLength: 6 }),
        fc.boolean(),
        fc.array(fc.nat(), { minLength: 8, maxLength: 8 }),
        (raw, inputs, deny, keys) => {
          const rules = raw.map((r, i) => ({ ...r, name: `r${i}` }));
          const tool = inputs[0]?.tool as string;
          const calls = inputs.map((i) => callOf({ ...i, tool }));
          const p = policyOf(rules, deny);
          const first = outcome(p, calls);
          expect(outcome(p, calls)).toEqual(first);
          // Any permutation, then the call's own rules put back in their order in the places they landed:
          // every order of the unrelated rules around them.
          const permuted = rules
            .map((r, i) => ({ r, k: keys[i] ?? 0 }))
            .sort((a, b) => a.k - b.k)
            .map((x) => x.r);
          const own = rules.filter((r) => r.tool === tool);
          let next = 0;
          const mixed = permuted.map((r) => (r.tool === tool ? (own[next++] as typeof r) : r));
          expect(outcome(policyOf(mixed, deny), calls)).toEqual(first);
        },
      ),
      { numRuns: 300 },
    );
  });
});
