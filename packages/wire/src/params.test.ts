import { execFileSync } from "node:child_process";
import { canonicalHash } from "@leash/core";
import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import { digestToHex, paramsDigest, paramsFromJson, paramsToJson } from "./params.js";

const PYTHON = "/usr/bin/python3";
const REFERENCE = `
import hashlib, json, sys
for line in sys.stdin.read().split("\\n"):
    if line:
        s = json.loads(line)
        print(hashlib.sha256(json.dumps(json.loads(s), sort_keys=True, separators=(",",":"), ensure_ascii=False).encode()).hexdigest())
`;

/** The reference digest of each JSON text, computed by Python. */
function pythonDigests(texts: string[]): string[] {
  const out = execFileSync(PYTHON, ["-c", REFERENCE], {
    input: texts.map((t) => JSON.stringify(t)).join("\n"),
    encoding: "utf8",
  });
  return out.trim().split("\n");
}

const CASES = [
  '{"x": 1e16}',
  '{"x": 10.0}',
  '{"x": -0.0}',
  '{"x": 10}',
  '{"a": [1.5, 2.50, 1E300, -1e-7, 0.1, 12345678901234567890, 123456789012345678901234567890.0]}',
  '{"é": "ü", "😀": 1, "z": {"y": [true, false, null]}, "a": "\\u0000\\ud83d\\ude00"}',
  '{"dup": 1, "dup": 2.0}',
  '{"n": 5e-324, "m": 1.7976931348623157e308, "p": 100000000000000000000.0}',
];

describe("paramsFromJson", () => {
  it("keeps 1e16, 10.0 and -0.0 (and friends) so digests equal Python's", () => {
    const expected = pythonDigests(CASES);
    CASES.forEach((text, i) => {
      expect(canonicalHash(paramsFromJson(text)), text).toBe(expected[i]);
      expect(digestToHex(paramsDigest(paramsFromJson(text)))).toBe(expected[i]);
    });
  });

  it("paramsToJson sends text whose digest on the other side is this side's", () => {
    const expected = pythonDigests(CASES.slice(0, 7).map((t) => paramsToJson(paramsFromJson(t))));
    CASES.slice(0, 7).forEach((text, i) => {
      expect(expected[i], text).toBe(canonicalHash(paramsFromJson(text)));
    });
    expect(paramsToJson({ b: 1, a: "x" })).toBe('{"a":"x","b":1}');
  });

  it("leaves 1e400 (Python's inf) to rule 1: parsed, but it has no canonical form", () => {
    expect(() => canonicalHash(paramsFromJson('{"x": 1e400}'))).toThrow(/NaN and Infinity/);
  });

  it("gives ordinary numbers to code that reads params", () => {
    expect(paramsFromJson('{"status": 401, "r": 0.5}')).toEqual({ status: 401, r: 0.5 });
  });

  it("refuses malformed JSON, empty text and non-objects with a clear error", () => {
    for (const text of [
      "",
      "  ",
      "{",
      '{"a":}',
      "[1,2]",
      "null",
      "3",
      '"s"',
      "{'a':1}",
      '{"a":1} x',
      "NaN",
    ]) {
      let error: unknown;
      try {
        paramsFromJson(text);
      } catch (e) {
        error = e;
      }
      expect(WireError.isInstance(error), text).toBe(true);
      expect((error as WireError).code).toBe("invalid_params_json");
      expect((error as WireError).message).toMatch(/tool_params_json/);
    }
  });
});
