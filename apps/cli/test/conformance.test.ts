// Tests for `leash conformance`: the published files pass, tampering is caught, unreadable input exits 2.
// The published fixtures are read in place (../shared beside the repo); edited copies live in a temp dir.
import { readFileSync } from "node:fs";
import { decide, parseJsonPreservingNumbers, vectorHash } from "@leash/core";
import { afterAll, describe, expect, it } from "vitest";
import {
  CONFORMANCE,
  CONFORMANCE_101,
  expectOneLineError,
  leash,
  pythonCanonicalHash,
  scratchDir,
} from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

/** Replaces the string value of `key` inside the vector called `name`, leaving every other byte alone. */
function editVectorString(text: string, name: string, key: string, value: string): string {
  const at = text.indexOf(`"name": "${name}"`);
  expect(at).toBeGreaterThan(0);
  const keyAt = text.indexOf(`"${key}": "`, at);
  expect(keyAt).toBeGreaterThan(at);
  const start = keyAt + key.length + 5;
  const end = text.indexOf('"', start);
  return text.slice(0, start) + value + text.slice(end);
}

describe("leash conformance on the published fixtures", () => {
  it("passes all 29 vectors of both files and says exactly that", async () => {
    const r = await leash(["conformance", CONFORMANCE, CONFORMANCE_101]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("29 passed, 0 failed\n");
    expect(r.code).toBe(0);
  });

  it("prints an ok line per vector with --verbose", async () => {
    const r = await leash(["conformance", "--verbose", CONFORMANCE]);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(16);
    expect(lines[0]).toBe("ok conformance.json:allow_within_thresholds: ALLOW within_thresholds");
    expect(lines.at(-1)).toBe("15 passed, 0 failed");
    expect(r.code).toBe(0);
  });

  it("prints one machine-readable report with --json", async () => {
    const r = await leash(["conformance", "--json", CONFORMANCE, CONFORMANCE_101]);
    expect(r.code).toBe(0);
    expect(r.stdout.trimEnd().split("\n")).toHaveLength(1);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ passed: 29, failed: 0 });
    expect(report.results).toHaveLength(29);
    expect(report.files.map((f: { revision: string }) => f.revision)).toEqual(["SP/1.0.1", "SP/1.0.1"]);
    expect(report.results.every((v: { seal: { status: string } }) => v.seal.status === "verified")).toBe(
      true,
    );
  });
});

describe("leash conformance on vectors whose params' numbers matter by their text", () => {
  it("decides params as the reference read them: 1e16 is a float, 10.0 stays 10.0 for the digest", async () => {
    const params = '{"amount": 1e16, "fee": 10.0}';
    const digest = pythonCanonicalHash(params);
    const text = `{"fixtures": [
      {"name": "float_1e16", "config": {}, "state": {}, "call": {"tool_name": "t", "params": {"x": 1e16}},
       "expected_verdict": "ALLOW", "expected_reason": "within_thresholds"},
      {"name": "approve_bound_to_text_digest", "config": {},
       "state": {"pending_transition": {"decision": "approve", "original_nonce": 3, "original_args_digest": "${digest}"}},
       "call": {"tool_name": "pay", "nonce": 3, "params": ${params}},
       "expected_verdict": "ALLOW", "expected_reason": "hitl_transition:approve"}
    ]}`;
    const r = await leash(["conformance", scratch.write("text-numbers.json", text)]);
    expect(r.stdout).toBe("2 passed, 0 failed\n");
    expect(r.code).toBe(0);
  });
});

describe("leash conformance on edited vectors", () => {
  const original = readFileSync(CONFORMANCE_101, "utf8");

  it("catches an edited expectation through its seal", async () => {
    const text = editVectorString(
      original,
      "transition_digest_mismatch",
      "expected_reason",
      "within_thresholds",
    );
    const path = scratch.write("tampered.json", text);
    const r = await leash(["conformance", path]);
    expect(r.code).toBe(1);
    const fails = r.stdout.split("\n").filter((l) => l.startsWith("FAIL"));
    expect(fails).toHaveLength(1);
    expect(fails[0]).toMatch(
      /^FAIL tampered\.json:transition_digest_mismatch: vector_hash mismatch \(expected 90fa7a73[0-9a-f]{56}, computed [0-9a-f]{64}\)$/,
    );
    expect(r.stdout.endsWith("13 passed, 1 failed\n")).toBe(true);
  });

  it("reports expected versus got when the edit is resealed", async () => {
    let text = editVectorString(
      original,
      "transition_digest_mismatch",
      "expected_reason",
      "within_thresholds",
    );
    // Reseal the way a careless editor would: recompute vector_hash over the edited vector (number text kept).
    const parsed = parseJsonPreservingNumbers(text) as { fixtures: { name: string }[] };
    const vector = parsed.fixtures.find((f) => f.name === "transition_digest_mismatch");
    text = editVectorString(text, "transition_digest_mismatch", "vector_hash", vectorHash(vector));
    const path = scratch.write("resealed.json", text);
    const r = await leash(["conformance", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe(
      "FAIL resealed.json:transition_digest_mismatch: expected DENY within_thresholds, got DENY hitl_transition:digest_mismatch\n" +
        "13 passed, 1 failed\n",
    );
  });

  it("does not fail a vector for having no seal", async () => {
    const unsealed = original.replace(/,\s*"vector_hash": "[0-9a-f]{64}"/, "");
    expect(unsealed).not.toBe(original);
    const r = await leash(["conformance", "--verbose", scratch.write("unsealed.json", unsealed)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(unsealed)");
    expect(r.stdout.endsWith("14 passed, 0 failed\n")).toBe(true);
  });
});

describe("leash conformance on unreadable input", () => {
  it("exits 2 with one line naming a missing file", async () => {
    const missing = `${scratch.dir}/nope.json`;
    const r = await leash(["conformance", CONFORMANCE, missing]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toBe(`leash: error: cannot read ${missing}: no such file\n`);
  });

  it("exits 2 on invalid JSON, naming the file", async () => {
    const path = scratch.write("broken.json", '{"fixtures": [}');
    const r = await leash(["conformance", path]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(`${path}: invalid JSON`);
  });

  it.each([
    ["[]", "the top level must be a JSON object"],
    ['{"vectors": []}', "`fixtures` must be an array"],
    ['{"fixtures": []}', "`fixtures` is empty"],
    ['{"fixtures": [1]}', "fixtures[0] must be an object"],
    ['{"fixtures": [{"config": {}}]}', "fixtures[0].name must be a non-empty string"],
    [
      '{"fixtures": [{"name": "x", "config": {}, "state": {}, "expected_verdict": "ALLOW", "expected_reason": "r"}]}',
      "fixtures[0] (x) has no `call`",
    ],
    [
      '{"fixtures": [{"name": "x", "config": {}, "state": {}, "call": {}, "expected_reason": "r"}]}',
      "fixtures[0] (x).expected_verdict must be a string",
    ],
    [
      '{"fixtures": [{"name": "x", "config": 1, "state": null, "call": [], "expected_verdict": "ALLOW", "expected_reason": "r", "vector_hash": 5}]}',
      "fixtures[0] (x).vector_hash must be a string",
    ],
  ])("exits 2 on a bad envelope: %s", async (text, problem) => {
    const path = scratch.write("envelope.json", text);
    const r = await leash(["conformance", path]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toBe(`leash: error: ${path}: bad fixture file: ${problem}\n`);
  });

  it("hands odd config, state and call to decide unvalidated", async () => {
    const odd = { config: "not an object", state: 42, call: null };
    const { verdict, reason } = decide(odd.config, odd.state, odd.call);
    const text = JSON.stringify({
      fixtures: [{ name: "odd", ...odd, expected_verdict: verdict, expected_reason: reason }],
    });
    const r = await leash(["conformance", scratch.write("odd.json", text)]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("1 passed, 0 failed\n");
    expect(r.code).toBe(0);
  });
});
