// canonicalParamsDigest (one walk) must answer exactly as canonicalizationError + canonicalJson (two walks).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalizationError } from "./check.js";
import { canonicalParamsDigest } from "./check-and-serialize.js";
import { JsonNumberText } from "./number.js";
import { canonicalJson } from "./serialize.js";

/** The one walk's answer with its bytes read as text (the "hash" is a decoder), to compare with canonicalJson. */
function canonicalParamsText(value: unknown) {
  const result = canonicalParamsDigest(value, (bytes) => new TextDecoder().decode(bytes));
  return "digest" in result ? { text: result.digest } : result;
}

function twoWalks(value: unknown) {
  const error = canonicalizationError(value);
  return error === null ? { text: canonicalJson(value, { numberText: true }) } : { error };
}

const cyclic: Record<string, unknown> = { a: 1 };
cyclic.self = cyclic;
let deep: unknown = 1;
for (let i = 0; i < 70; i++) deep = { d: deep };

const BAD: unknown[] = [
  { x: Number.NaN },
  { x: Number.POSITIVE_INFINITY },
  { x: 2 ** 60 },
  { x: () => 1 },
  { x: 1n },
  { x: new Map() },
  { x: new Date(0) },
  { x: "\uD800" },
  { "\uDC00": 1 },
  { [Symbol("k")]: 1 },
  { __noncanonical__: true },
  { x: new JsonNumberText("1e400") },
  cyclic,
  deep,
  [1, 2],
  "text",
  null,
  new Map(),
];

describe("canonicalParamsDigest", () => {
  it("refuses what the check refuses, with the same code", () => {
    for (const value of BAD) expect(canonicalParamsText(value)).toEqual(twoWalks(value));
  });

  it("gives canonicalJson's text for every JSON object", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()), (value) => {
        expect(canonicalParamsText(value)).toEqual(twoWalks(value));
      }),
      { numRuns: 500 },
    );
  });

  it("keeps number text (10.0, 1e16) as canonicalHash does", () => {
    const value = {
      a: new JsonNumberText("10.0"),
      b: new JsonNumberText("1e16"),
      c: [new JsonNumberText("-0.0")],
    };
    expect(canonicalParamsText(value)).toEqual(twoWalks(value));
    expect(canonicalParamsText(value)).toEqual({ text: '{"a":10.0,"b":1e+16,"c":[-0.0]}' });
  });
});
