// The guard config's `max_params_bytes`: how large a call's params may be (their canonical JSON, UTF-8).
// It names the verdict and measures; the engine and the replay apply it at the same step. No I/O.
import type { Config } from "@leash/core";
import type { EngineDecision, EngineReason } from "./reasons.js";

/** The cap when a config names none: far above any real tool call, far below the 1 MiB frame. */
export const DEFAULT_MAX_PARAMS_BYTES = 256 * 1024;

/**
 * Params whose canonical text has at least this many UTF-16 code units are stored once by digest
 * beside the chain (ChainEntryRecord.params; the entry says `params_blob: true`), not in the entry:
 * a hundred calls with the same large params store them once, and no entry (so no receipt, no
 * answer) carries more than this of params. Smaller params stay inline, where they cost less than a row.
 */
export const PARAMS_INLINE_MAX = 1024;

/**
 * Params over the cap: recorded (with their digest and size, without the params themselves) and
 * counted, no circuit trip, nothing held, no nonce spent — the input is refused, the session goes on.
 */
export const PARAMS_TOO_LARGE: EngineDecision & { reason: EngineReason } = {
  verdict: "DENY",
  reason: "policy_violation:params_too_large",
};

/** The cap that applies to a session of `config`. */
export function maxParamsBytes(config: Config): number {
  const cap = config.max_params_bytes;
  return typeof cap === "number" && Number.isSafeInteger(cap) && cap > 0 ? cap : DEFAULT_MAX_PARAMS_BYTES;
}

/**
 * The size of canonical params text in UTF-8 bytes when it exceeds `cap`, else null. A text of at
 * most cap / 3 UTF-16 units cannot exceed it (3 bytes a unit at most), so small params are not measured.
 */
export function oversizedBytes(paramsText: string | null, cap: number): number | null {
  if (paramsText === null || paramsText.length * 3 <= cap) return null;
  const bytes = Buffer.byteLength(paramsText, "utf8");
  return bytes > cap ? bytes : null;
}
