// Tests for `leash decide`: a verdict for valid input from stdin or a file, exit 2 naming the field otherwise.
// The decision rules are tested in @leash/core; here DENY and HITL must still exit 0 (a verdict is data).
import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { CONFORMANCE, expectOneLineError, leash, scratchDir } from "./helpers.js";

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
});
