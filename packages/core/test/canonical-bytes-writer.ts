// The canonical writer as it was before strings were appended whole (UTF-8 bytes written unit by unit), kept
// as the oracle the equivalence property compares the current writer with. Test-only; never exported.

import { pathHasCycle } from "../src/canonical/check.js";
import { CanonicalizationError } from "../src/canonical/errors.js";
import { JsonNumberText, numberTextToCanonical, numberToCanonical } from "../src/canonical/number.js";
import { compareCodePoints, hasLoneSurrogate } from "../src/canonical/strings.js";

/** What canonicalJson's options become for one walk. */
export interface WriteOptions {
  readonly maxDepth: number;
  readonly numberText: boolean;
}

const INITIAL_BYTES = 1024;
/** A buffer grown past this by one huge value is dropped afterwards rather than kept for good. */
const KEPT_BYTES = 1 << 20;

// The walk's state lives in module variables, not an object: the byte loop is the hot path of a
// digest, and V8 keeps these in registers better than an object's fields. A getter that serializes
// during a walk (re-entry) saves and restores them.
let buf = new Uint8Array(INITIAL_BYTES);
let at = 0;
let maxDepth = 0;
let numberText = false;
/** False when Object.prototype has an enumerable property: then for…in would list it, so keys come from Object.keys. */
let forIn = true;
/** path[d] is the container being written at depth d; read only after the depth limit is crossed. */
let path: unknown[] = [];
/** One reusable key array per depth, so sorting keys allocates nothing. */
let keyArrays: string[][] = [];
let busy = false;

/** The escape of ASCII `c` (a quote, a backslash, a C0 control), as Python and JSON.stringify write it. */
const ESCAPES: string[] = [];
const SHORT = new Map([
  [8, "\\b"],
  [9, "\\t"],
  [10, "\\n"],
  [12, "\\f"],
  [13, "\\r"],
]);
for (let c = 0; c < 0x20; c++) ESCAPES[c] = SHORT.get(c) ?? `\\u${c.toString(16).padStart(4, "0")}`;
ESCAPES[0x22] = '\\"';
ESCAPES[0x5c] = "\\\\";

function objectPrototypeIsClean(): boolean {
  for (const _ in Object.prototype) return false;
  return true;
}

/**
 * Runs `use` on the canonical UTF-8 bytes of `value`. The view is valid only inside `use` (the buffer
 * is reused by the next walk). Same contract as canonicalJson.
 * @throws CanonicalizationError for anything that has no canonical form.
 */
export function withReferenceBytes<T>(
  value: unknown,
  options: WriteOptions,
  use: (bytes: Uint8Array) => T,
): T {
  if (!(options.maxDepth >= 0)) throw new CanonicalizationError("too_deep");
  const outer = busy ? { buf, at, maxDepth, numberText, forIn, path, keyArrays } : null;
  if (outer !== null) {
    buf = new Uint8Array(INITIAL_BYTES);
    path = [];
    keyArrays = [];
  }
  busy = true;
  at = 0;
  maxDepth = options.maxDepth;
  numberText = options.numberText;
  try {
    forIn = objectPrototypeIsClean();
    writeValue(value, 0);
    return use(buf.subarray(0, at));
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) throw error;
    // A stack overflow is nesting deeper than this engine can walk; anything else came from a
    // getter or proxy trap, which makes the value uninspectable.
    if (error instanceof RangeError) throw new CanonicalizationError("too_deep", { cause: error });
    throw new CanonicalizationError("unsupported_type", { cause: error });
  } finally {
    if (outer === null) {
      busy = false;
      // Drop the references to the caller's containers without shrinking the array (no reallocation).
      for (let i = 0; i < path.length; i++) path[i] = undefined;
      if (buf.length > KEPT_BYTES) buf = new Uint8Array(INITIAL_BYTES);
    } else {
      ({ buf, at, maxDepth, numberText, forIn, path, keyArrays } = outer);
    }
  }
}

function grow(needed: number): void {
  let size = buf.length * 2;
  while (size < at + needed) size *= 2;
  const bigger = new Uint8Array(size);
  bigger.set(buf.subarray(0, at));
  buf = bigger;
}

// Single bytes (brackets, commas, colons, small digits) are written inline as
// `if (at >= buf.length) grow(1); buf[at++] = …`, keeping the hot loop free of calls.

/** `s` is ASCII without anything to escape (numbers, literals, escapes). */
function writeAscii(s: string): void {
  const n = s.length;
  if (at + n > buf.length) grow(n);
  for (let i = 0; i < n; i++) buf[at++] = s.charCodeAt(i);
}

/**
 * Writes `s` quoted and escaped, as UTF-8. Returns true when it held a surrogate pair (a key with one
 * may sort differently by code point than by UTF-16 unit).
 */
function writeString(s: string): boolean {
  const n = s.length;
  // Room for three bytes per unit (the most UTF-8 needs) and the quotes; an escape needs up to six.
  if (at + n * 3 + 2 > buf.length) grow(n * 3 + 2);
  let b = buf;
  let p = at;
  let pair = false;
  b[p++] = 0x22;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      if (c >= 0x20 && c !== 0x22 && c !== 0x5c) {
        b[p++] = c;
        continue;
      }
      at = p;
      if (at + 6 + (n - i) * 3 + 1 > b.length) grow(6 + (n - i) * 3 + 1);
      writeAscii(ESCAPES[c]!);
      b = buf;
      p = at;
    } else if (c < 0x800) {
      b[p++] = 0xc0 | (c >> 6);
      b[p++] = 0x80 | (c & 63);
    } else if (c < 0xd800 || c > 0xdfff) {
      b[p++] = 0xe0 | (c >> 12);
      b[p++] = 0x80 | ((c >> 6) & 63);
      b[p++] = 0x80 | (c & 63);
    } else {
      const d = c <= 0xdbff && i + 1 < n ? s.charCodeAt(i + 1) : 0;
      if (d < 0xdc00 || d > 0xdfff) throw new CanonicalizationError("lone_surrogate");
      i++;
      pair = true;
      const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
      b[p++] = 0xf0 | (cp >> 18);
      b[p++] = 0x80 | ((cp >> 12) & 63);
      b[p++] = 0x80 | ((cp >> 6) & 63);
      b[p++] = 0x80 | (cp & 63);
    }
  }
  b[p++] = 0x22;
  at = p;
  return pair;
}

function writeValue(v: unknown, depth: number): void {
  if (depth > maxDepth) {
    throw new CanonicalizationError(pathHasCycle(v, depth, path) ? "cycle" : "too_deep");
  }
  switch (typeof v) {
    case "string":
      writeString(v);
      return;
    case "number":
      // Most numbers in params are small non-negative integers: one byte, no string built.
      if (v >= 0 && v < 10 && Number.isInteger(v)) {
        if (at >= buf.length) grow(1);
        buf[at++] = 0x30 + v;
      } else {
        writeAscii(numberToCanonical(v));
      }
      return;
    case "boolean":
      writeAscii(v ? "true" : "false");
      return;
    case "object": {
      if (v === null) {
        writeAscii("null");
        return;
      }
      if (Array.isArray(v)) {
        writeArray(v, depth);
        return;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto === Object.prototype || proto === null) {
        writeObject(v as Record<string, unknown>, depth);
        return;
      }
      if (numberText && v instanceof JsonNumberText) {
        writeAscii(numberTextToCanonical(v));
        return;
      }
      throw new CanonicalizationError(v instanceof Map ? "non_string_key" : "unsupported_type");
    }
    default:
      throw new CanonicalizationError("unsupported_type");
  }
}

function writeArray(a: unknown[], depth: number): void {
  const n = a.length;
  path[depth] = a;
  if (at >= buf.length) grow(1);
  buf[at++] = 0x5b;
  // A hole reads as undefined and is refused: Python lists have no holes.
  for (let i = 0; i < n; i++) {
    if (i !== 0) {
      if (at >= buf.length) grow(1);
      buf[at++] = 0x2c;
    }
    writeValue(a[i], depth + 1);
  }
  if (at >= buf.length) grow(1);
  buf[at++] = 0x5d;
}

/** The object's own enumerable keys in `keys[0..n)`, sorted by UTF-16 unit; returns n. */
function sortedKeys(o: Record<string, unknown>, keys: string[]): number {
  let n = 0;
  if (forIn) {
    for (const k in o) keys[n++] = k;
  } else {
    const own = Object.keys(o);
    for (; n < own.length; n++) keys[n] = own[n]!;
  }
  if (n > 16) {
    keys.length = n;
    keys.sort();
    return n;
  }
  // Params objects are small: insertion sort on a handful of keys beats Array#sort's setup cost.
  for (let i = 1; i < n; i++) {
    const k = keys[i]!;
    let j = i - 1;
    while (j >= 0 && keys[j]! > k) {
      keys[j + 1] = keys[j]!;
      j--;
    }
    keys[j + 1] = k;
  }
  return n;
}

function writeObject(o: Record<string, unknown>, depth: number): void {
  if (Object.getOwnPropertySymbols(o).length !== 0) throw new CanonicalizationError("non_string_key");
  path[depth] = o;
  let keys = keyArrays[depth];
  if (keys === undefined) {
    keys = [];
    keyArrays[depth] = keys;
  }
  const n = sortedKeys(o, keys);
  const start = at;
  if (at >= buf.length) grow(1);
  buf[at++] = 0x7b;
  for (let i = 0; i < n; i++) {
    const k = keys[i]!;
    if (i !== 0) {
      if (at >= buf.length) grow(1);
      buf[at++] = 0x2c;
    }
    if (writeString(k)) {
      // A key with a surrogate pair may sort differently by code point: redo this object that way.
      at = start;
      writeObjectByCodePoint(o, keys.slice(0, n), depth);
      return;
    }
    if (at >= buf.length) grow(1);
    buf[at++] = 0x3a;
    writeValue(o[k], depth + 1);
  }
  if (at >= buf.length) grow(1);
  buf[at++] = 0x7d;
}

function writeObjectByCodePoint(o: Record<string, unknown>, keys: string[], depth: number): void {
  for (const k of keys) if (hasLoneSurrogate(k)) throw new CanonicalizationError("lone_surrogate");
  keys.sort(compareCodePoints);
  if (at >= buf.length) grow(1);
  buf[at++] = 0x7b;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    if (i !== 0) {
      if (at >= buf.length) grow(1);
      buf[at++] = 0x2c;
    }
    writeString(k);
    if (at >= buf.length) grow(1);
    buf[at++] = 0x3a;
    writeValue(o[k], depth + 1);
  }
  if (at >= buf.length) grow(1);
  buf[at++] = 0x7d;
}
