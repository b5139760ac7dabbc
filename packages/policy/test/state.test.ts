// Rate windows and budget periods as pure state transitions: (state, call) → outcome, then
// applyCounterUpdates(state, updates, now) → the next state. Time is an input; inputs are never mutated.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  applyCounterUpdates,
  budgetPeriod,
  EMPTY_STATE,
  evaluatePolicy,
  loadPolicy,
  type PolicyInput,
  type PolicyState,
  rateWindow,
} from "../src/index.js";

const policy = loadPolicy(`
version: 1
name: limits
rules:
  - { name: rate-tool, match: { tool: search }, action: { rate: { limit: 2, window_s: 60 } } }
  - { name: rate-agent, match: { tool: mail }, action: { rate: { limit: 1, window_s: 3600, per: agent } } }
  - { name: spend, match: { tool: llm }, action: { budget_usd: { limit: 1, period: day } } }
  - { name: spend-month, match: { tool: gpu }, action: { budget_usd: { limit: 10, period: month, per: session } } }
  - { name: after-limit, match: { tool: search }, when: "args.q == 'forbidden'", action: deny, message: no }
`);

/** Runs calls in order, threading the state as an engine would; returns each verdict:reason. */
function sequence(
  calls: PolicyInput[],
  start: PolicyState = EMPTY_STATE,
): { verdicts: string[]; state: PolicyState } {
  let state = start;
  const verdicts: string[] = [];
  for (const c of calls) {
    const r = evaluatePolicy(policy, c, state);
    verdicts.push(`${r.verdict}:${r.reason}`);
    state = applyCounterUpdates(state, r.counterUpdates, c.time.unix_s);
  }
  return { verdicts, state };
}

const at = (tool: string, unix_s: number, extra: Partial<PolicyInput> = {}): PolicyInput => ({
  tool,
  agent: "bot",
  // after-limit's condition reads args.q: a call without it would be a policy_error DENY.
  args: { q: "hello" },
  time: { unix_s },
  ...extra,
});

describe("rate windows", () => {
  it("counts calls per fixed window and starts afresh in the next", () => {
    const { verdicts, state } = sequence([
      at("search", 60),
      at("search", 61),
      at("search", 119),
      at("search", 120),
    ]);
    expect(verdicts).toEqual([
      "ALLOW:policy_allow:default",
      "ALLOW:policy_allow:default",
      "DENY:policy_violation:rule:rate-tool",
      "ALLOW:policy_allow:default",
    ]);
    // Only the live window is kept.
    expect(Object.values(state.counters)).toEqual([{ start: 120, end: 180, count: 1 }]);
  });

  it("per agent: another agent has its own count; a denied call is not counted", () => {
    const { verdicts } = sequence([
      at("mail", 0),
      at("mail", 10),
      at("mail", 20, { agent: "other" }),
      at("mail", 3600),
    ]);
    expect(verdicts.map((v) => v.split(":")[0])).toEqual(["ALLOW", "DENY", "ALLOW", "ALLOW"]);
  });

  it("a call a later rule denies uses no quota", () => {
    const { verdicts } = sequence([
      at("search", 0, { args: { q: "forbidden" } }),
      at("search", 1, { args: { q: "forbidden" } }),
      at("search", 2, { args: { q: "ok" } }),
      at("search", 3, { args: { q: "ok" } }),
    ]);
    expect(verdicts).toEqual([
      "DENY:policy_violation:rule:after-limit",
      "DENY:policy_violation:rule:after-limit",
      "ALLOW:policy_allow:default",
      "ALLOW:policy_allow:default",
    ]);
  });

  it("windows are aligned to multiples of their length", () => {
    expect(rateWindow(119, 60)).toEqual({ start: 60, end: 120 });
    expect(rateWindow(120, 60)).toEqual({ start: 120, end: 180 });
  });
});

describe("budget periods", () => {
  it("adds estimates in exact micro-dollars and refuses the call that would pass the limit", () => {
    const day = 86_400 * 20_000;
    const calls = [0.1, 0.2, 0.3, 0.4, 0.01].map((estimate_usd, i) => at("llm", day + i, { estimate_usd }));
    const { verdicts, state } = sequence(calls);
    // 0.1 + 0.2 + 0.3 + 0.4 is exactly 1 (not 1.0000000000000002): the fourth fits, the fifth does not.
    expect(verdicts.map((v) => v.split(":")[0])).toEqual(["ALLOW", "ALLOW", "ALLOW", "ALLOW", "DENY"]);
    expect(Object.values(state.counters)).toEqual([{ start: day, end: day + 86_400, count: 1_000_000 }]);
    // The next day starts at zero.
    expect(sequence([at("llm", day + 86_400, { estimate_usd: 1 })], state).verdicts[0]).toMatch(/^ALLOW/);
  });

  it("a budgeted call without an estimate is refused, never counted as free", () => {
    expect(sequence([at("llm", 0)]).verdicts).toEqual(["DENY:policy_violation:rule:spend"]);
  });

  it("months are UTC calendar months, per session", () => {
    const jan31 = Date.UTC(2026, 0, 31, 23, 59) / 1000;
    const feb1 = Date.UTC(2026, 1, 1) / 1000;
    expect(budgetPeriod(jan31, "month")).toEqual({ start: Date.UTC(2026, 0, 1) / 1000, end: feb1 });
    expect(budgetPeriod(Date.UTC(2026, 0, 7, 12) / 1000, "week").start).toBe(Date.UTC(2026, 0, 5) / 1000);
    const s = { id: "s1" };
    const { verdicts } = sequence([
      at("gpu", jan31, { estimate_usd: 9, session: s }),
      at("gpu", jan31, { estimate_usd: 2, session: s }),
      at("gpu", jan31, { estimate_usd: 2, session: { id: "s2" } }),
      at("gpu", feb1, { estimate_usd: 2, session: s }),
    ]);
    expect(verdicts.map((v) => v.split(":")[0])).toEqual(["ALLOW", "DENY", "ALLOW", "ALLOW"]);
  });
});

describe("a held call", () => {
  it("HITL carries the counters to apply if a human approves; DENY carries none", () => {
    const p = loadPolicy(`
version: 1
name: held
rules:
  - { name: rate, match: { tool: pay }, action: { rate: { limit: 5, window_s: 60 } } }
  - { name: big, match: { tool: pay }, when: "args.amount > 100", action: hitl }
  - { name: huge, match: { tool: pay }, when: "args.amount > 1000", action: deny, message: no }
`);
    const held = evaluatePolicy(p, at("pay", 0, { args: { amount: 500 } }), EMPTY_STATE);
    expect(held.verdict).toBe("HITL");
    expect(held.counterUpdates).toEqual([{ key: held.counterUpdates[0]?.key, start: 0, end: 60, add: 1 }]);
    const p2 = loadPolicy(p.canonical.replace('"args.amount > 100"', '"args.amount > 100000"'));
    const refused = evaluatePolicy(p2, at("pay", 0, { args: { amount: 5000 } }), EMPTY_STATE);
    expect(refused.verdict).toBe("DENY");
    expect(refused.counterUpdates).toEqual([]);
  });
});

describe("purity", () => {
  it("neither evaluation nor the transition changes its inputs", () => {
    const state: PolicyState = { counters: { k: { start: 0, end: 60, count: 1 } } };
    const frozen = JSON.stringify(state);
    const r = evaluatePolicy(policy, at("search", 10), state);
    const next = applyCounterUpdates(state, r.counterUpdates, 10);
    expect(JSON.stringify(state)).toBe(frozen);
    expect(next).not.toBe(state);
    expect(applyCounterUpdates(state, r.counterUpdates, 10)).toEqual(next);
  });
});

describe("the fold does not depend on order", () => {
  // Engines sharing a store may fold each other's decisions in another order than the chain's (and
  // their clocks differ a little): every order of the same decisions must give the same counters.
  const decision = fc.record({
    now: fc.integer({ min: 0, max: 400 }),
    updates: fc.array(
      fc.record({
        key: fc.constantFrom("a", "b"),
        window: fc.constantFrom(60, 100),
        add: fc.integer({ min: 1, max: 9 }),
      }),
      { maxLength: 3 },
    ),
  });
  const applied = (ds: { now: number; updates: { key: string; window: number; add: number }[] }[]) =>
    ds.reduce((state, d) => {
      const updates = d.updates.map((u) => ({
        key: `${u.key}${u.window}`,
        ...rateWindow(d.now, u.window),
        add: u.add,
      }));
      return applyCounterUpdates(state, updates, d.now);
    }, EMPTY_STATE);

  it("any permutation of the same decisions gives the same state", () => {
    fc.assert(
      fc.property(
        fc.array(decision, { maxLength: 8 }),
        fc.array(fc.nat(), { minLength: 8, maxLength: 8 }),
        (ds, keys) => {
          const shuffled = ds
            .map((d, i) => ({ d, k: keys[i] ?? 0 }))
            .sort((x, y) => x.k - y.k)
            .map((x) => x.d);
          expect(applied(shuffled)).toEqual(applied(ds));
        },
      ),
    );
  });

  it("an update for a window already over, or older than its key's, is not counted", () => {
    const later = applyCounterUpdates(EMPTY_STATE, [{ key: "k", start: 120, end: 180, add: 1 }], 130);
    const behind = applyCounterUpdates(later, [{ key: "k", start: 60, end: 120, add: 1 }], 119);
    expect(behind.counters).toEqual({ k: { start: 120, end: 180, count: 1 } });
    const over = applyCounterUpdates(
      { counters: {}, now: 200 },
      [{ key: "k", start: 120, end: 180, add: 1 }],
      150,
    );
    expect(over.counters).toEqual({});
  });
});
