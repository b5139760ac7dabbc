// Canonical JSON: byte-identical to Python's json.dumps(v, sort_keys=True, separators=(",", ":"),
// ensure_ascii=False, allow_nan=False). It does not hash (hash.ts) and never calls toJSON.

import { CANONICAL_MAX_DEPTH, pathHasCycle } from "./check.js";
import { CanonicalizationError } from "./errors.js";
import { JsonNumberText, numberTextToCanonical, numberToCanonical } from "./number.js";
import { compareCodePoints, hasLoneSurrogate, NEEDS_CARE, SURROGATE, sortKeysByUnits } from "./strings.js";

export interface CanonicalJsonOptions {
  /**
   * Accept JsonNumberText (from parseJsonPreservingNumbers or parseJsonKeepingNumberText) and print
   * it as Python's json module re-prints that literal: `10.0` stays `10.0`, big integers stay exact.
   * Plain numbers still work. canonicalHash and vectorHash always set it.
   */
  readonly numberText?: boolean;
  /** Deepest nesting accepted, counted as in canonicalizationError. Defaults to 64. */
  readonly maxDepth?: number;
}

interface Walk {
  readonly maxDepth: number;
  readonly numberText: boolean;
  /** path[d] is the container being written at depth d; read only after the limit is crossed. */
  readonly path: unknown[];
}

/**
 * The canonical JSON text of `value`. Unlike canonicalizationError, any JSON value is accepted at
 * the top (arrays and scalars too) and the `__noncanonical__` marker means nothing here.
 * @throws CanonicalizationError for anything that has no canonical form.
 */
export function canonicalJson(value: unknown, options?: CanonicalJsonOptions): string {
  const walk: Walk = {
    maxDepth: options?.maxDepth ?? CANONICAL_MAX_DEPTH,
    numberText: options?.numberText === true,
    path: [],
  };
  if (!(walk.maxDepth >= 0)) throw new CanonicalizationError("too_deep");
  try {
    return writeValue(value, 0, walk);
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) throw error;
    // A stack overflow is nesting deeper than this engine can walk; anything else came from a
    // getter or proxy trap, which makes the value uninspectable.
    if (error instanceof RangeError) throw new CanonicalizationError("too_deep", { cause: error });
    throw new CanonicalizationError("unsupported_type", { cause: error });
  }
}

function writeValue(v: unknown, depth: number, walk: Walk): string {
  if (depth > walk.maxDepth) {
    throw new CanonicalizationError(pathHasCycle(v, depth, walk.path) ? "cycle" : "too_deep");
  }
  switch (typeof v) {
    case "string":
      return NEEDS_CARE.test(v) ? carefulString(v) : `"${v}"`;
    case "number":
      return numberToCanonical(v);
    case "boolean":
      return v ? "true" : "false";
    case "object": {
      if (v === null) return "null";
      if (Array.isArray(v)) return writeArray(v, depth, walk);
      const proto = Object.getPrototypeOf(v);
      if (proto === Object.prototype || proto === null)
        return writeObject(v as Record<string, unknown>, depth, walk);
      if (walk.numberText && v instanceof JsonNumberText) return numberTextToCanonical(v);
      throw new CanonicalizationError(v instanceof Map ? "non_string_key" : "unsupported_type");
    }
    default:
      throw new CanonicalizationError("unsupported_type");
  }
}

/** The slow path for strings that need escapes or hold surrogates. */
function carefulString(s: string): string {
  if (SURROGATE.test(s) && hasLoneSurrogate(s)) throw new CanonicalizationError("lone_surrogate");
  // JSON.stringify escapes exactly Python's set (\" \\ \b \f \n \r \t, other C0 as lowercase \u00xx)
  // and leaves DEL, U+2028/2029 and all other non-ASCII raw, as ensure_ascii=False does.
  return JSON.stringify(s);
}

function writeArray(a: unknown[], depth: number, walk: Walk): string {
  const n = a.length;
  if (n === 0) return "[]";
  walk.path[depth] = a;
  // A hole reads as undefined and is refused below: Python lists have no holes.
  let out = `[${writeValue(a[0], depth + 1, walk)}`;
  for (let i = 1; i < n; i++) out += `,${writeValue(a[i], depth + 1, walk)}`;
  return `${out}]`;
}

function writeObject(o: Record<string, unknown>, depth: number, walk: Walk): string {
  if (Object.getOwnPropertySymbols(o).length !== 0) throw new CanonicalizationError("non_string_key");
  const keys = Object.keys(o);
  const n = keys.length;
  if (n === 0) return "{}";
  walk.path[depth] = o;
  sortKeysByUnits(keys);
  let out = "{";
  for (let i = 0; i < n; i++) {
    const k = keys[i]!;
    let quoted: string;
    if (NEEDS_CARE.test(k)) {
      // A key with a surrogate may sort differently by code point: redo this object carefully.
      if (SURROGATE.test(k)) return writeObjectByCodePoint(o, keys, depth, walk);
      quoted = JSON.stringify(k);
    } else {
      quoted = `"${k}"`;
    }
    out += `${i === 0 ? "" : ","}${quoted}:${writeValue(o[k], depth + 1, walk)}`;
  }
  return `${out}}`;
}

function writeObjectByCodePoint(
  o: Record<string, unknown>,
  keys: string[],
  depth: number,
  walk: Walk,
): string {
  for (const k of keys) if (hasLoneSurrogate(k)) throw new CanonicalizationError("lone_surrogate");
  keys.sort(compareCodePoints);
  let out = "{";
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    out += `${i === 0 ? "" : ","}${JSON.stringify(k)}:${writeValue(o[k], depth + 1, walk)}`;
  }
  return `${out}}`;
}
