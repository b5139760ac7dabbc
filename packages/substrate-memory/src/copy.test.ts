// copyRecord against structuredClone, which it replaces at the memory store's boundary: equal values, nothing
// shared below the top, own `__proto__` keys kept, a polluted Object.prototype ignored, odd objects still deep.

import { describe, expect, it } from "vitest";
import { copyRecord } from "./copy.js";

/** Every object reachable from `a` that is also reachable, at the same path, from `b`. */
function sharedObjects(a: unknown, b: unknown, at = "$"): string[] {
  if (typeof a !== "object" || a === null) return [];
  if (a === b) return [at];
  return Object.keys(a).flatMap((k) =>
    sharedObjects((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${at}.${k}`),
  );
}

/** A seeded random JSON-like value (objects, arrays, strings, numbers, booleans, null). */
function randomValue(next: () => number, depth: number): unknown {
  const pick = Math.floor(next() * (depth > 3 ? 5 : 7));
  if (pick === 0) return null;
  if (pick === 1) return next() < 0.5;
  if (pick === 2) return next() * 1e6 - 5e5;
  if (pick === 3) return `s${Math.floor(next() * 100)}`;
  if (pick === 4) return Math.floor(next() * 10);
  const n = Math.floor(next() * 4);
  if (pick === 5) return Array.from({ length: n }, () => randomValue(next, depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) o[`k${Math.floor(next() * 6)}`] = randomValue(next, depth + 1);
  return o;
}

describe("copyRecord", () => {
  it("equals structuredClone's copy of JSON-like records and shares no object with the original", () => {
    let seed = 12345;
    const next = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    for (let run = 0; run < 500; run++) {
      const value = { row: randomValue(next, 0), list: [randomValue(next, 1)] };
      const copied = copyRecord(value);
      expect(copied).toStrictEqual(structuredClone(value));
      expect(sharedObjects(copied, value)).toEqual([]);
    }
  });

  it("keeps a __proto__ key an own key, and gives a null-prototype object Object.prototype", () => {
    const counts = Object.create(null) as Record<string, number>;
    Object.defineProperty(counts, "__proto__", {
      value: 2,
      enumerable: true,
      writable: true,
      configurable: true,
    });
    counts.search = 1;
    const row = { state: { repeat_counts: counts } };
    const copied = copyRecord(row);
    expect(Object.getPrototypeOf(copied.state.repeat_counts)).toBe(Object.prototype);
    expect(Object.keys(copied.state.repeat_counts)).toEqual(["__proto__", "search"]);
    expect(Object.getOwnPropertyDescriptor(copied.state.repeat_counts, "__proto__")?.value).toBe(2);
    expect(copied).toStrictEqual(structuredClone(row));
  });

  it("copies no enumerable property inherited from a polluted Object.prototype", () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.polluted = { evil: true };
    try {
      const copied = copyRecord({ a: { b: [1, { c: "x" }] } });
      expect(Object.hasOwn(copied, "polluted")).toBe(false);
      expect(Object.hasOwn(copied.a, "polluted")).toBe(false);
      expect(JSON.stringify(copied)).toBe('{"a":{"b":[1,{"c":"x"}]}}');
    } finally {
      delete proto.polluted;
    }
  });

  it("still copies deeply what is not a plain object or array", () => {
    const row = { at: new Date(5), bytes: new Uint8Array([1, 2]) };
    const copied = copyRecord(row);
    expect(copied).toStrictEqual(structuredClone(row));
    copied.bytes[0] = 9;
    expect(row.bytes[0]).toBe(1);
    expect(copied.at).not.toBe(row.at);
  });
});
