// One walk for params whose digest will be needed: the structural check and the canonical text together.
// Not for params that need no digest: canonicalizationError checks those without building any string.
import { canonicalizationError } from "./check.js";
import { CanonicalizationError, type CanonicalizationErrorCode } from "./errors.js";
import { canonicalJson } from "./serialize.js";

const NUMBER_TEXT = { numberText: true } as const;
const NONCANONICAL_MARKER = "__noncanonical__";

/**
 * The canonical text of call params (as canonicalHash hashes it), or why they have none — the same
 * answer canonicalizationError gives, in one walk instead of a check and then a serialization. The
 * serializer refuses exactly what the check refuses below the top level (types, lone surrogates,
 * non-finite numbers, unsafe integers, symbol keys, depth, cycles); the top-level shape and the
 * `__noncanonical__` marker are checked here first.
 */
export function canonicalParamsText(value: unknown): { text: string } | { error: CanonicalizationErrorCode } {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { error: canonicalizationError(value)! };
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return { error: canonicalizationError(value)! };
  let text: string;
  try {
    text = canonicalJson(value, NUMBER_TEXT);
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) return { error: error.code as CanonicalizationErrorCode };
    return { error: "unsupported_type" };
  }
  const record = value as Record<string, unknown>;
  if (Object.hasOwn(record, NONCANONICAL_MARKER) && record[NONCANONICAL_MARKER] === true) {
    return { error: "noncanonical_marker" };
  }
  return { text };
}
