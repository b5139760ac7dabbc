// Tests for `leash bench decide`: one JSON line with a positive rate, default vectors, refusal of a wrong decide,
// and --reference run against a stand-in Python module of our own (the real reference is not in the repo).
import { readFileSync } from "node:fs";
import { defaultVectorFiles, referenceJson } from "@leash/bench";
import { JsonNumberText } from "@leash/core";
import { afterAll, describe, expect, it } from "vitest";
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

describe("leash bench decide --reference", () => {
  // A stand-in reference of our own that answers ALLOW within_thresholds to everything: the driver
  // and the CLI must time it and name every vector where it disagrees with our decide.
  const stub = scratch.write(
    "conformance.py",
    'def decide(config, state, call):\n    return ("ALLOW", "within_thresholds")\n',
  );

  it("times the reference over the same vectors and reports disagreements", async () => {
    const r = await leash(["bench", "decide", "--seconds", "0.05", "--warmup", "0", "--reference", stub]);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.reference).toMatchObject({ file: stub, python: expect.stringMatching(/^3\./) });
    expect(report.reference.sha256).toMatch(/^[0-9a-f]{64}$/);
    const published = report.reference.published;
    expect(published.vectors).toBe(29);
    expect(published.decisions_per_cpu_sec).toBeGreaterThan(0);
    // Two published vectors expect ALLOW within_thresholds; the stub agrees on exactly those.
    expect(published.mismatches).toBe(27);
    expect(published.first_mismatches[0]).toMatchObject({
      label: "conformance.json:deny_budget_exhausted",
      ours: "DENY budget_exhausted",
      reference: "ALLOW within_thresholds",
    });
    expect(report.cpu_vs_reference).toBeCloseTo(
      report.decisions_per_cpu_sec / published.decisions_per_cpu_sec,
      1,
    );
    expect(r.stderr).toBe(
      "bench decide: the reference disagrees with ours on 27 of 29 published vectors (first: conformance.json:deny_budget_exhausted: ours DENY budget_exhausted, reference ALLOW within_thresholds)\n",
    );
  });

  it("hands the mixed corpus to the reference too", async () => {
    const r = await leash([
      "bench",
      "decide",
      "--corpus",
      "mixed",
      "--seconds",
      "0.05",
      "--warmup",
      "0",
      "--reference",
      scratch.dir,
    ]);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.reference.mixed.vectors).toBe(4000);
    // The stub is right only on the plain ALLOWs and the published within_thresholds vectors.
    expect(report.reference.mixed.mismatches).toBeLessThan(4000 - 800);
    expect(report.reference.mixed.mismatches).toBeGreaterThan(2000);
    expect(report.mixed_cpu_vs_reference).toBeGreaterThan(0);
    expect(report).not.toHaveProperty("reference_published_per_sec");
  });

  it("exits 2 with one line when the path holds no reference", async () => {
    const missing = await leash([
      "bench",
      "decide",
      "--seconds",
      "0.05",
      "--reference",
      `${scratch.dir}/none`,
    ]);
    expect(missing.code).toBe(2);
    expectOneLineError(missing.stderr);
    const empty = scratch.write("empty.py", "x = 1\n");
    const r = await leash(["bench", "decide", "--seconds", "0.05", "--warmup", "0", "--reference", empty]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("has no decide function");
  });
});

describe("referenceJson", () => {
  it("writes kept number literals as written, so Python reads 10.0 as a float", () => {
    expect(referenceJson({ a: new JsonNumberText("10.0"), b: [new JsonNumberText("1e16"), 2], c: "x" })).toBe(
      '{"a":10.0,"b":[1e16,2],"c":"x"}',
    );
  });
});
