// Canonical JSON: byte-identical to Python's json.dumps(v, sort_keys=True, separators=(",", ":"),
// ensure_ascii=False, allow_nan=False). It does not hash (hash.ts) and never calls toJSON.

import { CANONICAL_MAX_DEPTH } from "./check.js";
import { canonicalText, type WriteOptions } from "./writer.js";

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

// core's lib is ES2022 without DOM or Node types; TextDecoder is in every runtime core targets.
declare const TextDecoder: new () => { decode(bytes: Uint8Array): string };
const utf8 = new TextDecoder();
/** UTF-8 bytes (as withCanonicalBytes hands them out) back to text. */
export const decodeUtf8 = (bytes: Uint8Array): string => utf8.decode(bytes);

/** canonicalJson's options as the writer takes them. */
export function writeOptions(options?: CanonicalJsonOptions): WriteOptions {
  return { maxDepth: options?.maxDepth ?? CANONICAL_MAX_DEPTH, numberText: options?.numberText === true };
}

/**
 * The canonical JSON text of `value`. Unlike canonicalizationError, any JSON value is accepted at
 * the top (arrays and scalars too) and the `__noncanonical__` marker means nothing here.
 * @throws CanonicalizationError for anything that has no canonical form.
 */
export function canonicalJson(value: unknown, options?: CanonicalJsonOptions): string {
  return canonicalText(value, writeOptions(options));
}
