// The two SHACKLE digests: canonical_hash (call.params) and vector_hash (a whole fixture, sealed).
// Both are SHA-256 over UTF-8 canonical JSON; neither verifies anything, callers compare.

import { sha256Hex } from "../crypto/sha256.js";
import { CanonicalizationError } from "./errors.js";
import { canonicalJson } from "./serialize.js";

const NUMBER_TEXT = { numberText: true } as const;

/**
 * The SP/1.0 argument digest: lowercase hex SHA-256 of canonicalJson(params), as the reference's
 * canonical_hash(). Any JSON value is hashed (the fixtures publish one for array params too).
 * A JsonNumberText (params read with parseJsonKeepingNumberText) hashes as Python reads its
 * literal (`1e16` as `1e+16`, `10.0` as `10.0`); a plain number as numberToCanonical prints it.
 * `hash` replaces the pure SHA-256 (a runtime passes node:crypto's; see DecideInputs.sha256Hex).
 * @throws CanonicalizationError when params have no canonical form.
 */
export function canonicalHash(params: unknown, hash: (text: string) => string = sha256Hex): string {
  return hash(canonicalJson(params, NUMBER_TEXT));
}

/**
 * The SP/1.0.1 vector seal: SHA-256 of the fixture without its `vector_hash` key, with number
 * literals re-printed as Python read them. Exact on parseJsonPreservingNumbers output; on plain
 * JSON.parse output a float literal such as `10.0` has already become 10 and hashes as `10`.
 * @throws CanonicalizationError when the fixture is not an object or has no canonical form.
 */
export function vectorHash(fixture: unknown): string {
  let sealed: Record<string, unknown>;
  try {
    if (typeof fixture !== "object" || fixture === null || Array.isArray(fixture)) {
      throw new CanonicalizationError("not_an_object");
    }
    const proto = Object.getPrototypeOf(fixture);
    if (proto !== Object.prototype && proto !== null) throw new CanonicalizationError("not_an_object");
    // A null-prototype copy so a "__proto__" key stays an ordinary own key.
    sealed = Object.create(null);
    for (const key of Object.keys(fixture)) {
      if (key !== "vector_hash") sealed[key] = (fixture as Record<string, unknown>)[key];
    }
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) throw error;
    throw new CanonicalizationError("unsupported_type", { cause: error });
  }
  return sha256Hex(canonicalJson(sealed, { numberText: true }));
}
