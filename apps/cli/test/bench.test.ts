// Tests for `leash bench decide`: one JSON line with a positive rate, default vectors, refusal of a wrong decide.
// It measures for a fraction of a second only; the figures themselves are not asserted beyond being sane.
import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { defaultVectorFiles } from "../src/commands/bench.js";
import { CONFORMANCE, CONFORMANCE_101, expectOneLineError, leash, scratchDir } from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

describe("leash bench decide", () => {
  it("prints one JSON line with decisions_per_sec > 0", async () => {
    const r = await leash([
      "bench",
      "decide",
      "--vectors",
      CONFORMANCE,
      "--vectors",
      CONFORMANCE_101,
      "--seconds",
      "0.2",
      "--warmup",
      "0.05",
    ]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    const report = JSON.parse(lines[0]!);
    expect(report).toMatchObject({ bench: "decide", vectors: 29, node: process.version });
    expect(report.decisions_per_sec).toBeGreaterThan(0);
    expect(report.decisions).toBeGreaterThanOrEqual(29);
    expect(report.seconds).toBeGreaterThanOrEqual(0.2);
    // seconds is printed to the millisecond, so recomputing from it can be off by 0.5 ms / decisions.
    const slack = 0.0005e9 / report.decisions + 0.05;
    expect(Math.abs(report.ns_per_decision - (report.seconds * 1e9) / report.decisions)).toBeLessThanOrEqual(
      slack,
    );
    expect(report.checksum).toMatch(/^[0-9a-f]{8}$/);
  });

  it("defaults to the published fixtures beside the repository", async () => {
    expect(defaultVectorFiles()).toEqual([CONFORMANCE, CONFORMANCE_101]);
    const r = await leash(["bench", "decide", "--seconds", "0.05", "--warmup", "0"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).vectors).toBe(29);
  });

  it("refuses to benchmark a decide that disagrees with a vector", async () => {
    const text = readFileSync(CONFORMANCE, "utf8").replace(
      '"expected_reason": "within_thresholds"',
      '"expected_reason": "budget_exhausted"',
    );
    const r = await leash([
      "bench",
      "decide",
      "--vectors",
      scratch.write("wrong.json", text),
      "--seconds",
      "0.05",
    ]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(
      "wrong.json:allow_within_thresholds: expected ALLOW budget_exhausted, got ALLOW within_thresholds",
    );
  });

  it("exits 2 on an unreadable vectors file", async () => {
    const r = await leash(["bench", "decide", "--vectors", `${scratch.dir}/none.json`, "--seconds", "0.05"]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
  });
});
