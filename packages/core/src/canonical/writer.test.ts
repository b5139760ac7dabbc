// The byte writer behind canonicalJson and the argument digest: buffer growth, re-entry from a getter,
// a polluted Object.prototype, and the pure SHA-256 over its bytes. Output equality is in canonical.test.ts.
import { describe, expect, it } from "vitest";
import { sha256Hex, sha256HexOfBytes } from "../crypto/sha256.js";
import { canonicalizationError } from "./check.js";
import { canonicalParamsDigest } from "./check-and-serialize.js";
import { canonicalJson } from "./serialize.js";

describe("the canonical writer", () => {
  it("grows its buffer mid-string, escapes included, and is right on the next call too", () => {
    const controls = '\u0001\u001f\n"\\é東🚀'.repeat(50_000);
    const big = { a: controls, b: [controls.slice(0, 999)], c: "x".repeat(3_000_000) };
    expect(canonicalJson(big)).toBe(JSON.stringify({ a: big.a, b: big.b, c: big.c }));
    expect(canonicalJson({ z: 1, a: [true, null, 10.5] })).toBe('{"a":[true,null,10.5],"z":1}');
  });

  it("writes a value a getter serializes while the outer walk is under way", () => {
    const inner = { y: [1, "two"], x: "ü" };
    const outer = {
      b: 2,
      get a() {
        return canonicalJson(inner);
      },
    };
    expect(canonicalJson(outer)).toBe(`{"a":${JSON.stringify('{"x":"ü","y":[1,"two"]}')},"b":2}`);
  });

  it("ignores enumerable properties inherited from a polluted Object.prototype (check and writer)", () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.polluted = Number.NaN;
    try {
      expect(canonicalJson({ b: 1, a: { c: 2 } })).toBe('{"a":{"c":2},"b":1}');
      // The structural check lists keys the same way: the inherited NaN is not the params'.
      expect(canonicalizationError({ b: 1, a: { c: 2 } })).toBeNull();
    } finally {
      delete proto.polluted;
    }
  });

  it("hashes the bytes it wrote as sha256Hex hashes the text", () => {
    const params = { q: "naïve 🚀", n: [1, 2.5, { deep: "東京" }] };
    const text = canonicalJson(params, { numberText: true });
    expect(canonicalParamsDigest(params, sha256HexOfBytes)).toEqual({ digest: sha256Hex(text) });
    expect(sha256HexOfBytes(new Uint8Array(0))).toBe(sha256Hex(""));
  });
});
