// neverAllows and toolEstimate: what a policy says of a tool before any call (leash mcp hides tools it
// never allows and takes their estimates). Checked against evaluatePolicy on the same tools.
import { describe, expect, it } from "vitest";
import { EMPTY_STATE, evaluatePolicy, loadPolicy, neverAllows, toolEstimate } from "../src/index.js";

const policy = loadPolicy(`
version: 1
name: reach
default: deny
tags:
  x: [tagged-too]
rules:
  - { name: shadow, match: { tool: "*" }, action: deny, message: shadow, mode: monitor }
  - { name: maybe-db, match: { tool: "db.*" }, when: "has(args.force)", action: deny, message: no force }
  - { name: no-drop, match: { tool: db.drop }, action: deny, message: never }
  - { name: db, match: { tool: "db.*" }, action: allow }
  - { name: ops-only, match: { tool: deploy, agent: "ops-*" }, action: hitl }
  - { name: tagged, match: { tool: tagged, tags: [x] }, action: allow }
  - { name: search-cost, match: { tool: search }, action: { estimate_usd: 0.02 } }
  - { name: search-ok, match: { tool: search }, action: allow }
  - { name: conditional-cost, match: { tool: "*" }, when: "tool == 'db.read'", action: { estimate_usd: 9 } }
`);

describe("neverAllows", () => {
  it("is true exactly for tools no call of this agent can pass", () => {
    const never = (tool: string, agent = "bot") => neverAllows(policy, { tool, agent });
    expect(never("db.drop")).toBe(true); // an unconditional deny before any allow
    expect(never("db.read")).toBe(false); // a conditional deny, then an allow
    expect(never("deploy")).toBe(true); // the hitl rule is for ops-* agents only: default deny
    expect(never("deploy", "ops-1")).toBe(false);
    expect(never("tagged")).toBe(true); // the policy gives this tool no tag x
    expect(never("tagged-too")).toBe(true); // tag x, but the rule is for tool `tagged`
    expect(never("search")).toBe(false);
    expect(never("unknown")).toBe(true);
    // What evaluatePolicy answers agrees for the tools it calls never allowed.
    for (const tool of ["db.drop", "deploy", "unknown"]) {
      const outcome = evaluatePolicy(
        policy,
        { tool, agent: "bot", args: {}, time: { unix_s: 0 } },
        EMPTY_STATE,
      );
      expect(outcome.verdict).toBe("DENY");
    }
  });

  it("is false for a policy out of the agent's or organization's scope, and under monitor mode", () => {
    const scoped = loadPolicy({
      version: 1,
      name: "s",
      org: "acme",
      agent: "bot-*",
      default: "deny",
      rules: [],
    });
    expect(neverAllows(scoped, { tool: "x", agent: "bot-1", org: "acme" })).toBe(true);
    expect(neverAllows(scoped, { tool: "x", agent: "other", org: "acme" })).toBe(false);
    expect(neverAllows(scoped, { tool: "x", agent: "bot-1", org: "globex" })).toBe(false);
    const shadow = loadPolicy({ version: 1, name: "m", mode: "monitor", default: "deny", rules: [] });
    expect(neverAllows(shadow, { tool: "x", agent: "a" })).toBe(false);
  });
});

describe("toolEstimate", () => {
  it("is the first enforced unconditional estimate_usd rule's", () => {
    expect(toolEstimate(policy, { tool: "search", agent: "bot" })).toBe(0.02);
    expect(toolEstimate(policy, { tool: "db.read", agent: "bot" })).toBeUndefined();
  });
});
