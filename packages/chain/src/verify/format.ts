// The v1 entry format: what a chain entry's signed body holds, how it is checked, and its JWS form.
// It neither builds entries (../entry.ts) nor walks a chain (./verify-chain.ts); browser-safe.

import type { ChainEntryRecord } from "@leash/core";
import { base64UrlEncode, hexToBytes, utf8 } from "./encoding.js";
import { KEY_ID_LENGTH, keyId } from "./keys.js";

/** The prev_hash of the first entry (seq 0): 64 zeros, as in the SP/1.0 reference ledger. */
export const ZERO_HASH = "0".repeat(64);

/** The body format version this package writes and reads. */
export const ENTRY_FORMAT_VERSION = 1;

/** Any JSON value canonicalJson accepts (integers within ±(2^53−1)). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * The signed body of an entry, serialized with canonicalJson (sorted keys, no spaces) before it
 * is hashed and signed. Timestamps are decimal strings: nanoseconds since the epoch pass 2^53.
 */
export interface EntryBody {
  v: 1;
  /** entry_id of the chain's genesis entry (seq 0); equal to its own entry_id there. */
  chain_id: string;
  seq: number;
  /** UUIDv7. */
  entry_id: string;
  kind: string;
  /** Nanoseconds since the Unix epoch, decimal digits. */
  timestamp_ns: string;
  /** entry_hash of seq − 1, or ZERO_HASH at seq 0. */
  prev_hash: string;
  /** Id of the key that signed this entry (see keyId). */
  key_id: string;
  /**
   * Kind-specific fields. The envelope leaves them open (a new field needs no new body version);
   * each kind's fields are versioned by its own JSON Schema (../events/schemas.ts).
   */
  data: Record<string, Json>;
}

/**
 * `data` of a "decision" entry, as the engine writes it (SP/1.0 §7.1 AuditEntry fields 3–13), open:
 * the SP/1.0 fields every version has. Each version's exact fields are DecisionEvent and its JSON
 * Schema (../events/, docs/chain-format.md). Money is exact decimal strings, never binary floats.
 */
export interface DecisionData {
  session_id: string;
  agent_id: string | null;
  organization_id: string | null;
  call_number: number | null;
  tool_name: string;
  /** canonical_hash(params), lowercase hex. */
  params_hash: string | null;
  nonce: string | null;
  verdict: "ALLOW" | "DENY" | "HITL";
  reason: string;
  budget_before_usd: string | null;
  budget_after_usd: string | null;
  // Also, when they apply: `rng` (the random number probabilistic denial consumed; absent, or null in
  // older entries, when it did not run) and `operator_id` (null in older entries; a human's answer has
  // its own hitl_decision entry).
  [field: string]: Json;
}

/** `data` of a "key_rotation" entry: the key that signs every later entry. */
export interface KeyRotationData {
  next_key_id: string;
  /** Raw Ed25519 public key, 64 lowercase hex characters. */
  next_public_key: string;
  [field: string]: Json;
}

const HASH = /^[0-9a-f]{64}$/;
const KEY_ID = new RegExp(`^[0-9a-f]{${KEY_ID_LENGTH}}$`);
const DIGITS = /^(0|[1-9][0-9]*)$/;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Parses a body and checks it against the v1 format. Returns the body, or a sentence saying what
 * is wrong. It does not check the hash, the signature or the position in a chain.
 */
export function parseEntryBody(body: string): EntryBody | string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return "body is not JSON";
  }
  if (!isPlainObject(value)) return "body is not a JSON object";
  if (value.v !== ENTRY_FORMAT_VERSION) return `body format version ${String(value.v)} is not 1`;
  const { chain_id, seq, entry_id, kind, timestamp_ns, prev_hash, key_id, data } = value;
  if (typeof chain_id !== "string" || chain_id === "") return "body.chain_id is not a non-empty string";
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 0)
    return "body.seq is not a natural number";
  if (typeof entry_id !== "string" || entry_id === "") return "body.entry_id is not a non-empty string";
  if (typeof kind !== "string" || kind === "") return "body.kind is not a non-empty string";
  if (typeof timestamp_ns !== "string" || !DIGITS.test(timestamp_ns))
    return "body.timestamp_ns is not decimal";
  if (typeof prev_hash !== "string" || !HASH.test(prev_hash))
    return "body.prev_hash is not a SHA-256 hex digest";
  if (typeof key_id !== "string" || !KEY_ID.test(key_id)) return "body.key_id is not a key id";
  if (!isPlainObject(data)) return "body.data is not an object";
  if (seq === 0 && (prev_hash !== ZERO_HASH || chain_id !== entry_id)) {
    return "entry 0 must have prev_hash 0…0 and chain_id equal to its own entry_id";
  }
  if (seq > 0 && prev_hash === ZERO_HASH) return "only entry 0 may have prev_hash 0…0";
  if (kind === "key_rotation") {
    const problem = keyRotationProblem(data);
    if (problem !== null) return problem;
  }
  return value as unknown as EntryBody;
}

/** Why `data` is not a valid key_rotation payload, or null when it is. */
export function keyRotationProblem(data: Record<string, unknown>): string | null {
  const { next_key_id, next_public_key } = data;
  if (
    typeof next_public_key !== "string" ||
    next_public_key.length !== 64 ||
    !/^[0-9a-f]+$/.test(next_public_key)
  ) {
    return "key_rotation data.next_public_key is not 64 lowercase hex characters";
  }
  if (typeof next_key_id !== "string" || next_key_id !== keyId(hexToBytes(next_public_key)!)) {
    return "key_rotation data.next_key_id is not the key id of data.next_public_key";
  }
  return null;
}

/** The session_id column a body implies: data.session_id when it is a string, else null. */
export function sessionIdOf(data: Record<string, unknown>): string | null {
  return typeof data.session_id === "string" ? data.session_id : null;
}

/**
 * Which stored column disagrees with the body, or null. Columns are copies kept for indexing;
 * a copy that differs means someone edited the row, so it is treated exactly like an edited body.
 * `checkSeq: false` leaves the seq column out: a chain walk judges it by position instead.
 */
export function columnProblem(
  record: ChainEntryRecord,
  body: EntryBody,
  options?: { checkSeq?: boolean },
): string | null {
  if (options?.checkSeq !== false && record.seq !== body.seq) return "column seq differs from the body";
  if (record.entry_id !== body.entry_id) return "column entry_id differs from the body";
  if (record.prev_hash !== body.prev_hash) return "column prev_hash differs from the body";
  if (record.key_id !== body.key_id) return "column key_id differs from the body";
  if (record.kind !== body.kind) return "column kind differs from the body";
  if (record.session_id !== sessionIdOf(body.data))
    return "column session_id differs from body.data.session_id";
  // created_ns is a double (it passes 2^53), so it is compared as the double the decimal rounds to.
  if (record.created_ns !== Number(body.timestamp_ns))
    return "column created_ns differs from body.timestamp_ns";
  return null;
}

const headerCache = new Map<string, string>();

/**
 * BASE64URL of the JWS protected header `{"alg":"EdDSA","kid":"<key_id>"}`, byte for byte in that
 * key order: the header is part of what is signed, so it must be reproducible exactly.
 */
export function protectedHeaderB64(kid: string): string {
  let b64 = headerCache.get(kid);
  if (b64 === undefined) {
    b64 = base64UrlEncode(utf8(`{"alg":"EdDSA","kid":${JSON.stringify(kid)}}`));
    if (headerCache.size < 64) headerCache.set(kid, b64);
  }
  return b64;
}

/** The JWS signing input of an entry: BASE64URL(protected) "." BASE64URL(UTF-8 body). */
export function signingInputOf(entry: Pick<ChainEntryRecord, "body" | "key_id">): string {
  return `${protectedHeaderB64(entry.key_id)}.${base64UrlEncode(utf8(entry.body))}`;
}

/**
 * The compact JWS (RFC 7515) of an entry: `protected.payload.signature`. The payload is the body,
 * so this string is the decision's receipt; any JWS library verifies it with the public key.
 */
export function jwsOf(entry: Pick<ChainEntryRecord, "body" | "key_id" | "signature">): string {
  return `${signingInputOf(entry)}.${entry.signature}`;
}
