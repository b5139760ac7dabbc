// evaluatePolicy: each action, first-match order, allow-list default, monitor mode, fail-closed
// conditions and the policy's scope. Every call goes through a policy loaded from text, as a user's would.
import { describe, expect, it } from "vitest";
import { EMPTY_STATE, evaluatePolicy, limits, loadPolicy, type PolicyInput } from "../src/index.js";

const T = { unix_s: 1_700_000_000 };
const call = (tool: string, extra: Partial<PolicyInput> = {}): PolicyInput => ({
  tool,
  agent: "bot",
  time: T,
  ...extra,
});

describe("actions", () => {
  const policy = loadPolicy(`
version: 1
name: actions
rules:
  - { name: a-allow, match: { tool: a }, action: allow }
  - { name: a-deny, match: { tool: a }, action: deny, message: never reached }
  - { name: b-deny, match: { tool: b }, action: deny, message: no b for you }
  - { name: c-hitl, match: { tool: c }, action: hitl }
  - { name: d-repeat, match: { tool: d }, action: { max_repeat: 2 } }
  - { name: e-estimate, match: { tool: e }, action: { require_estimate: true } }
  - { name: f-default-estimate, match: { tool: "f*" }, action: { estimate_usd: 0.25 } }
  - { name: f-needs-one, match: { tool: "f*" }, action: { require_estimate: true } }
`);
  const run = (input: PolicyInput) => evaluatePolicy(policy, input, EMPTY_STATE);

  it("allow decides with its own reason, and names the policy version", () => {
    expect(run(call("a"))).toMatchObject({
      verdict: "ALLOW",
      rule: "a-allow",
      reason: "policy_allow:rule:a-allow",
    });
    expect(run(call("a")).policy_hash).toBe(policy.hash);
  });
  it("deny carries its message for the agent", () => {
    expect(run(call("b"))).toMatchObject({
      verdict: "DENY",
      rule: "b-deny",
      reason: "policy_violation:rule:b-deny",
      message: "no b for you",
    });
  });
  it("hitl asks a human", () => {
    expect(run(call("c"))).toMatchObject({ verdict: "HITL", reason: "policy_hitl:rule:c-hitl" });
    expect(run(call("c")).message).toContain("c-hitl");
  });
  it("max_repeat refuses the call repeated that many times before", () => {
    expect(run(call("d", { session: { repeat: 1 } })).verdict).toBe("ALLOW");
    expect(run(call("d", { session: { repeat: 2 } }))).toMatchObject({
      verdict: "DENY",
      reason: "policy_violation:rule:d-repeat",
    });
  });
  it("require_estimate refuses a call without a finite, non-negative estimate", () => {
    expect(run(call("e")).reason).toBe("policy_violation:rule:e-estimate");
    expect(run(call("e", { estimate_usd: Number.NaN })).verdict).toBe("DENY");
    expect(run(call("e", { estimate_usd: -1 })).verdict).toBe("DENY");
    expect(run(call("e", { estimate_usd: 0 })).verdict).toBe("ALLOW");
  });
  it("estimate_usd supplies an estimate to later rules and reports it, only when the call has none", () => {
    expect(run(call("f1"))).toMatchObject({ verdict: "ALLOW", estimate_usd: 0.25 });
    expect(run(call("f1", { estimate_usd: 3 }))).toMatchObject({ verdict: "ALLOW", estimate_usd: undefined });
  });
  it("a call no rule matches gets the default, allow", () => {
    expect(run(call("zzz"))).toMatchObject({
      verdict: "ALLOW",
      rule: undefined,
      reason: "policy_allow:default",
    });
  });
});

describe("order and matching", () => {
  it("the first rule that matches decides; a false condition passes to the next", () => {
    const p = loadPolicy(`
version: 1
name: order
rules:
  - { name: small, match: { tool: "pay.*" }, when: "args.amount < 10", action: allow }
  - { name: large, match: { tool: "pay.*" }, when: "args.amount > 1000", action: deny, message: too much }
  - { name: rest, match: { tool: "pay.*" }, action: hitl }
`);
    const run = (amount: number) =>
      evaluatePolicy(p, call("pay.send", { args: { amount } }), EMPTY_STATE).rule;
    expect([run(5), run(5000), run(500)]).toEqual(["small", "large", "rest"]);
    expect(evaluatePolicy(p, call("paying"), EMPTY_STATE).rule).toBeUndefined();
  });

  it("matches agent globs and requires every listed tag", () => {
    const p = loadPolicy(`
version: 1
name: m
rules:
  - { name: ops, match: { agent: ["ops-*", "admin"], tags: [write, prod] }, action: hitl }
`);
    const run = (agent: string, tags: string[]) =>
      evaluatePolicy(p, call("x", { agent, tags }), EMPTY_STATE).verdict;
    expect(run("ops-1", ["write", "prod", "db"])).toBe("HITL");
    expect(run("admin", ["prod", "write"])).toBe("HITL");
    expect(run("ops-1", ["write"])).toBe("ALLOW");
    expect(run("dev-1", ["write", "prod"])).toBe("ALLOW");
  });

  it("a glob matches the whole name, with regular-expression characters taken literally", () => {
    const p = loadPolicy(
      `version: 1\nname: g\nrules: [{ name: g, match: { tool: "fs.(read)?" }, action: deny, message: m }]\n`,
    );
    expect(evaluatePolicy(p, call("fs.(read)x"), EMPTY_STATE).verdict).toBe("DENY");
    expect(evaluatePolicy(p, call("fs.read"), EMPTY_STATE).verdict).toBe("ALLOW");
    expect(evaluatePolicy(p, call("xfs.(read)x"), EMPTY_STATE).verdict).toBe("ALLOW");
  });

  it("a policy for one agent glob or organization leaves everyone else alone", () => {
    const p = loadPolicy(`version: 1\nname: s\norg: acme\nagent: "billing-*"\ndefault: deny\nrules: []\n`);
    expect(evaluatePolicy(p, call("x", { agent: "billing-1", org: "acme" }), EMPTY_STATE).verdict).toBe(
      "DENY",
    );
    expect(evaluatePolicy(p, call("x", { agent: "search-1", org: "acme" }), EMPTY_STATE).reason).toBe(
      "policy_allow:not_in_scope",
    );
    expect(evaluatePolicy(p, call("x", { agent: "billing-1", org: "other" }), EMPTY_STATE).verdict).toBe(
      "ALLOW",
    );
  });
});

describe("default: deny (allow-list mode)", () => {
  const p = loadPolicy(`
version: 1
name: allow-list
default: deny
rules:
  - { name: read, match: { tool: [fs.read, fs.list] }, action: allow }
`);
  it("allows only what a rule allows", () => {
    expect(evaluatePolicy(p, call("fs.read"), EMPTY_STATE).verdict).toBe("ALLOW");
    expect(evaluatePolicy(p, call("fs.write"), EMPTY_STATE)).toMatchObject({
      verdict: "DENY",
      rule: undefined,
      reason: "policy_violation:default_deny",
    });
    expect(evaluatePolicy(p, call("fs.write"), EMPTY_STATE).message).toContain("fs.write");
  });
});

describe("monitor mode", () => {
  it("a monitor rule never blocks: the call proceeds and the would-be verdict is reported", () => {
    const p = loadPolicy(`
version: 1
name: shadow
rules:
  - { name: watch-deny, match: { tool: x }, action: deny, message: m, mode: monitor }
  - { name: watch-hitl, match: { tool: x }, action: hitl, mode: monitor }
  - { name: watch-rate, match: { tool: x }, action: { rate: { limit: 1, window_s: 60 } }, mode: monitor }
  - { name: enforced, match: { tool: y }, action: deny, message: m }
`);
    const state = { counters: {} as Record<string, { start: number; end: number; count: number }> };
    const first = evaluatePolicy(p, call("x"), state);
    expect(first.verdict).toBe("ALLOW");
    expect(first.monitor).toEqual([
      { rule: "watch-deny", would: "DENY rule:watch-deny", reason: "policy_violation:rule:watch-deny" },
      { rule: "watch-hitl", would: "HITL rule:watch-hitl", reason: "policy_hitl:rule:watch-hitl" },
    ]);
    // Over its limit, the rate rule too only reports.
    const key = first.counterUpdates[0]?.key as string;
    state.counters[key] = {
      start: first.counterUpdates[0]?.start as number,
      end: Number.MAX_SAFE_INTEGER,
      count: 1,
    };
    const second = evaluatePolicy(p, call("x"), state);
    expect(second.verdict).toBe("ALLOW");
    expect(second.monitor.map((m) => m.would)).toEqual([
      "DENY rule:watch-deny",
      "HITL rule:watch-hitl",
      "DENY rule:watch-rate",
    ]);
    expect(evaluatePolicy(p, call("y"), state).verdict).toBe("DENY");
  });

  it("an estimate a monitor rule supplies reaches only monitor rules", () => {
    const p = loadPolicy(`
version: 1
name: shadow-estimates
rules:
  - { name: guess, match: { tool: llm }, action: { estimate_usd: 2 }, mode: monitor }
  - { name: watch-budget, match: { tool: llm }, action: { budget_usd: { limit: 1, period: day } }, mode: monitor }
  - { name: needs-estimate, match: { tool: llm }, action: { require_estimate: true } }
`);
    const r = evaluatePolicy(p, call("llm"), EMPTY_STATE);
    // The monitored budget saw the monitored estimate ($2 over $1); the enforced rule saw none.
    expect(r).toMatchObject({ verdict: "DENY", rule: "needs-estimate", estimate_usd: undefined });
    expect(r.monitor.map((m) => m.would)).toEqual(["DENY rule:watch-budget"]);
  });

  it("mode: monitor on the whole policy shadows every rule and its default deny", () => {
    const p = loadPolicy(`
version: 1
name: whole
mode: monitor
default: deny
rules:
  - { name: no-x, match: { tool: x }, action: deny, message: m }
  - { name: enforce-z, match: { tool: z }, action: deny, message: m, mode: enforce }
`);
    expect(evaluatePolicy(p, call("x"), EMPTY_STATE)).toMatchObject({
      verdict: "ALLOW",
      monitor: [
        { rule: "no-x", would: "DENY rule:no-x" },
        { rule: "default", would: "DENY default" },
      ],
    });
    expect(evaluatePolicy(p, call("z"), EMPTY_STATE).verdict).toBe("DENY");
  });
});

describe("conditions fail closed", () => {
  const p = loadPolicy(`
version: 1
name: errors
rules:
  - { name: amount, match: { tool: pay }, when: "args.amount > 100", action: hitl }
  - { name: items, match: { tool: cart }, when: "args.items.exists(i, i > 10)", action: hitl }
`);
  it("a condition that errors (a missing key) is a DENY naming the rule, not a pass", () => {
    const r = evaluatePolicy(p, call("pay", { args: {} }), EMPTY_STATE);
    expect(r).toMatchObject({ verdict: "DENY", rule: "amount", reason: "policy_error:rule:amount" });
    expect(r.message).toMatch(/could not be evaluated/);
  });
  it("an iterating rule is not run over args larger than it was costed for", () => {
    const small = Array.from({ length: limits.MAX_ITERATION }, () => 1);
    expect(evaluatePolicy(p, call("cart", { args: { items: small } }), EMPTY_STATE).verdict).toBe("ALLOW");
    const large = Array.from({ length: limits.MAX_ITERATION + 1 }, () => 1);
    expect(evaluatePolicy(p, call("cart", { args: { items: large } }), EMPTY_STATE)).toMatchObject({
      verdict: "DENY",
      reason: "policy_error:rule:items",
    });
    expect(evaluatePolicy(p, call("cart", { args: { items: [1, 20] } }), EMPTY_STATE).verdict).toBe("HITL");
  });
});

describe("bad input", () => {
  it("a non-finite time is the caller's error; non-finite counters read as 0", () => {
    const p = loadPolicy(
      `version: 1\nname: b\nrules: [{ name: busy, when: "session.calls > 1", action: hitl }]\n`,
    );
    expect(() => evaluatePolicy(p, call("x", { time: { unix_s: Number.NaN } }), EMPTY_STATE)).toThrow(
      TypeError,
    );
    expect(
      evaluatePolicy(p, call("x", { session: { calls: Number.POSITIVE_INFINITY } }), EMPTY_STATE).verdict,
    ).toBe("ALLOW");
    expect(evaluatePolicy(p, call("x", { session: { calls: 2.7 } }), EMPTY_STATE).verdict).toBe("HITL");
  });
});

describe("the variables a condition sees", () => {
  it("session counters, budget, time and the estimate come from the input", () => {
    const p = loadPolicy(`
version: 1
name: vars
rules:
  - { name: night, when: "time.hour_utc < 6", action: hitl }
  - { name: sunday, when: "time.weekday_utc == 0", action: deny, message: closed }
  - { name: busy, when: "session.calls >= 100", action: deny, message: busy }
  - { name: poor, when: "budget.remaining_usd < estimate_usd", action: deny, message: poor }
`);
    const noon = { unix_s: Date.UTC(2026, 0, 7, 12) / 1000 }; // a Wednesday
    const run = (extra: Partial<PolicyInput>) =>
      evaluatePolicy(p, call("t", { time: noon, ...extra }), EMPTY_STATE).rule;
    expect(run({})).toBeUndefined();
    expect(run({ time: { unix_s: Date.UTC(2026, 0, 7, 3) / 1000 } })).toBe("night");
    expect(run({ time: { unix_s: Date.UTC(2026, 0, 11, 12) / 1000 } })).toBe("sunday");
    expect(run({ session: { calls: 100 } })).toBe("busy");
    expect(run({ budget: { limit_usd: 1, spent_usd: 0.9 }, estimate_usd: 0.2 })).toBe("poor");
    expect(run({ budget: { limit_usd: 1, spent_usd: 0.5 }, estimate_usd: 0.2 })).toBeUndefined();
  });
});

describe("tags the policy gives tools", () => {
  const p = loadPolicy(`
version: 1
name: tags
tags:
  payments: [wire_transfer, "refund_*"]
  write: ["*.write", wire_transfer]
rules:
  - { name: pay-and-write, match: { tags: [payments, write] }, action: hitl }
  - { name: any-pay, match: { tags: [payments] }, action: deny, message: no payments }
  - { name: tag-list, when: "'write' in tags && tags.size() == 1", action: deny, message: one tag }
`);
  const run = (tool: string, extra: Partial<PolicyInput> = {}) =>
    evaluatePolicy(p, call(tool, extra), EMPTY_STATE);

  it("a call's tags are those whose globs match its tool: match.tags and the condition see them", () => {
    expect(run("wire_transfer").rule).toBe("pay-and-write"); // payments and write
    expect(run("refund_card").rule).toBe("any-pay"); // payments only
    expect(run("fs.write").rule).toBe("tag-list"); // write only: `tags` is ["write"]
    expect(run("fs.read").rule).toBeUndefined(); // no tag
    // Tags a caller gives are added to the policy's.
    expect(run("fs.write", { tags: ["payments"] }).rule).toBe("pay-and-write");
    expect(run("fs.read", { tags: ["payments"] }).rule).toBe("any-pay");
  });

  it("the same tool, again and from another agent, gets the same tags (the match is cached per tool and agent)", () => {
    for (const agent of ["bot", "other", "bot"]) expect(run("refund_x", { agent }).rule).toBe("any-pay");
  });

  it("tags are declared with bounded names and globs, and checked at load", () => {
    const bad = (tags: unknown) => () => loadPolicy({ version: 1, name: "t", tags, rules: [] });
    expect(bad({ "": ["x"] })).toThrow(/tags/);
    expect(bad({ p: [] })).toThrow(/tags\.p/);
    expect(bad({ p: " x" })).toThrow(/tags\.p/);
    const many = Object.fromEntries(Array.from({ length: limits.MAX_TAGS + 1 }, (_, i) => [`t${i}`, "x"]));
    expect(bad(many)).toThrow(/at most 64 tags/);
  });
});

describe("session.denied", () => {
  it("is the input's count of the session's calls not allowed, 0 when absent", () => {
    const p = loadPolicy(`
version: 1
name: denied
rules:
  - { name: too-many-refusals, when: "session.denied >= 3", action: deny, message: cool down }
`);
    const run = (denied?: number) =>
      evaluatePolicy(p, call("t", denied === undefined ? {} : { session: { denied } }), EMPTY_STATE).rule;
    expect(run()).toBeUndefined();
    expect(run(2)).toBeUndefined();
    expect(run(3)).toBe("too-many-refusals");
  });
});
