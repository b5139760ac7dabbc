// The one error canonical JSON throws, and the closed set of reasons a value cannot be canonicalized.
// It does not decide verdicts: decide() maps any of these codes to DENY policy_violation:malformed_input.
import { LeashBaseError } from "../errors/leash-error.js";

/**
 * Why a value has no canonical form (SP/1.0 §3.2 Rule 1, structurally).
 *
 * - `not_an_object`: the top-level params are not a plain object (an array is not an object here).
 * - `non_string_key`: an object has symbol keys, or a `Map` appears anywhere.
 * - `non_finite_number`: NaN or ±Infinity (Python's `allow_nan=False` refuses them).
 * - `unsafe_integer`: an integral number outside ±(2^53−1); it cannot hash identically to Python.
 * - `unsupported_type`: undefined, function, symbol, bigint, Date, Set, class instances, typed
 *   arrays, boxed primitives, sparse-array holes, or a value whose inspection threw.
 * - `lone_surrogate`: a string or key with an unpaired UTF-16 surrogate (not encodable as UTF-8).
 * - `cycle`: a value contains itself.
 * - `too_deep`: nesting deeper than the limit (64 by default, as in the reference).
 * - `noncanonical_marker`: the fixtures' reserved `{"__noncanonical__": true}` declaration.
 */
export type CanonicalizationErrorCode =
  | "not_an_object"
  | "non_string_key"
  | "non_finite_number"
  | "unsafe_integer"
  | "unsupported_type"
  | "lone_surrogate"
  | "cycle"
  | "too_deep"
  | "noncanonical_marker";

const MESSAGES: Readonly<Record<CanonicalizationErrorCode, string>> = {
  not_an_object: "params must be a plain JSON object",
  non_string_key: "object keys must be strings (symbol key or Map found)",
  non_finite_number: "NaN and Infinity have no JSON form",
  unsafe_integer: "integer outside ±(2^53-1) cannot be hashed identically across languages",
  unsupported_type: "value of a type JSON cannot represent",
  lone_surrogate: "string contains an unpaired UTF-16 surrogate and cannot be encoded as UTF-8",
  cycle: "value contains a reference to itself",
  too_deep: "value nests deeper than the canonicalization limit",
  noncanonical_marker: "params carry the reserved __noncanonical__ marker",
};

/** Thrown by canonicalJson/canonicalHash/vectorHash for a value that has no canonical form. */
export class CanonicalizationError extends LeashBaseError<CanonicalizationErrorCode> {
  static override readonly marker = Symbol.for("leash.core.CanonicalizationError");
  override readonly name = "CanonicalizationError";
  constructor(code: CanonicalizationErrorCode, options?: { message?: string; cause?: unknown }) {
    super(code, options?.message ?? MESSAGES[code], options);
  }
}
