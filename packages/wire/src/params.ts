// tool_params_json on the wire: parse it keeping each number's text, and its SP/1.0 digest.
// It does not decide anything: a refusal here is the daemon's DENY "policy_violation:malformed_input".

import { canonicalHash, canonicalJson, parseJsonKeepingNumberText } from "@leash/core";
import { WireError } from "./errors.js";

/**
 * Parses PreExecRequest.tool_params_json into params for decide(). Numbers whose JavaScript value
 * would hash differently from Python's reading (`10.0`, `1e16`, `-0.0`, big integers) keep their
 * literal, so `canonicalHash(paramsFromJson(text))` equals the reference's digest of `text`.
 * @throws WireError `invalid_params_json` for text that is empty, not JSON, or not a JSON object.
 */
export function paramsFromJson(text: string): Record<string, unknown> {
  if (typeof text !== "string" || text.trim() === "") {
    throw new WireError(
      "invalid_params_json",
      "tool_params_json is empty (send {} for a call without arguments)",
    );
  }
  let value: unknown;
  try {
    value = parseJsonKeepingNumberText(text);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new WireError("invalid_params_json", `tool_params_json is not valid JSON: ${why}`, {
      cause: error,
    });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new WireError("invalid_params_json", "tool_params_json must be a JSON object");
  }
  return value as Record<string, unknown>;
}

/**
 * The text to send as tool_params_json for `params`: their canonical JSON, so the daemon's digest
 * of it is exactly paramsDigestHex(params) on this side.
 * @throws CanonicalizationError (from @leash/core) for params with no canonical form (NaN, cycles, …).
 */
export function paramsToJson(params: Record<string, unknown>): string {
  return canonicalJson(params, { numberText: true });
}

/** canonicalHash(params) as PreExecRequest.tool_params_hash wants it: 32 raw bytes. */
export function paramsDigest(params: unknown): Uint8Array {
  return hexToBytes(canonicalHash(params));
}

/** Lowercase hex of a digest (tool_params_hash, last_tool_params_hash) as @leash/core writes them. */
export function digestToHex(digest: Uint8Array): string {
  let s = "";
  for (const b of digest) s += b.toString(16).padStart(2, "0");
  return s;
}

function hexToBytes(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}
