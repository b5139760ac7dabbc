// Building and appending signed chain entries: the body, its hash, and one Ed25519 signature that
// is both the chain's and the receipt's. It opens no transaction; the engine passes its own.

import * as nodeCrypto from "node:crypto";
import { CanonicalizationError, type ChainEntryRecord, type ChainStore, canonicalJson } from "@leash/core";
import { ChainError } from "./errors.js";
import type { PublicKeyInfo, Signer } from "./keys.js";
import { type RandomBytes, uuidv7 } from "./uuid.js";
import {
  ENTRY_FORMAT_VERSION,
  type EntryBody,
  type Json,
  type KeyRotationData,
  keyRotationProblem,
  parseEntryBody,
  protectedHeaderB64,
  sessionIdOf,
  ZERO_HASH,
} from "./verify/format.js";

export interface BuildEntryInput {
  /** The chain's newest entry, or null when this entry starts the chain. */
  head: { seq: number; entry_hash: string } | null;
  /** The chain's id (its genesis entry_id); required unless `head` is null, forbidden when it is. */
  chainId?: string | null;
  kind: string;
  /** Kind-specific fields (each kind's are ChainEvent's and EVENT_SCHEMAS'); any canonical-JSON object. */
  data: Record<string, Json>;
  signer: Signer;
  /** Daemon time in nanoseconds since the Unix epoch. */
  nowNs: number | bigint;
  /** Random bytes for the UUIDv7; defaults to getRandomValues. */
  random?: RandomBytes;
}

const HASH = /^[0-9a-f]{64}$/;

/**
 * Lowercase hex SHA-256 of `bytes`: node:crypto's one-shot hash() (Node ≥ 20.12) where there is one,
 * which skips building a Hash stream object per call, else createHash. The same digest either way.
 */
const sha256Hex: (bytes: Uint8Array) => string =
  typeof nodeCrypto.hash === "function"
    ? (bytes) => nodeCrypto.hash("sha256", bytes, "hex")
    : (bytes) => nodeCrypto.createHash("sha256").update(bytes).digest("hex");

/** base64url of `bytes` without copying them first when they are already a Buffer. */
function base64url(bytes: Uint8Array): string {
  const view = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return view.toString("base64url");
}

/**
 * One signed entry following `head`. Pure apart from the signature (and the random bytes of its
 * id): the same input and random bytes give the same record.
 * @throws ChainError "invalid_argument" when the input cannot make a valid v1 entry.
 */
export function buildEntry(input: BuildEntryInput): ChainEntryRecord {
  const { head, kind, data, signer, nowNs } = input;
  const chainId = input.chainId ?? null;
  if (head === null && chainId !== null) {
    throw new ChainError(
      "invalid_argument",
      "a genesis entry (head null) takes no chainId: its chain_id is its own entry_id",
    );
  }
  if (head !== null) {
    if (!Number.isSafeInteger(head.seq) || head.seq < 0 || !HASH.test(head.entry_hash)) {
      throw new ChainError(
        "invalid_argument",
        "head must be { seq: natural number, entry_hash: 64 lowercase hex }",
      );
    }
    if (chainId === null)
      throw new ChainError("invalid_argument", "chainId is required after the genesis entry");
  }
  if (typeof kind !== "string" || kind === "")
    throw new ChainError("invalid_argument", "kind must be a non-empty string");
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new ChainError("invalid_argument", "data must be a JSON object");
  }
  if (kind === "key_rotation") {
    const problem = keyRotationProblem(data);
    if (problem !== null) throw new ChainError("invalid_argument", problem);
  }
  if (typeof nowNs === "bigint" ? nowNs < 0n : !Number.isInteger(nowNs) || nowNs < 0) {
    throw new ChainError("invalid_argument", "nowNs must be a non-negative integer (nanoseconds)");
  }

  const entryId = uuidv7(nowNs, input.random);
  const seq = head === null ? 0 : head.seq + 1;
  const body: EntryBody = {
    v: ENTRY_FORMAT_VERSION,
    chain_id: chainId ?? entryId,
    seq,
    entry_id: entryId,
    kind,
    // BigInt(...) prints every digit; String(1.7e18) would too, but not past 1e21.
    timestamp_ns: BigInt(nowNs).toString(),
    prev_hash: head === null ? ZERO_HASH : head.entry_hash,
    key_id: signer.keyId,
    data,
  };
  let text: string;
  try {
    text = canonicalJson(body);
  } catch (error) {
    if (CanonicalizationError.isInstance(error)) {
      throw new ChainError("invalid_argument", `data has no canonical JSON form: ${error.message}`, {
        cause: error,
      });
    }
    throw error;
  }
  const payload = Buffer.from(text, "utf8");
  const signingInput = Buffer.from(
    `${protectedHeaderB64(signer.keyId)}.${payload.toString("base64url")}`,
    "latin1",
  );
  return {
    seq,
    entry_id: entryId,
    entry_hash: sha256Hex(payload),
    prev_hash: body.prev_hash,
    body: text,
    signature: base64url(signer.sign(signingInput)),
    key_id: signer.keyId,
    kind,
    session_id: sessionIdOf(data),
    created_ns: Number(nowNs),
  };
}

/**
 * The compact JWS (the receipt) of an entry, as `jwsOf` builds it, with Node's native base64url:
 * several times faster on the hot path of a decision. Browsers use `jwsOf`.
 */
export function compactJws(entry: Pick<ChainEntryRecord, "body" | "key_id" | "signature">): string {
  return `${protectedHeaderB64(entry.key_id)}.${Buffer.from(entry.body, "utf8").toString("base64url")}.${entry.signature}`;
}

export type AppendEntryInput = Omit<BuildEntryInput, "head">;

/**
 * head() → buildEntry → append, inside the caller's transaction (head() locks the head there).
 * Without `chainId`, a non-empty chain's id is read from entry 0: an extra read per append, so
 * engines should remember the id (chainIdOf the first entry) and pass it.
 */
export async function appendEntry(
  tx: { chain: ChainStore },
  input: AppendEntryInput,
): Promise<ChainEntryRecord> {
  const head = await tx.chain.head();
  let chainId = input.chainId ?? null;
  if (head === null && chainId !== null) {
    throw new ChainError("invalid_argument", `chainId ${chainId} was given, but the chain store is empty`);
  }
  if (head !== null && chainId === null) {
    const [genesis] = await tx.chain.range(0, 1);
    if (genesis === undefined)
      throw new ChainError("invalid_argument", "the chain store has a head but no entry 0");
    chainId = chainIdOf(genesis);
  }
  const entry = buildEntry({ ...input, head, chainId });
  await tx.chain.append(entry);
  return entry;
}

/** The id of the chain `genesis` (its seq-0 entry) starts. @throws ChainError "invalid_argument". */
export function chainIdOf(genesis: ChainEntryRecord): string {
  const body = parseEntryBody(genesis.body);
  if (typeof body === "string") throw new ChainError("invalid_argument", `not a chain entry: ${body}`);
  if (body.seq !== 0) throw new ChainError("invalid_argument", `entry ${body.seq} is not a genesis entry`);
  return body.chain_id;
}

/** `data` for a "key_rotation" entry handing signing over to `next` (sign it with the current key). */
export function keyRotationData(next: PublicKeyInfo): KeyRotationData {
  return { next_key_id: next.keyId, next_public_key: next.publicKeyHex };
}
