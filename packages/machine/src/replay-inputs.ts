// The inputs a decision entry carries beyond what decide() saw, so a replay can re-derive the verdict
// from the chain alone (@leash/recovery's replayChain). It records; it decides and checks nothing.
import * as crypto from "node:crypto";
import { canonicalJson, type ParamsBlob } from "@leash/core";
import { PARAMS_INLINE_MAX } from "./params-cap.js";

const NUMBER_TEXT = { numberText: true } as const;

/**
 * node:crypto's SHA-256 (hex) for the argument digest; core's pure one is the browser's fallback.
 * The one-shot crypto.hash (Node 20.12+) skips the Hash object a createHash call builds, which costs
 * more than hashing a few hundred bytes.
 */
export const nodeSha256Hex: (data: string | Uint8Array) => string =
  typeof crypto.hash === "function"
    ? (data) => crypto.hash("sha256", data, "hex")
    : (data) => crypto.createHash("sha256").update(data).digest("hex");

/** The same, named for decide's argument digest over bytes (core writes canonical JSON as UTF-8 bytes). */
export const nodeSha256HexOfBytes: (bytes: Uint8Array) => string = nodeSha256Hex;

/**
 * Bumped when a decision entry's replay inputs change; entries without it are not re-derived.
 * 1: inputs beside a copy of the state decide() saw. 2: no state copy (replay folds it from the
 * entries before), and the optional inputs below are absent rather than null. 3: the guard's
 * `max_params_bytes` applies (params-cap.ts); params over it are recorded as `params_bytes` alone,
 * and params of PARAMS_INLINE_MAX or more are stored by digest (`params_blob: true`, no `params_json`).
 */
export const REPLAY_INPUTS_VERSION = 3;

/** The params' canonical JSON, as canonicalHash hashes it (number literals as Python reads them). */
export function canonicalParamsText(params: unknown): string {
  return canonicalJson(params, NUMBER_TEXT);
}

export interface ReplayInputsArgs {
  /** Canonical JSON of the params, or null when they have none (rule 1 then decides). */
  paramsText: string | null;
  /** The params' size when it exceeds the guard's cap: then it is recorded instead of the params. */
  paramsBytes: number | null;
  /** The params are stored by digest (ChainEntryRecord.params), not in the entry. */
  paramsBlob: boolean;
  /** The caller's digest of the params (a daemon's tool_params_hash), when given. */
  expectedHash: string | null | undefined;
  /** The HITL request this call opened, when it was paused. */
  hitlRequestId: string | null;
  /** The TTL of the hold the call placed, when it placed one. */
  holdTtlNs: number | null;
}

/** The params to store by digest beside the entry, or null when the entry carries them (or none). */
export function paramsBlobOf(
  paramsText: string | null,
  paramsHash: string | null,
  tooLarge: number | null,
): ParamsBlob | null {
  if (paramsText === null || paramsHash === null || tooLarge !== null) return null;
  return paramsText.length >= PARAMS_INLINE_MAX ? { hash: paramsHash, text: paramsText } : null;
}

/** The fields added to a decision entry's data (see REPLAY_INPUTS_VERSION). */
export function replayInputs(args: ReplayInputsArgs): Record<string, unknown> {
  // Absent, not null, when unused: every byte of an entry is hashed once and, inside the signature,
  // twice more (Ed25519's SHA-512), on every decision.
  const inputs: Record<string, unknown> =
    args.paramsBytes !== null
      ? { replay_inputs: REPLAY_INPUTS_VERSION, params_bytes: args.paramsBytes }
      : args.paramsBlob
        ? { replay_inputs: REPLAY_INPUTS_VERSION, params_blob: true }
        : { replay_inputs: REPLAY_INPUTS_VERSION, params_json: args.paramsText };
  if (args.expectedHash !== undefined && args.expectedHash !== null)
    inputs.expected_params_hash = args.expectedHash;
  if (args.hitlRequestId !== null) inputs.hitl_request_id = args.hitlRequestId;
  if (args.holdTtlNs !== null) inputs.hold_ttl_ns = args.holdTtlNs;
  return inputs;
}
