// The structural canonicalizability test of SP/1.0 §3.2 Rule 1: can these params be hashed at all?
// It never serializes or hashes, and never throws: anything it cannot inspect is an error code.

import type { CanonicalizationErrorCode } from "./errors.js";
import { JsonNumberText, numberTextIsFinite } from "./number.js";
import { hasLoneSurrogate, SURROGATE } from "./strings.js";

/** The reference implementation's nesting limit (shackle/conformance.py `_MAX_DEPTH`). */
export const CANONICAL_MAX_DEPTH = 64;

/** The fixtures' stand-in for inputs JSON cannot spell (NaN, non-string keys); see fixtures/README.md. */
const NONCANONICAL_MARKER = "__noncanonical__";

const MAX_SAFE = 9007199254740991;

/**
 * Why `value` cannot be canonicalized as call params, or null when it can.
 *
 * Depth follows the reference: the params object is at depth 0, its values at depth 1, and any
 * value deeper than `maxDepth` is refused (so 64 nested levels pass and 65 do not).
 * The `__noncanonical__: true` marker is honoured in addition to, never instead of, the
 * structural checks: a NaN is refused whether or not the marker is present.
 */
export function canonicalizationError(
  value: unknown,
  maxDepth = CANONICAL_MAX_DEPTH,
): CanonicalizationErrorCode | null {
  try {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return "not_an_object";
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      return value instanceof Map ? "non_string_key" : "not_an_object";
    }
    if (!(maxDepth >= 0)) return "too_deep";
    forIn = objectPrototypeIsClean();
    const error = checkObject(value as Record<string, unknown>, 0, maxDepth, []);
    if (error !== null) return error;
    const record = value as Record<string, unknown>;
    return Object.hasOwn(record, NONCANONICAL_MARKER) && record[NONCANONICAL_MARKER] === true
      ? "noncanonical_marker"
      : null;
  } catch (error) {
    // Proxies and getters can throw anything; a stack overflow means nesting beyond what we can walk.
    return error instanceof RangeError ? "too_deep" : "unsupported_type";
  }
}

/** False when Object.prototype has an enumerable property (for…in would list it): then Object.keys. */
let forIn = true;

function objectPrototypeIsClean(): boolean {
  for (const _ in Object.prototype) return false;
  return true;
}

/** A lone surrogate? Short strings are scanned directly; long ones get the native pre-scan first. */
function loneSurrogateIn(s: string): boolean {
  return s.length <= 32 ? hasLoneSurrogate(s) : SURROGATE.test(s) && hasLoneSurrogate(s);
}

function checkValue(
  v: unknown,
  depth: number,
  maxDepth: number,
  path: unknown[],
): CanonicalizationErrorCode | null {
  if (depth > maxDepth) return overflow(v, depth, path);
  switch (typeof v) {
    case "string":
      return loneSurrogateIn(v) ? "lone_surrogate" : null;
    case "number":
      if (Number.isInteger(v)) return v > MAX_SAFE || v < -MAX_SAFE ? "unsafe_integer" : null;
      return Number.isFinite(v) ? null : "non_finite_number";
    case "boolean":
      return null;
    case "object": {
      if (v === null) return null;
      if (Array.isArray(v)) return checkArray(v, depth, maxDepth, path);
      const proto = Object.getPrototypeOf(v);
      if (proto === Object.prototype || proto === null) {
        return checkObject(v as Record<string, unknown>, depth, maxDepth, path);
      }
      // A number read from JSON text hashes from its text, as Python reads it (any int is exact).
      if (v instanceof JsonNumberText) return numberTextIsFinite(v) ? null : "non_finite_number";
      return v instanceof Map ? "non_string_key" : "unsupported_type";
    }
    default:
      return "unsupported_type";
  }
}

function checkObject(
  o: Record<string, unknown>,
  depth: number,
  maxDepth: number,
  path: unknown[],
): CanonicalizationErrorCode | null {
  if (Object.getOwnPropertySymbols(o).length !== 0) return "non_string_key";
  path[depth] = o;
  if (!forIn) {
    const keys = Object.keys(o);
    for (let i = 0; i < keys.length; i++) {
      const error = checkEntry(o, keys[i]!, depth, maxDepth, path);
      if (error !== null) return error;
    }
    return null;
  }
  // for…in lists the same own enumerable string keys without building an array.
  for (const k in o) {
    const error = checkEntry(o, k, depth, maxDepth, path);
    if (error !== null) return error;
  }
  return null;
}

function checkEntry(
  o: Record<string, unknown>,
  k: string,
  depth: number,
  maxDepth: number,
  path: unknown[],
): CanonicalizationErrorCode | null {
  if (loneSurrogateIn(k)) return "lone_surrogate";
  return checkValue(o[k], depth + 1, maxDepth, path);
}

function checkArray(
  a: unknown[],
  depth: number,
  maxDepth: number,
  path: unknown[],
): CanonicalizationErrorCode | null {
  path[depth] = a;
  for (let i = 0; i < a.length; i++) {
    // A hole reads as undefined and is refused: Python lists have no holes.
    const error = checkValue(a[i], depth + 1, maxDepth, path);
    if (error !== null) return error;
  }
  return null;
}

/**
 * Called only once the limit is crossed, so the common case pays nothing for cycle detection:
 * a cycle always runs into the limit, and then its container repeats on the current path.
 */
function overflow(v: unknown, depth: number, path: unknown[]): CanonicalizationErrorCode {
  return pathHasCycle(v, depth, path) ? "cycle" : "too_deep";
}

/** True when `v` or any container on path[0..depth) appears twice on that path. */
export function pathHasCycle(v: unknown, depth: number, path: readonly unknown[]): boolean {
  const seen = new Set<unknown>();
  for (let i = 0; i < depth; i++) {
    if (seen.has(path[i])) return true;
    seen.add(path[i]);
  }
  return typeof v === "object" && v !== null && seen.has(v);
}
