// The canonical writer against its predecessor (the unit-by-unit UTF-8 writer): the same bytes, the same text and
// the same refusal for random JSON-like values. What the output should be is pinned elsewhere (fixtures, literals).

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CanonicalizationError } from "../src/canonical/errors.js";
import { JsonNumberText } from "../src/canonical/number.js";
import { decodeUtf8 } from "../src/canonical/serialize.js";
import { canonicalText, type WriteOptions, withCanonicalBytes } from "../src/canonical/writer.js";
import { withReferenceBytes } from "./canonical-bytes-writer.js";

// Units that stress the string path: controls, quote, backslash, DEL, Latin-1, BMP, lone halves of pairs.
const oddUnit = fc.oneof(
  { arbitrary: fc.integer({ min: 0, max: 0x20 }), weight: 3 },
  fc.constantFrom(0x22, 0x5c, 0x7f, 0xe9, 0x2028, 0xfeff, 0xe000, 0xffff, 0xd800, 0xdbff, 0xdc00, 0xdfff),
  fc.integer({ min: 0x80, max: 0xffff }),
);
const text = fc.oneof(
  { arbitrary: fc.array(oddUnit, { maxLength: 6 }).map((units) => String.fromCharCode(...units)), weight: 2 },
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.string({ unit: "grapheme-ascii", maxLength: 40 }),
  fc.array(oddUnit, { maxLength: 10 }).map((units) => String.fromCharCode(...units)),
  // Long enough that any per-string buffer room or rope handling is exercised.
  fc.tuple(fc.string({ maxLength: 8 }), fc.nat({ max: 400 })).map(([s, n]) => s.repeat(n)),
);
const key = fc.oneof(text, fc.constantFrom("a", "b", "😀", "\uE000", "\uFFFF", "𐀀", "__proto__", "10"));
const numberLiteral = fc
  .oneof(
    fc.constantFrom("10.0", "1e16", "1E400", "-0", "0.000001", "12345678901234567890", "1.5e-7"),
    fc.integer().map(String),
    fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
  )
  .filter((s) => /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/.test(s))
  .map((s) => new JsonNumberText(s));
const number = fc.oneof(
  fc.integer({ min: -10, max: 20 }),
  fc.integer(),
  fc.double(),
  fc.constantFrom(
    -0,
    2 ** 53,
    -(2 ** 53),
    2 ** 53 - 1,
    1e21,
    1e-7,
    5e-324,
    Number.NaN,
    Number.POSITIVE_INFINITY,
  ),
);

const { json } = fc.letrec((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    number,
    numberLiteral,
    text,
    fc.array(tie("json"), { maxLength: 5 }),
    fc.dictionary(key, tie("json"), { maxKeys: 6 }),
  ),
}));

const options = fc.record({
  maxDepth: fc.oneof(fc.constant(64), fc.integer({ min: 0, max: 4 })),
  numberText: fc.boolean(),
});

/** The bytes as a fresh array, or the refusal's code. */
function outcome(write: () => Uint8Array): Uint8Array | string {
  try {
    return write();
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) return `refused: ${error.code}`;
    throw error;
  }
}

const copy = (bytes: Uint8Array): Uint8Array => bytes.slice();

describe("the canonical writer against the unit-by-unit byte writer", () => {
  it("writes the same bytes, or refuses with the same code", () => {
    fc.assert(
      fc.property(json, options, (value, opts: WriteOptions) => {
        const expected = outcome(() => withReferenceBytes(value, opts, copy));
        expect(outcome(() => withCanonicalBytes(value, opts, copy))).toEqual(expected);
        const textOutcome = outcome(() => new TextEncoder().encode(canonicalText(value, opts)));
        expect(textOutcome).toEqual(expected);
        if (typeof expected !== "string") expect(canonicalText(value, opts)).toBe(decodeUtf8(expected));
      }),
      { numRuns: 1500 },
    );
  }, 60_000);

  it("keeps a caller's byte view intact while its callback serializes again", () => {
    const seen = withCanonicalBytes({ a: "é" }, { maxDepth: 64, numberText: false }, (outer) => {
      const inner = withCanonicalBytes({ b: ["x".repeat(5000)] }, { maxDepth: 64, numberText: false }, copy);
      return [decodeUtf8(outer), inner.length];
    });
    expect(seen).toEqual(['{"a":"é"}', 5000 + '{"b":[""]}'.length]);
  });
});
