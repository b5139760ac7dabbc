// Property tests: canonical JSON round-trips through JSON.parse, ignores input key order, and sorts by
// code point. Python byte-compatibility is pinned by the literal cases and the fixture digests instead.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalizationError, canonicalJson } from "./index.js";

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

// Keys drawn partly from a tiny pool so objects share prefixes and hit the U+E000–U+FFFF vs astral case.
const key = fc.oneof(
  fc.string({ unit: "binary", maxLength: 6 }),
  fc.constantFrom(
    "a",
    "ab",
    "b",
    "ﬁ",
    "😀",
    "😀a",
    "\uE000",
    "\uFFFF",
    "𐀀",
    "10",
    "9",
    "__proto__",
    'q"',
    "\n",
  ),
);

// Doubles whose meaning JSON.parse and Python agree on: finite, and integral only within the safe range.
// -0 is folded to 0 because canonical JSON prints it as the int 0.
const double = fc
  .double({ noNaN: true, noDefaultInfinity: true })
  .filter((x) => !Number.isInteger(x) || Math.abs(x) <= MAX_SAFE)
  .map((x) => (x === 0 ? 0 : x));

const { json } = fc.letrec((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer({ min: -MAX_SAFE, max: MAX_SAFE }),
    double,
    fc.string({ unit: "binary" }),
    fc.array(tie("json"), { maxLength: 5 }),
    fc.dictionary(key, tie("json"), { maxKeys: 6 }),
  ),
}));

const object = fc.dictionary(key, json, { maxKeys: 8 });

/** Rebuilds every object with its keys inserted in a different (seeded) order. */
function permuteKeys(v: unknown, seed: number): unknown {
  if (Array.isArray(v)) return v.map((x, i) => permuteKeys(x, seed + i));
  if (typeof v !== "object" || v === null) return v;
  const entries = Object.entries(v);
  let s = seed >>> 0 || 1;
  for (let i = entries.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  const out: Record<string, unknown> = Object.create(null);
  for (const [k, x] of entries) out[k] = permuteKeys(x, seed * 31 + 7);
  return out;
}

const byCodePoint = (a: string, b: string): number => {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
};

describe("canonicalJson properties", () => {
  it("round-trips through JSON.parse to a deep-equal value", () => {
    fc.assert(
      fc.property(json, (v) => {
        expect(JSON.parse(canonicalJson(v))).toEqual(v);
      }),
      { numRuns: 2000 },
    );
  });

  it("does not depend on the insertion order of keys", () => {
    fc.assert(
      fc.property(json, fc.integer(), (v, seed) => {
        expect(canonicalJson(permuteKeys(v, seed))).toBe(canonicalJson(v));
      }),
      { numRuns: 2000 },
    );
  });

  it("writes each object's keys in code-point order", () => {
    fc.assert(
      fc.property(fc.dictionary(key, fc.constant(0), { maxKeys: 12 }), (o) => {
        const expected = Object.keys(o)
          .sort(byCodePoint)
          .map((k) => `${JSON.stringify(k)}:0`)
          .join(",");
        expect(canonicalJson(o)).toBe(`{${expected}}`);
      }),
    );
  });

  it("accepts in canonicalizationError exactly what it serializes", () => {
    fc.assert(
      fc.property(object, (o) => {
        expect(canonicalizationError(o)).toBeNull();
        expect(() => canonicalJson(o)).not.toThrow();
      }),
    );
  });

  it("writes strings as JSON.stringify does for well-formed text", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), (s) => {
        expect(canonicalJson(s)).toBe(JSON.stringify(s));
      }),
    );
  });
});
