// The example policies load, and each passes its own cases; a wrong expectation is reported as a diff.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { formatFailure, loadPolicy, parseCases, runCases } from "../src/index.js";

const dir = new URL("../examples/", import.meta.url);
const read = (name: string) => readFileSync(new URL(name, dir), "utf8");
const EXAMPLES = ["payments-hitl", "filesystem-allowlist", "rate-and-budget"];

describe("example policies", () => {
  it.each(EXAMPLES)("%s loads and passes its cases", (name) => {
    const policy = loadPolicy(read(`${name}.yaml`), { source: `${name}.yaml` });
    const cases = parseCases(read(`${name}.cases.yaml`));
    const report = runCases(policy, cases);
    expect(report.failures.map((f) => formatFailure(f, 1))).toEqual([]);
    expect(report.passed).toBe(cases.length);
    expect(cases.length).toBeGreaterThanOrEqual(4);
  });

  it("a case that expects the wrong outcome fails with the field, the expectation and what happened", () => {
    const policy = loadPolicy(read("payments-hitl.yaml"));
    const cases = parseCases(`
cases:
  - name: wrong
    call: { tool: payments.send, agent: finance-bot, args: { amount_usd: 900 } }
    expect: { verdict: ALLOW, rule: big-payments-need-a-human }
`);
    const report = runCases(policy, cases);
    expect(report.passed).toBe(0);
    expect(report.failures).toEqual([
      { name: "wrong", step: 0, diffs: [{ field: "verdict", expected: "ALLOW", actual: "HITL" }] },
    ]);
    expect(formatFailure(report.failures[0] as (typeof report.failures)[0], 1)).toBe(
      '✗ wrong\n    verdict:\n      - expected "ALLOW"\n      + actual   "HITL"',
    );
  });

  it("refuses a call whose time is not a number, naming the field", () => {
    expect(() =>
      parseCases("cases:\n  - name: x\n    call: { tool: t, time: { unix_s: noon } }\n    expect: {}\n"),
    ).toThrow(/^cases\[0\]\.call\.time\.unix_s: must be a number/);
  });

  it("refuses a cases file without a call's tool, naming the field", () => {
    expect(() => parseCases("cases:\n  - name: x\n    call: { agent: a }\n    expect: {}\n")).toThrow(
      /^cases\[0\]\.call\.tool: is required/,
    );
  });
});
