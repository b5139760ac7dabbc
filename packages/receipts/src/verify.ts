// Offline verification of a receipt with only the public key: signature, algorithm, key id, chain.
// Runs in Node and in browsers (jose over WebCrypto, no node: imports); it does not check the chain.

import { base64url, compactVerify, decodeProtectedHeader, importJWK, type JWK } from "jose";

/**
 * Why a receipt was refused:
 * - `malformed`: not three non-empty base64url parts in canonical spelling, or an unreadable header;
 * - `alg_not_allowed`: the header's alg is not "EdDSA" (receipts are Ed25519 only; "none", HMAC…);
 * - `invalid_key`: the public key is not an Ed25519 key (64 hex, 32 bytes, or an OKP/Ed25519 JWK);
 * - `kid_mismatch`: the header's kid is not the key id of the given public key;
 * - `bad_signature`: the signature does not verify with that key (any changed byte of the receipt);
 * - `invalid_payload`: signed, but the payload is not a v1 chain entry body signed under that kid;
 * - `chain_mismatch`: a valid receipt, but of another chain than options.chainId.
 */
export type ReceiptFailureReason =
  | "malformed"
  | "alg_not_allowed"
  | "invalid_key"
  | "kid_mismatch"
  | "bad_signature"
  | "invalid_payload"
  | "chain_mismatch";

/** The signed chain-entry body a receipt carries (see @leash/chain's EntryBody). */
export interface ReceiptPayload {
  v: 1;
  chain_id: string;
  seq: number;
  entry_id: string;
  kind: string;
  timestamp_ns: string;
  prev_hash: string;
  key_id: string;
  data: Record<string, unknown>;
}

export type VerifyReceiptResult =
  | {
      ok: true;
      payload: ReceiptPayload;
      /** SHA-256 of the payload bytes: the entry's entry_hash, to find it in the chain. */
      entry_hash: string;
      seq: number;
      chain_id: string;
      key_id: string;
    }
  | { ok: false; reason: ReceiptFailureReason; message: string };

export interface VerifyReceiptOptions {
  /** Refuse receipts of any other chain (the chain's id is its genesis entry_id). */
  chainId?: string;
}

/** An Ed25519 public key as 64 hex characters, 32 raw bytes, or a JWK { kty: "OKP", crv: "Ed25519", x }. */
export type ReceiptPublicKey = string | Uint8Array | JWK;

const fail = (reason: ReceiptFailureReason, message: string): VerifyReceiptResult => ({
  ok: false,
  reason,
  message,
});

/** Strict base64url: the decoder must not accept two spellings of the same bytes. */
function canonicalPart(part: string): boolean {
  try {
    return part.length > 0 && base64url.encode(base64url.decode(part)) === part;
  } catch {
    return false;
  }
}

function rawKey(key: ReceiptPublicKey): Uint8Array | null {
  if (key instanceof Uint8Array) return key.length === 32 ? key : null;
  if (typeof key === "string") {
    if (!/^[0-9a-fA-F]{64}$/.test(key)) return null;
    const out = new Uint8Array(32);
    for (let i = 0; i < 32; i++) out[i] = Number.parseInt(key.slice(i * 2, i * 2 + 2), 16);
    return out;
  }
  if (
    typeof key === "object" &&
    key !== null &&
    key.kty === "OKP" &&
    key.crv === "Ed25519" &&
    typeof key.x === "string"
  ) {
    if (typeof key.d === "string") return null; // a private JWK: refuse rather than hold a secret
    try {
      const x = base64url.decode(key.x);
      return x.length === 32 ? x : null;
    } catch {
      return null;
    }
  }
  return null;
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(
    await globalThis.crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>),
  );
  let hex = "";
  for (const b of digest) hex += b.toString(16).padStart(2, "0");
  return hex;
}

/** @leash/chain's keyId: the first 16 hex characters of SHA-256 over the raw public key. */
export async function receiptKeyId(publicKey: ReceiptPublicKey): Promise<string | null> {
  const raw = rawKey(publicKey);
  return raw === null ? null : (await sha256Hex(raw)).slice(0, 16);
}

function payloadProblem(payload: unknown, kid: string): string | null {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload))
    return "payload is not an object";
  const p = payload as Record<string, unknown>;
  if (p.v !== 1) return "payload is not a v1 entry body";
  if (typeof p.chain_id !== "string" || p.chain_id === "") return "payload has no chain_id";
  if (typeof p.seq !== "number" || !Number.isSafeInteger(p.seq) || p.seq < 0)
    return "payload has no valid seq";
  if (typeof p.entry_id !== "string" || typeof p.kind !== "string") return "payload has no entry_id or kind";
  if (typeof p.data !== "object" || p.data === null || Array.isArray(p.data))
    return "payload has no data object";
  if (p.key_id !== kid) return "payload key_id differs from the header kid";
  return null;
}

/**
 * Imported keys and key ids by raw public key: an agent checks every verdict against the same one
 * or two keys, and importing a JWK costs more than the signature check itself. Bounded, so a
 * caller cycling through keys cannot grow it without end.
 */
const imported = new Map<string, Promise<{ key: Awaited<ReturnType<typeof importJWK>>; keyId: string }>>();
const IMPORTED_MAX = 64;

function importedKey(raw: Uint8Array) {
  const hex = Array.from(raw, (b) => b.toString(16).padStart(2, "0")).join("");
  let entry = imported.get(hex);
  if (entry === undefined) {
    entry = (async () => ({
      key: await importJWK({ kty: "OKP", crv: "Ed25519", x: base64url.encode(raw) }, "EdDSA"),
      keyId: (await sha256Hex(raw)).slice(0, 16),
    }))();
    if (imported.size >= IMPORTED_MAX) imported.delete(imported.keys().next().value as string);
    imported.set(hex, entry);
    entry.catch(() => imported.delete(hex)); // a key that failed to import is not remembered
  }
  return entry;
}

/**
 * Verifies a receipt against a public key: canonical compact JWS, alg EdDSA, kid = the key's id,
 * a valid Ed25519 signature, a v1 entry body, and (if asked) the expected chain. Never throws.
 */
export async function verifyReceipt(
  receipt: string,
  publicKey: ReceiptPublicKey,
  options: VerifyReceiptOptions = {},
): Promise<VerifyReceiptResult> {
  if (typeof receipt !== "string") return fail("malformed", "a receipt is a compact JWS string");
  const parts = receipt.split(".");
  if (parts.length !== 3 || !parts.every(canonicalPart)) {
    return fail("malformed", "a receipt is three non-empty, canonically base64url-encoded parts");
  }
  let header: { alg?: unknown; kid?: unknown };
  try {
    header = decodeProtectedHeader(receipt);
  } catch (error) {
    return fail("malformed", `the protected header is not readable JSON (${(error as Error).message})`);
  }
  if (header.alg !== "EdDSA")
    return fail("alg_not_allowed", `alg ${String(header.alg)} is not allowed; receipts use EdDSA`);
  const raw = rawKey(publicKey);
  if (raw === null)
    return fail("invalid_key", "the public key is not an Ed25519 key (64 hex, 32 bytes or an OKP JWK)");
  let key: Awaited<ReturnType<typeof importJWK>>;
  let keyId: string;
  try {
    ({ key, keyId } = await importedKey(raw));
  } catch (error) {
    return fail("invalid_key", `the public key cannot be used (${(error as Error).message})`);
  }
  if (header.kid !== keyId) {
    return fail("kid_mismatch", `the receipt names key ${String(header.kid)}; the given key is ${keyId}`);
  }
  let payloadBytes: Uint8Array;
  try {
    ({ payload: payloadBytes } = await compactVerify(receipt, key, { algorithms: ["EdDSA"] }));
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "ERR_JWS_SIGNATURE_VERIFICATION_FAILED")
      return fail("bad_signature", "the signature does not verify");
    if (code === "ERR_JWK_INVALID" || code === "ERR_JOSE_NOT_SUPPORTED") {
      return fail("invalid_key", `the public key cannot be used (${(error as Error).message})`);
    }
    return fail("malformed", `not a valid JWS (${(error as Error).message})`);
  }
  let payload: unknown;
  try {
    payload = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payloadBytes));
  } catch {
    return fail("invalid_payload", "the payload is not UTF-8 JSON");
  }
  const problem = payloadProblem(payload, keyId);
  if (problem !== null) return fail("invalid_payload", problem);
  const body = payload as ReceiptPayload;
  if (options.chainId !== undefined && body.chain_id !== options.chainId) {
    return fail("chain_mismatch", `the receipt is from chain ${body.chain_id}, not ${options.chainId}`);
  }
  return {
    ok: true,
    payload: body,
    entry_hash: await sha256Hex(payloadBytes),
    seq: body.seq,
    chain_id: body.chain_id,
    key_id: keyId,
  };
}
