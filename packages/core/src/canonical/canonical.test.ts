// Unit cases for canonical JSON, the structural check and the error type; expectations are Python outputs.
// Fixture digests live in fixtures.test.ts, properties in properties.test.ts.

import { describe, expect, it } from "vitest";
import { sha256Hex } from "../crypto/sha256.js";
import {
  CanonicalizationError,
  type CanonicalizationErrorCode,
  canonicalHash,
  canonicalizationError,
  canonicalJson,
  JsonNumberText,
  parseJsonKeepingNumberText,
  parseJsonPreservingNumbers,
  vectorHash,
} from "./index.js";

/** `{"a": {"a": … leaf}}` with `levels` objects, so the leaf sits at depth `levels`. */
function nest(levels: number, leaf: unknown = 1, wrap = (v: unknown): unknown => ({ a: v })): unknown {
  let v = leaf;
  for (let i = 0; i < levels; i++) v = wrap(v);
  return v;
}

function codeOf(fn: () => unknown): CanonicalizationErrorCode | "no error" {
  try {
    fn();
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) return error.code;
    throw error;
  }
  return "no error";
}

describe("canonicalJson matches Python json.dumps", () => {
  it("sorts keys by code point, not UTF-16 unit", () => {
    // U+1F600 > U+FB01, but its lead surrogate 0xD83D < 0xFB01, so JS's default sort gets it wrong.
    expect(Object.keys({ "\uFB01": 1, "\u{1F600}": 2 }).sort()).toEqual(["\u{1F600}", "\uFB01"]);
    expect(canonicalJson({ "\u{1F600}": 2, "\uFB01": 1 })).toBe('{"ﬁ":1,"😀":2}');
    expect(canonicalJson({ "\uFFFF": 1, "\u{10000}": 2, "\uE000": 3, a: 4, "\uD7FF": 5 })).toBe(
      '{"a":4,"\uD7FF":5,"\uE000":3,"\uFFFF":1,"𐀀":2}',
    );
  });

  it("sorts integer-like keys as strings and nests compactly", () => {
    expect(canonicalJson({ b: [1, { d: null, c: true }], a: false, "": "x" })).toBe(
      '{"":"x","a":false,"b":[1,{"c":true,"d":null}]}',
    );
    expect(canonicalJson({ 10: 1, 9: 2, a: 3 })).toBe('{"10":1,"9":2,"a":3}');
  });

  it("sorts more keys than the insertion-sort cutoff", () => {
    const keys = Array.from({ length: 40 }, (_, i) => `k${(i * 7919) % 40}`);
    const out = canonicalJson(Object.fromEntries(keys.map((k) => [k, 0])));
    expect(out).toBe(
      `{${[...keys]
        .sort()
        .map((k) => `"${k}":0`)
        .join(",")}}`,
    );
  });

  it("prints floats as Python repr", () => {
    const nums = [
      1e-7,
      0.00025,
      5e-324,
      123.456,
      0.1 + 0.2,
      1.5e-5,
      0.0001,
      9.5e-5,
      -2.5e-10,
      0.5,
      -0.001,
      2 ** 52 - 0.5,
    ];
    expect(canonicalJson(nums)).toBe(
      "[1e-07,0.00025,5e-324,123.456,0.30000000000000004,1.5e-05,0.0001,9.5e-05,-2.5e-10,0.5,-0.001,4503599627370495.5]",
    );
    // Every double from 2^53 up is integral, so a JS number there is an (unsafe) int, never a float:
    // Python's 1.7976931348623157e+308 is only reachable through numberText.
    expect(codeOf(() => canonicalJson(1.7976931348623157e308))).toBe("unsafe_integer");
  });

  it("prints integral numbers as ints, -0 as 0, up to ±(2^53−1)", () => {
    expect(canonicalJson([0, -0, 100, -7, 2 ** 53 - 1, -(2 ** 53 - 1), 1e15])).toBe(
      "[0,0,100,-7,9007199254740991,-9007199254740991,1000000000000000]",
    );
    expect(codeOf(() => canonicalJson(2 ** 53))).toBe("unsafe_integer");
    expect(codeOf(() => canonicalJson(1e16))).toBe("unsafe_integer");
    expect(codeOf(() => canonicalJson(-(2 ** 53)))).toBe("unsafe_integer");
  });

  it("escapes strings exactly as Python does", () => {
    const s = '\x00\x01\x08\x09\x0a\x0b\x0c\x0d\x1f\x7f"\\/\u2028\u2029é😀\x85';
    const python = '"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f\x7f\\"\\\\/\u2028\u2029é😀\x85"';
    expect(canonicalJson(s)).toBe(python);
    expect(canonicalJson({ [s]: s })).toBe(`{${python}:${python}}`);
    expect(canonicalJson({ 'a"': 1, a: 2, "a\n": 3 })).toBe('{"a":2,"a\\n":3,"a\\"":1}');
  });

  it("accepts scalars and arrays at the top, which canonicalizationError does not", () => {
    expect(canonicalJson(["not", "an", "object"])).toBe('["not","an","object"]');
    expect(canonicalJson(null)).toBe("null");
    expect(canonicalJson("x")).toBe('"x"');
    expect(canonicalJson({})).toBe("{}");
    expect(canonicalJson([])).toBe("[]");
  });

  it("accepts null-prototype objects and an own __proto__ key", () => {
    const o = Object.create(null) as Record<string, unknown>;
    o.b = 1;
    o.a = [];
    expect(canonicalizationError(o)).toBeNull();
    expect(canonicalJson(o)).toBe('{"a":[],"b":1}');
    const parsed = JSON.parse('{"__proto__":{"x":1},"a":2}');
    expect(canonicalizationError(parsed)).toBeNull();
    expect(canonicalJson(parsed)).toBe('{"__proto__":{"x":1},"a":2}');
  });

  it("ignores toJSON: a function-valued property is simply unsupported", () => {
    expect(codeOf(() => canonicalJson({ toJSON: () => 1 }))).toBe("unsupported_type");
  });
});

describe("canonicalHash", () => {
  it("equals Python's sha256 over the UTF-8 canonical text", () => {
    expect(canonicalHash({ amount: 100, to: "acct_1" })).toBe(
      "ceb467c64a13639fdf30bfd629018fc427f115c80019eb926ddc90fa978222f3",
    );
    const v = {
      ключ: "значение",
      emoji: "😀🎉",
      mixed: ["é", 1, 2.5, null],
      "\uFB01": "ﬁ",
      "\u{1F600}": "x",
    };
    expect(canonicalHash(v)).toBe("a1596ecad9b21085092ee7de6b74f93b99632fa9a77064177bb745ba070a3610");
  });

  it("throws CanonicalizationError on non-canonicalizable input", () => {
    expect(codeOf(() => canonicalHash({ x: Number.NaN }))).toBe("non_finite_number");
  });
});

describe("structural rejection", () => {
  class Point {
    x = 1;
  }
  const holey: number[] = [];
  holey[2] = 3;
  const cases: [string, unknown, CanonicalizationErrorCode][] = [
    ["NaN", { x: Number.NaN }, "non_finite_number"],
    ["Infinity", { x: [Number.POSITIVE_INFINITY] }, "non_finite_number"],
    ["-Infinity", { x: { y: Number.NEGATIVE_INFINITY } }, "non_finite_number"],
    ["unsafe integer", { x: 2 ** 53 }, "unsafe_integer"],
    ["symbol key", { x: { [Symbol("k")]: 1 } }, "non_string_key"],
    ["Map", { x: new Map([[1, 2]]) }, "non_string_key"],
    ["undefined", { x: undefined }, "unsupported_type"],
    ["function", { x: () => 1 }, "unsupported_type"],
    ["symbol value", { x: Symbol("v") }, "unsupported_type"],
    ["bigint", { x: 1n }, "unsupported_type"],
    ["Date", { x: new Date(0) }, "unsupported_type"],
    ["Set", { x: new Set() }, "unsupported_type"],
    ["class instance", { x: new Point() }, "unsupported_type"],
    ["typed array", { x: new Uint8Array(2) }, "unsupported_type"],
    ["boxed string", { x: Object("s") }, "unsupported_type"],
    ["boxed number", { x: Object(1) }, "unsupported_type"],
    ["array hole", { x: holey }, "unsupported_type"],
    ["lone high surrogate in value", { x: "a\uD800b" }, "lone_surrogate"],
    ["lone low surrogate in value", { x: ["\uDC00"] }, "lone_surrogate"],
    ["reversed pair", { x: "\uDE00\uD83D" }, "lone_surrogate"],
    ["high surrogate at end", { x: "ok\uD83D" }, "lone_surrogate"],
    ["lone surrogate in key", { "k\uD800": 1 }, "lone_surrogate"],
    ["lone surrogate in nested key", { a: { "\uDFFF": 1, "\u{1F600}": 2 } }, "lone_surrogate"],
  ];

  it.each(cases)("%s", (_, value, code) => {
    expect(canonicalizationError(value)).toBe(code);
    expect(codeOf(() => canonicalJson(value))).toBe(code);
  });

  it("rejects non-objects at the top level", () => {
    for (const v of [[], ["a"], "s", 1, null, undefined, true, new Date(0), new Point(), () => 1]) {
      expect(canonicalizationError(v)).toBe("not_an_object");
    }
    expect(canonicalizationError(new Map())).toBe("non_string_key");
    expect(canonicalizationError(Object.assign({}, { [Symbol("k")]: 1 }))).toBe("non_string_key");
  });

  it("accepts well-formed surrogate pairs and the boundaries of the safe range", () => {
    const v = { "\u{1F600}": "\u{10FFFF}\u{10000}", n: [2 ** 53 - 1, -(2 ** 53 - 1), 1.5, -0, 5e-324] };
    expect(canonicalizationError(v)).toBeNull();
    expect(codeOf(() => canonicalJson(v))).toBe("no error");
  });

  it("detects cycles through objects and arrays", () => {
    const o: Record<string, unknown> = { a: 1 };
    o.self = o;
    expect(canonicalizationError(o)).toBe("cycle");
    expect(codeOf(() => canonicalJson(o))).toBe("cycle");
    const a: unknown[] = [];
    const p = { list: [1, a] };
    a.push({ back: p });
    expect(canonicalizationError(p)).toBe("cycle");
    expect(codeOf(() => canonicalJson(p))).toBe("cycle");
  });

  it("does not mistake a shared (acyclic) value for a cycle", () => {
    const shared = { z: [1, 2] };
    const v = { a: shared, b: shared, c: [shared, shared] };
    expect(canonicalizationError(v)).toBeNull();
    expect(canonicalJson(v)).toBe('{"a":{"z":[1,2]},"b":{"z":[1,2]},"c":[{"z":[1,2]},{"z":[1,2]}]}');
  });

  it("accepts depth 64 and rejects 65, as the reference does", () => {
    expect(canonicalizationError(nest(64))).toBeNull();
    expect(canonicalizationError(nest(65))).toBe("too_deep");
    expect(codeOf(() => canonicalJson(nest(64)))).toBe("no error");
    expect(codeOf(() => canonicalJson(nest(65)))).toBe("too_deep");
    // Arrays count like objects; an empty innermost container adds no deeper value.
    expect(canonicalizationError({ a: nest(63, 1, (v) => [v]) })).toBeNull();
    expect(canonicalizationError({ a: nest(64, 1, (v) => [v]) })).toBe("too_deep");
    expect(canonicalizationError(nest(64, {}))).toBeNull();
    expect(canonicalizationError(nest(65, {}))).toBe("too_deep");
  });

  it("honours a custom depth limit", () => {
    expect(canonicalizationError(nest(3), 3)).toBeNull();
    expect(canonicalizationError(nest(4), 3)).toBe("too_deep");
    expect(canonicalizationError({}, 0)).toBeNull();
    expect(canonicalizationError({ a: 1 }, 0)).toBe("too_deep");
    expect(canonicalizationError({}, -1)).toBe("too_deep");
    expect(codeOf(() => canonicalJson(nest(4), { maxDepth: 3 }))).toBe("too_deep");
    expect(codeOf(() => canonicalJson(nest(100), { maxDepth: 200 }))).toBe("no error");
  });

  it("reports nesting beyond the engine's stack as too_deep, without throwing", () => {
    const deep = nest(200_000);
    expect(canonicalizationError(deep, Number.POSITIVE_INFINITY)).toBe("too_deep");
    expect(codeOf(() => canonicalJson(deep, { maxDepth: Number.POSITIVE_INFINITY }))).toBe("too_deep");
  });

  it("turns throwing getters and proxy traps into unsupported_type", () => {
    const getter = Object.defineProperty({}, "x", {
      enumerable: true,
      get() {
        throw new Error("boom");
      },
    });
    expect(canonicalizationError(getter)).toBe("unsupported_type");
    expect(canonicalizationError({ nested: getter })).toBe("unsupported_type");
    const trap = new Proxy(
      {},
      {
        ownKeys() {
          throw new TypeError("no keys for you");
        },
      },
    );
    expect(canonicalizationError(trap)).toBe("unsupported_type");
    expect(canonicalizationError({ p: trap })).toBe("unsupported_type");
    let thrown: unknown;
    try {
      canonicalJson({ nested: getter });
    } catch (error) {
      thrown = error;
    }
    expect(CanonicalizationError.isInstance(thrown)).toBe(true);
    expect((thrown as CanonicalizationError).code).toBe("unsupported_type");
    expect((thrown as CanonicalizationError).cause).toBeInstanceOf(Error);
  });

  it("reads a well-behaved getter like a data property", () => {
    const o = Object.defineProperty({ b: 2 }, "a", { enumerable: true, get: () => 1 });
    expect(canonicalizationError(o)).toBeNull();
    expect(canonicalJson(o)).toBe('{"a":1,"b":2}');
  });
});

describe("the __noncanonical__ fixture marker", () => {
  it("is honoured at the top level when its value is true", () => {
    expect(canonicalizationError({ __noncanonical__: true, reason: "params.x = NaN", tool: "click" })).toBe(
      "noncanonical_marker",
    );
  });

  it("is not honoured for other values or deeper down", () => {
    expect(canonicalizationError({ __noncanonical__: false })).toBeNull();
    expect(canonicalizationError({ __noncanonical__: "true" })).toBeNull();
    expect(canonicalizationError({ inner: { __noncanonical__: true } })).toBeNull();
  });

  it("never replaces the structural checks", () => {
    expect(canonicalizationError({ __noncanonical__: true, x: Number.NaN })).toBe("non_finite_number");
    expect(canonicalizationError({ x: Number.NaN })).toBe("non_finite_number");
  });

  it("means nothing to the serializer, which hashes the fixture's params as published", () => {
    expect(canonicalJson({ __noncanonical__: true, tool: "click" })).toBe(
      '{"__noncanonical__":true,"tool":"click"}',
    );
  });
});

describe("CanonicalizationError", () => {
  it("has a stable code, a name and a cross-copy marker", () => {
    const error = new CanonicalizationError("cycle");
    expect(error.code).toBe("cycle");
    expect(error.name).toBe("CanonicalizationError");
    expect(error.message).toMatch(/itself/);
    expect(error).toBeInstanceOf(Error);
    expect(CanonicalizationError.isInstance(error)).toBe(true);
    expect(CanonicalizationError.isInstance({ [Symbol.for("leash.core.CanonicalizationError")]: true })).toBe(
      true,
    );
    expect(CanonicalizationError.isInstance(new Error("x"))).toBe(false);
    expect(CanonicalizationError.isInstance(null)).toBe(false);
    expect(CanonicalizationError.isInstance("cycle")).toBe(false);
  });

  it("keeps a cause", () => {
    const cause = new Error("root");
    expect(new CanonicalizationError("unsupported_type", { cause }).cause).toBe(cause);
  });
});

/** Number literals and how Python's json module re-prints them (python3: json.dumps(json.loads(s))). */
const PYTHON_REPRINTS: [string, string][] = [
  ["10.0", "10.0"],
  ["1e5", "100000.0"],
  ["-0", "0"],
  ["-0.0", "-0.0"],
  ["0.0", "0.0"],
  ["1e16", "1e+16"],
  ["1e+22", "1e+22"],
  ["1e15", "1000000000000000.0"],
  ["1.0e-7", "1e-07"],
  ["0.00025", "0.00025"],
  ["123.456", "123.456"],
  ["-1e-400", "-0.0"],
  ["5E-324", "5e-324"],
  ["1.7976931348623157e+308", "1.7976931348623157e+308"],
  ["123456789012345678.0", "1.2345678901234568e+17"],
  ["0.1", "0.1"],
  ["12345678901234567890", "12345678901234567890"],
  ["-98765432109876543210987654321", "-98765432109876543210987654321"],
  ["100", "100"],
];

describe("number-preserving parse and numberText serialization", () => {
  it.each(PYTHON_REPRINTS)("%s re-prints as Python's %s", (literal, expected) => {
    expect(canonicalJson(parseJsonPreservingNumbers(literal), { numberText: true })).toBe(expected);
    expect(canonicalJson(new JsonNumberText(literal), { numberText: true })).toBe(expected);
  });

  it("refuses float literals that overflow to infinity, as allow_nan=False does", () => {
    expect(codeOf(() => canonicalJson(parseJsonPreservingNumbers("[1E400]"), { numberText: true }))).toBe(
      "non_finite_number",
    );
  });

  it("still accepts plain numbers alongside JsonNumberText", () => {
    const v = { a: new JsonNumberText("10.0"), b: 10, c: 0.5 };
    expect(canonicalJson(v, { numberText: true })).toBe('{"a":10.0,"b":10,"c":0.5}');
  });

  it("parses objects as plain objects, keeps the last duplicate key, keeps __proto__ as data", () => {
    const v = parseJsonPreservingNumbers('{"a":1,"a":2.0,"__proto__":{"x":[true,null,"s"]}}');
    expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
    expect(canonicalJson(v, { numberText: true })).toBe('{"__proto__":{"x":[true,null,"s"]},"a":2.0}');
  });

  it("throws SyntaxError on malformed JSON", () => {
    expect(() => parseJsonPreservingNumbers("{")).toThrow(SyntaxError);
    expect(() => parseJsonPreservingNumbers("[NaN]")).toThrow(SyntaxError);
  });

  it("JsonNumberText only holds JSON number literals", () => {
    for (const bad of ["01", "NaN", "1.", ".5", "+1", "1e", "", " 1", "0x10", "Infinity"]) {
      expect(() => new JsonNumberText(bad), bad).toThrow(SyntaxError);
    }
    expect(new JsonNumberText("-1.5E+3").text).toBe("-1.5E+3");
    expect(String(new JsonNumberText("2.50"))).toBe("2.50");
  });
});

describe("numbers kept as their JSON text in params", () => {
  it("are canonicalizable, except float literals that overflow to infinity", () => {
    for (const literal of [
      "1e16",
      "1.5e300",
      "10.0",
      "-0.0",
      "12345678901234567890",
      `1${"0".repeat(400)}`,
    ]) {
      expect(canonicalizationError({ x: new JsonNumberText(literal) }), literal).toBeNull();
    }
    expect(canonicalizationError({ x: [new JsonNumberText("1E400")] })).toBe("non_finite_number");
    expect(canonicalizationError({ x: new JsonNumberText("-1e400") })).toBe("non_finite_number");
    expect(canonicalizationError(new JsonNumberText("1"))).toBe("not_an_object");
  });

  it("hash as Python hashes the literal, while JavaScript numbers keep the fallback", () => {
    // The right-hand texts are python3's json.dumps(json.loads(f'{{"x":{literal}}}'), sort_keys=True, ...).
    const python: [string, string][] = [
      ["1e16", '{"x":1e+16}'],
      ["1e+16", '{"x":1e+16}'],
      ["1.5e300", '{"x":1.5e+300}'],
      ["10.0", '{"x":10.0}'],
      ["-0.0", '{"x":-0.0}'],
      ["12345678901234567890", '{"x":12345678901234567890}'],
    ];
    for (const [literal, text] of python) {
      expect(canonicalHash(parseJsonKeepingNumberText(`{"x":${literal}}`)), literal).toBe(sha256Hex(text));
    }
    expect(codeOf(() => canonicalHash({ x: 1e16 }))).toBe("unsafe_integer");
    expect(canonicalHash({ x: -0 })).toBe(sha256Hex('{"x":0}'));
    expect(codeOf(() => canonicalHash(parseJsonKeepingNumberText('{"x":1E400}')))).toBe("non_finite_number");
  });

  it("canonicalJson still wants numberText to print them", () => {
    expect(codeOf(() => canonicalJson({ x: new JsonNumberText("1") }))).toBe("unsupported_type");
  });
});

describe("parseJsonKeepingNumberText", () => {
  it("keeps a literal's text only where a JavaScript number would hash differently", () => {
    const v = parseJsonKeepingNumberText(
      '{"a":100,"b":0.5,"c":-0,"d":1e-7,"e":9007199254740991,"f":10.0,"g":1e5,"h":-0.0,"i":1e16,"j":9007199254740992,"k":1E400}',
    ) as Record<string, unknown>;
    for (const key of ["a", "b", "c", "d", "e"]) expect(typeof v[key], key).toBe("number");
    expect(Object.is(v.c, -0)).toBe(true);
    for (const key of ["f", "g", "h", "i", "j", "k"]) expect(v[key], key).toBeInstanceOf(JsonNumberText);
    expect((v.f as JsonNumberText).text).toBe("10.0");
  });

  it.each(PYTHON_REPRINTS)("%s hashes as Python's %s", (literal, expected) => {
    expect(canonicalJson(parseJsonKeepingNumberText(literal), { numberText: true })).toBe(expected);
  });

  it("parses like JSON.parse otherwise: last duplicate key, __proto__ as data, SyntaxError", () => {
    const v = parseJsonKeepingNumberText('{"a":1,"a":2,"__proto__":{"x":[true,null,"s"]}}');
    expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
    expect(v).toEqual(JSON.parse('{"a":2,"__proto__":{"x":[true,null,"s"]}}'));
    expect(() => parseJsonKeepingNumberText("{")).toThrow(SyntaxError);
  });

  it("falls back to JSON.parse for nesting too deep to recurse, which is refused anyway", () => {
    const deep = `{"a":${"[".repeat(200_000)}1${"]".repeat(200_000)}}`;
    const v = parseJsonKeepingNumberText(deep);
    expect(canonicalizationError(v)).toBe("too_deep");
  });
});

describe("vectorHash", () => {
  it("drops only the vector_hash key", () => {
    const fixture = parseJsonPreservingNumbers('{"name":"x","budget":10.0,"vector_hash":"old"}');
    const again = parseJsonPreservingNumbers('{"vector_hash":"different","budget":10.0,"name":"x"}');
    expect(vectorHash(fixture)).toBe(vectorHash(again));
    // python3: sha256(json.dumps({"budget": 10.0, "name": "x"}, sort_keys=True, separators=(",", ":")))
    expect(vectorHash(fixture)).toBe("569b7f4564a26f87592acf384fee4b76f60ce408602559c8bcbb2bed8ac55ab8");
    // The same fixture through JSON.parse has lost the ".0" and seals as {"budget":10,...}.
    expect(vectorHash(JSON.parse('{"name":"x","budget":10.0}'))).toBe(
      canonicalHash({ budget: 10, name: "x" }),
    );
  });

  it("requires an object", () => {
    expect(codeOf(() => vectorHash([1]))).toBe("not_an_object");
    expect(codeOf(() => vectorHash("x"))).toBe("not_an_object");
    expect(codeOf(() => vectorHash(null))).toBe("not_an_object");
    expect(codeOf(() => vectorHash(new Map()))).toBe("not_an_object");
    const getter = Object.defineProperty({}, "x", {
      enumerable: true,
      get() {
        throw new Error("boom");
      },
    });
    expect(codeOf(() => vectorHash(getter))).toBe("unsupported_type");
  });
});
