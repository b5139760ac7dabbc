// Tests for `leash hash`: the digest equals the published canonical_hash and python3's, bad values and bad JSON fail cleanly.
// The canonicalization itself is tested in @leash/core; this checks the command's reading, output and statuses.
import { readFileSync } from "node:fs";
import { CanonicalizationError, canonicalHash, parseJsonKeepingNumberText } from "@leash/core";
import { afterAll, describe, expect, it } from "vitest";
import {
  CONFORMANCE,
  CONFORMANCE_101,
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
  call: { params: unknown };
  canonical_hash: string;
}
const published: Fixture = JSON.parse(readFileSync(CONFORMANCE, "utf8")).fixtures[0];

describe("leash hash", () => {
  it("prints the fixture's canonical_hash for its params, from stdin", async () => {
    const r = await leash(["hash"], JSON.stringify(published.call.params));
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(`${published.canonical_hash}\n`);
    expect(r.code).toBe(0);
  });

  it("reads `-` as stdin and a path as a file, whatever the input's formatting", async () => {
    const pretty = JSON.stringify(published.call.params, null, 4);
    expect((await leash(["hash", "-"], pretty)).stdout).toBe(`${published.canonical_hash}\n`);
    const path = scratch.write("params.json", pretty);
    expect((await leash(["hash", path])).stdout).toBe(`${published.canonical_hash}\n`);
  });

  it("matches canonical_hash for every vector of both files", async () => {
    for (const file of [CONFORMANCE, CONFORMANCE_101]) {
      const fixtures: Fixture[] = JSON.parse(readFileSync(file, "utf8")).fixtures;
      for (const f of fixtures) {
        // Arrays and the __noncanonical__ marker hash too: the digest is not the decision.
        const r = await leash(["hash"], JSON.stringify(f.call.params));
        expect(r.stdout, f.name).toBe(`${f.canonical_hash}\n`);
      }
    }
  });

  it.each(TEXT_SENSITIVE_NUMBERS)("prints the Python reference's digest for %s", async (literal) => {
    const text = `{"x": ${literal}, "y": [${literal}, {"z": ${literal}}]}`;
    const reference = pythonCanonicalHash(text);
    expect(reference).toMatch(/^[0-9a-f]{64}$/);
    const r = await leash(["hash"], text);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(`${reference}\n`);
    expect(r.code).toBe(0);
  });

  it("hashes plain numbers as before: ints as digits, -0 as 0", async () => {
    const text = '{"a": 100, "b": -0, "c": 0.5, "d": 1e-7, "e": 9007199254740991}';
    expect((await leash(["hash"], text)).stdout).toBe(`${pythonCanonicalHash(text)}\n`);
  });

  it("exits 1 naming the code for a value with no canonical form", async () => {
    // Python reads 1E400 as inf, which allow_nan=False refuses: the reference has no digest either.
    const text = '{"amount": 1E400}';
    expect(pythonCanonicalHash(text)).toBeNull();
    let code = "";
    try {
      canonicalHash(parseJsonKeepingNumberText(text));
    } catch (err) {
      if (CanonicalizationError.isInstance(err)) code = err.code;
    }
    expect(code).toBe("non_finite_number");
    const r = await leash(["hash"], text);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(`not canonicalizable (${code})`);
  });

  it("exits 2 on invalid JSON and on a missing file", async () => {
    const bad = await leash(["hash"], "{nope");
    expect(bad.code).toBe(2);
    expectOneLineError(bad.stderr);
    expect(bad.stderr).toContain("<stdin>: invalid JSON");
    const missing = await leash(["hash", `${scratch.dir}/absent.json`]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(`leash: error: cannot read ${scratch.dir}/absent.json: no such file\n`);
  });
});
