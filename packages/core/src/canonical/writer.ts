// Canonical JSON built as one JavaScript string: canonicalJson returns it, and the bytes the argument digest
// hashes are that string encoded once as UTF-8. It does not hash and never calls toJSON.

import { pathHasCycle } from "./check.js";
import { CanonicalizationError } from "./errors.js";
import { JsonNumberText, numberTextToCanonical, numberToCanonical } from "./number.js";
import { compareCodePoints, hasLoneSurrogate, NEEDS_CARE } from "./strings.js";

/** What canonicalJson's options become for one walk. */
export interface WriteOptions {
  readonly maxDepth: number;
  readonly numberText: boolean;
}

// core's lib is ES2022 without DOM or Node types; TextEncoder is in every runtime core targets.
declare const TextEncoder: new () => {
  encodeInto(text: string, into: Uint8Array): { read: number; written: number };
};
const utf8 = new TextEncoder();

const INITIAL_BYTES = 1024;
/** A byte buffer grown past this by one huge value is dropped afterwards rather than kept for good. */
const KEPT_BYTES = 1 << 20;

// Strings are appended whole: a string with nothing to escape (the common case, found by one native
// regex scan) costs one concatenation, however long, where a loop over its characters costs per unit.
// V8 joins the pieces as a rope and flattens it once, when the text is first read.
//
// The walk's state lives in module variables, not an object, so the hot functions take no receiver.
// A getter that serializes during a walk (re-entry) saves and restores them.
let out = "";
let maxDepth = 0;
let numberText = false;
/** False when Object.prototype has an enumerable property: then for…in would list it, so keys come from Object.keys. */
let forIn = true;
/** path[d] is the container being written at depth d; read only after the depth limit is crossed. */
let path: unknown[] = [];
/** One reusable key array per depth, so sorting keys allocates nothing. */
let keyArrays: string[][] = [];
let busy = false;

/** The reusable UTF-8 buffer withCanonicalBytes hands out; `bytesBusy` while a `use` holds a view of it. */
let bytes = new Uint8Array(INITIAL_BYTES);
let bytesBusy = false;

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

const DIGITS = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

function objectPrototypeIsClean(): boolean {
  for (const _ in Object.prototype) return false;
  return true;
}

/**
 * The canonical JSON text of `value` (what canonicalJson returns).
 * @throws CanonicalizationError for anything that has no canonical form.
 */
export function canonicalText(value: unknown, options: WriteOptions): string {
  if (!(options.maxDepth >= 0)) throw new CanonicalizationError("too_deep");
  const outer = busy ? { out, maxDepth, numberText, forIn, path, keyArrays } : null;
  if (outer !== null) {
    path = [];
    keyArrays = [];
  }
  busy = true;
  out = "";
  maxDepth = options.maxDepth;
  numberText = options.numberText;
  try {
    forIn = objectPrototypeIsClean();
    writeValue(value, 0);
    return out;
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) throw error;
    // A stack overflow is nesting deeper than this engine can walk; anything else came from a
    // getter or proxy trap, which makes the value uninspectable.
    if (error instanceof RangeError) throw new CanonicalizationError("too_deep", { cause: error });
    throw new CanonicalizationError("unsupported_type", { cause: error });
  } finally {
    if (outer === null) {
      busy = false;
      out = "";
      // Drop the references to the caller's containers without shrinking the array (no reallocation).
      for (let i = 0; i < path.length; i++) path[i] = undefined;
    } else {
      ({ out, maxDepth, numberText, forIn, path, keyArrays } = outer);
    }
  }
}

/**
 * Runs `use` on the canonical UTF-8 bytes of `value`. The view is valid only inside `use` (the buffer
 * is reused by the next call). Same contract as canonicalJson.
 * @throws CanonicalizationError for anything that has no canonical form.
 */
export function withCanonicalBytes<T>(
  value: unknown,
  options: WriteOptions,
  use: (bytes: Uint8Array) => T,
): T {
  const text = canonicalText(value, options);
  // Three bytes per UTF-16 unit is the most UTF-8 needs (a surrogate pair: two units, four bytes).
  const room = text.length * 3;
  // A `use` that serializes again gets a buffer of its own, leaving its caller's view intact.
  const nested = bytesBusy;
  let into = bytes;
  if (nested || into.length < room) {
    into = new Uint8Array(Math.max(room, INITIAL_BYTES));
    if (!nested && room <= KEPT_BYTES) bytes = into;
  }
  const view = into.subarray(0, utf8.encodeInto(text, into).written);
  if (nested) return use(view);
  bytesBusy = true;
  try {
    return use(view);
  } finally {
    bytesBusy = false;
  }
}

/**
 * Appends `s` quoted and escaped. Returns true when it held a surrogate pair (a key with one may sort
 * differently by code point than by UTF-16 unit).
 */
function writeString(s: string): boolean {
  if (!NEEDS_CARE.test(s)) {
    out += `"${s}"`;
    return false;
  }
  return writeEscaped(s);
}

/** The slow path of writeString: escapes, and the pairing check on surrogates. */
function writeEscaped(s: string): boolean {
  const n = s.length;
  let text = '"';
  let from = 0;
  let pair = false;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c) {
      text += s.slice(from, i) + ESCAPES[c]!;
      from = i + 1;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      const d = c <= 0xdbff && i + 1 < n ? s.charCodeAt(i + 1) : 0;
      if (d < 0xdc00 || d > 0xdfff) throw new CanonicalizationError("lone_surrogate");
      i++;
      pair = true;
    }
  }
  out += `${text}${s.slice(from)}"`;
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
      // Most numbers in params are small non-negative integers: no number printing.
      if (v >= 0 && v < 10 && Number.isInteger(v)) out += DIGITS[v]!;
      else out += numberToCanonical(v);
      return;
    case "boolean":
      out += v ? "true" : "false";
      return;
    case "object": {
      if (v === null) {
        out += "null";
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
        out += numberTextToCanonical(v);
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
  out += "[";
  // A hole reads as undefined and is refused: Python lists have no holes.
  for (let i = 0; i < n; i++) {
    if (i !== 0) out += ",";
    writeValue(a[i], depth + 1);
  }
  out += "]";
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
  const start = out.length;
  if (n === 0) {
    out += "{}";
    return;
  }
  for (let i = 0; i < n; i++) {
    const k = keys[i]!;
    // A plain key goes in one piece with its separator and colon: fewer pieces for the rope to join.
    if (!NEEDS_CARE.test(k)) {
      out += `${i === 0 ? '{"' : ',"'}${k}":`;
    } else {
      out += i === 0 ? "{" : ",";
      if (writeEscaped(k)) {
        // A key with a surrogate pair may sort differently by code point: redo this object that way.
        out = out.slice(0, start);
        writeObjectByCodePoint(o, keys.slice(0, n), depth);
        return;
      }
      out += ":";
    }
    writeValue(o[k], depth + 1);
  }
  out += "}";
}

function writeObjectByCodePoint(o: Record<string, unknown>, keys: string[], depth: number): void {
  for (const k of keys) if (hasLoneSurrogate(k)) throw new CanonicalizationError("lone_surrogate");
  keys.sort(compareCodePoints);
  out += "{";
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    if (i !== 0) out += ",";
    writeString(k);
    out += ":";
    writeValue(o[k], depth + 1);
  }
  out += "}";
}
