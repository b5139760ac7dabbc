// Tests for `leash decide`: a verdict for valid input from stdin or a file, exit 2 naming the field otherwise.
// The decision rules are tested in @leash/core; here DENY and HITL must still exit 0 (a verdict is data).
import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import {
  CONFORMANCE,
  expectOneLineError,
  leash,
  pythonCanonicalHash,
  scratchDir,
  TEXT_SENSITIVE_NUMBERS,
} from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

interface Fixture {
  name: string;
  config: unknown;
  state: unknown;
  call: unknown;
  expected_verdict: string;
  expected_reason: string;
}
const fixtures: Fixture[] = JSON.parse(readFileSync(CONFORMANCE, "utf8")).fixtures;
const byName = (name: string) => fixtures.find((f) => f.name === name)!;
const input = (f: Fixture) => JSON.stringify({ config: f.config, state: f.state, call: f.call });

describe("leash decide", () => {
  it("decides a call read from stdin", async () => {
    const r = await leash(["decide"], input(byName("allow_within_thresholds")));
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe('{"verdict":"ALLOW","reason":"within_thresholds"}\n');
    expect(r.code).toBe(0);
  });

  it("decides a call read from a file, and exits 0 on DENY and HITL too", async () => {
    for (const name of ["deny_budget_exhausted", "hitl_always"]) {
      const f = byName(name);
      const r = await leash(["decide", scratch.write(`${name}.json`, input(f))]);
      expect(r.stdout).toBe(
        `${JSON.stringify({ verdict: f.expected_verdict, reason: f.expected_reason })}\n`,
      );
      expect(r.code).toBe(0);
    }
  });

  it("exits 2 naming the field when the config is invalid", async () => {
    const f = byName("allow_within_thresholds");
    const bad = JSON.stringify({ config: { budget_usd: "lots" }, state: f.state, call: f.call });
    const r = await leash(["decide", "-"], bad);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toMatch(/^leash: error: <stdin>: invalid decide input: .*\/config\/budget_usd/);
  });

  it("exits 2 when a part is missing and on invalid JSON", async () => {
    const missing = await leash(["decide"], JSON.stringify({ config: {}, state: {} }));
    expect(missing.code).toBe(2);
    expectOneLineError(missing.stderr);
    expect(missing.stderr).toContain("call");
    const garbled = await leash(["decide"], '{"config": ');
    expect(garbled.code).toBe(2);
    expect(garbled.stderr).toContain("<stdin>: invalid JSON");
  });

  it.each(TEXT_SENSITIVE_NUMBERS)('agrees with the reference on params {"x": %s}', async (literal) => {
    const params = `{"x": ${literal}}`;
    // Rule 1 is the reference's canonicalizability: Python hashes it, so with empty config and state the call is allowed.
    expect(pythonCanonicalHash(params)).not.toBeNull();
    const r = await leash(
      ["decide"],
      `{"config": {}, "state": {}, "call": {"tool_name": "t", "params": ${params}}}`,
    );
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe('{"verdict":"ALLOW","reason":"within_thresholds"}\n');
  });

  it("denies params Python cannot hash (1E400 reads as inf)", async () => {
    expect(pythonCanonicalHash('{"x": 1E400}')).toBeNull();
    const r = await leash(
      ["decide"],
      '{"config": {}, "state": {}, "call": {"tool_name": "t", "params": {"x": 1E400}}}',
    );
    expect(r.stdout).toBe('{"verdict":"DENY","reason":"policy_violation:malformed_input"}\n');
  });

  it("releases an approved call whose digest the reference computed from the params' text", async () => {
    const params = '{"amount": 1e16, "fee": 10.0}';
    const digest = pythonCanonicalHash(params);
    const pending = { decision: "approve", original_nonce: 7, original_args_digest: digest };
    const document = `{"config": {}, "state": {"pending_transition": ${JSON.stringify(pending)}}, "call": {"tool_name": "pay", "nonce": 7, "params": ${params}}}`;
    const r = await leash(["decide"], document);
    expect(r.stdout).toBe('{"verdict":"ALLOW","reason":"hitl_transition:approve"}\n');
  });

  it("keeps config and state numbers plain: 10.0 is a budget of 10", async () => {
    const document =
      '{"config": {"budget_usd": 10.0}, "state": {"budget_remaining_usd": 0.0}, "call": {"tool_name": "t", "estimated_cost_usd": 1.0}}';
    const r = await leash(["decide"], document);
    expect(r.stdout).toBe('{"verdict":"DENY","reason":"budget_exhausted"}\n');
  });
});
