// Digest compatibility with the Python reference: every published canonical_hash and vector_hash.
// Reads the shared fixture files; it does not run decide().

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { canonicalHash, canonicalJson, parseJsonPreservingNumbers, vectorHash } from "./index.js";

const dir = new URL("../../../../../shared/spec/fixtures/", import.meta.url);

interface Fixture {
  name: string;
  call: { params: unknown };
  canonical_hash: string;
  vector_hash: string;
}

const files = ["conformance.json", "conformance-1.0.1.json"].map((name) => {
  const text = readFileSync(new URL(name, dir), "utf8");
  return { name, text, plain: JSON.parse(text) as { fixtures: Fixture[] } };
});

// sha256 of Python's json.dumps(json.load(f), sort_keys=True, separators=(",",":"), ensure_ascii=False).
const WHOLE_FILE_DIGESTS: Record<string, string> = {
  "conformance.json": "505f7e5a0bf32773a524ae196b8bee70b41932a8c760da985da1ba54498e8f4e",
  "conformance-1.0.1.json": "0e6323b6ca8a95b2e41ae0b81fe8498d0082b3b6bf10c22d5ed91fb149d94604",
};

// How many vectors have no integral float literal (such as `10.0`) and so verify even after JSON.parse.
const EXACT_WITH_JSON_PARSE: Record<string, number> = { "conformance.json": 15, "conformance-1.0.1.json": 0 };

describe("published fixture digests", () => {
  it("covers all 29 vectors", () => {
    expect(files.reduce((n, f) => n + f.plain.fixtures.length, 0)).toBe(29);
  });

  for (const file of files) {
    describe(file.name, () => {
      const lossless = parseJsonPreservingNumbers(file.text) as { fixtures: Fixture[] };

      it.each(file.plain.fixtures.map((f) => [f.name, f] as const))("canonical_hash of %s", (_, fixture) => {
        expect(canonicalHash(fixture.call.params)).toBe(fixture.canonical_hash);
      });

      it.each(lossless.fixtures.map((f) => [f.name, f] as const))("vector_hash of %s", (_, fixture) => {
        expect(vectorHash(fixture)).toBe(fixture.vector_hash);
      });

      it("whole file re-serializes exactly as Python does", () => {
        const text = canonicalJson(lossless, { numberText: true });
        expect(createHash("sha256").update(text, "utf8").digest("hex")).toBe(WHOLE_FILE_DIGESTS[file.name]);
      });

      it("vectorHash also runs on plain JSON.parse output, exact wherever JSON.parse lost nothing", () => {
        let exact = 0;
        file.plain.fixtures.forEach((fixture, i) => {
          // JSON.parse turns `10.0` into 10, which prints as `10`: those vectors cannot match.
          const lostNothing =
            canonicalJson(fixture, { numberText: true }) ===
            canonicalJson(lossless.fixtures[i], { numberText: true });
          expect(vectorHash(fixture) === fixture.vector_hash).toBe(lostNothing);
          if (lostNothing) exact++;
        });
        expect(exact).toBe(EXACT_WITH_JSON_PARSE[file.name]);
      });
    });
  }
});
