// What a pre_exec carries for the call's params: tool_params_json and tool_params_hash, the SP/1.0
// canonical_hash that the daemon computes too. It sends text; it decides nothing about the params.

import { createHash } from "node:crypto";
import { canonicalJson } from "@leash/core";
import { paramsFromJson } from "@leash/wire";

/** What tool_params_json says when the params have no JSON form (the daemon answers malformed_input). */
export const UNSERIALIZABLE_PARAMS = "<params without a JSON form>";

/** The params' wire form and digest; `hash` (hex) and `digest` (its bytes) are null without one. */
export interface ParamsOnWire {
  json: string;
  hash: string | null;
  digest: Uint8Array | null;
}

/**
 * tool_params_json (the agent's text when it gave text, else the canonical JSON) and the digest the
 * daemon will compute: the canonical JSON is written once, and hashed with node:crypto's SHA-256
 * (canonical JSON has no lone surrogate, so its UTF-8 is the one @leash/core's canonicalHash hashes).
 */
export function paramsOnWire(params: unknown): ParamsOnWire {
  if (typeof params === "string") {
    try {
      return { json: params, ...digestOf(canonicalJson(paramsFromJson(params), NUMBER_TEXT)) };
    } catch {
      return { json: params, hash: null, digest: null }; // the daemon sees the text and answers malformed_input
    }
  }
  let json: string;
  try {
    json = canonicalJson(params ?? {}, NUMBER_TEXT);
  } catch {
    return { json: UNSERIALIZABLE_PARAMS, hash: null, digest: null };
  }
  return { json, ...digestOf(json) };
}

const NUMBER_TEXT = { numberText: true } as const;

function digestOf(canonical: string): { hash: string; digest: Uint8Array } {
  const digest = createHash("sha256").update(canonical, "utf8").digest();
  return {
    hash: digest.toString("hex"),
    digest: new Uint8Array(digest.buffer, digest.byteOffset, digest.length),
  };
}
