// The client's tool_params_hash (src/params-on-wire.ts, node:crypto over canonical JSON written once)
// is @leash/core's canonicalHash, for the published vectors and for values that are easy to get wrong.
import { readFileSync } from "node:fs";
import { canonicalHash, canonicalJson, parseJsonKeepingNumberText } from "@leash/core";
import { paramsFromJson } from "@leash/wire";
import { describe, expect, it } from "vitest";
import { paramsOnWire, UNSERIALIZABLE_PARAMS } from "../src/params-on-wire.js";

const fixtures = ["conformance.json", "conformance-1.0.1.json"].flatMap((name) => {
  const text = readFileSync(new URL(name, "file:///work/shared/spec/fixtures/"), "utf8");
  const file = parseJsonKeepingNumberText(text) as {
    fixtures: Array<{ name: string; call: { params: unknown }; canonical_hash: string }>;
  };
  return file.fixtures.map((f) => [`${name}: ${f.name}`, f.call.params, f.canonical_hash] as const);
});

const TRICKY: Array<[string, Record<string, unknown>]> = [
  [
    "numbers",
    { a: 0.1, b: -0, c: 1e-7, d: 5e-324, e: 1.25e-300, f: -Number.MAX_SAFE_INTEGER, g: 2 ** 53 - 1 },
  ],
  ["unicode keys, sorted by code point", { "\u{1F600}": 1, "\uFB01": 2, é: 3, e: 4, "": 5, Z: 6 }],
  [
    "strings needing escapes",
    { s: 'quote " backslash \\ tab \t nul \u0000 del \u007f', t: "naïve 🐍 \u2028" },
  ],
  ["nesting", { a: [1, [2, { z: null, y: true }], []], b: {}, c: { "k\n": [false, "x"] } }],
];
const TEXT = [
  '{"a":1.0,"b":1e16,"c":-0.0,"d":12345678901234567890}',
  '{"é":"\\ud83d\\ude00","a":[10.0]}',
  "{}",
];

describe("paramsOnWire", () => {
  it.each(fixtures)("hashes %s as the published canonical_hash", (_, params, published) => {
    const wire = paramsOnWire(params as Record<string, unknown>);
    expect(wire.hash).toBe(published);
    expect(wire.hash).toBe(canonicalHash(params));
  });

  it.each(TRICKY)("hashes %s as canonicalHash, sending the canonical JSON", (_, params) => {
    const wire = paramsOnWire(params);
    expect(wire.hash).toBe(canonicalHash(params));
    expect(wire.json).toBe(canonicalJson(params, { numberText: true }));
    expect(Buffer.from(wire.digest!).toString("hex")).toBe(wire.hash);
  });

  it.each(TEXT)("sends text params as given and hashes what the daemon reads from them: %s", (text) => {
    const wire = paramsOnWire(text);
    expect(wire.json).toBe(text);
    expect(wire.hash).toBe(canonicalHash(paramsFromJson(text)));
  });

  it("has no digest for params without a canonical form or text that is not a JSON object", () => {
    expect(paramsOnWire({ x: Number.NaN })).toEqual({
      json: UNSERIALIZABLE_PARAMS,
      hash: null,
      digest: null,
    });
    expect(paramsOnWire({ x: "lone \uD800" }).hash).toBeNull();
    expect(paramsOnWire("[1]")).toEqual({ json: "[1]", hash: null, digest: null });
  });
});
