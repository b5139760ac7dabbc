// One walk for params whose digest will be needed: the structural check, the canonical bytes and their hash.
// Not for params that need no digest: canonicalizationError checks those without writing anything.
import { CANONICAL_MAX_DEPTH, canonicalizationError } from "./check.js";
import { CanonicalizationError, type CanonicalizationErrorCode } from "./errors.js";
import { withCanonicalBytes } from "./writer.js";

const NUMBER_TEXT = { maxDepth: CANONICAL_MAX_DEPTH, numberText: true } as const;
const NONCANONICAL_MARKER = "__noncanonical__";

/**
 * `hash` of the canonical UTF-8 bytes of call params (what canonicalHash hashes; the bytes are only
 * valid during the call), or why they have none — the same
 * answer canonicalizationError gives, in one walk instead of a check and then a serialization. The
 * serializer refuses exactly what the check refuses below the top level (types, lone surrogates,
 * non-finite numbers, unsafe integers, symbol keys, depth, cycles); the top-level shape and the
 * `__noncanonical__` marker are checked here first.
 */
export function canonicalParamsDigest(
  value: unknown,
  hash: (bytes: Uint8Array) => string,
): { digest: string } | { error: CanonicalizationErrorCode } {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { error: canonicalizationError(value)! };
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return { error: canonicalizationError(value)! };
  let digest: string;
  try {
    digest = withCanonicalBytes(value, NUMBER_TEXT, hash);
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) return { error: error.code as CanonicalizationErrorCode };
    return { error: "unsupported_type" };
  }
  const record = value as Record<string, unknown>;
  if (Object.hasOwn(record, NONCANONICAL_MARKER) && record[NONCANONICAL_MARKER] === true) {
    return { error: "noncanonical_marker" };
  }
  return { digest };
}
