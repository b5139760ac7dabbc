// Export formats of a chain: JSON Lines of the stored entries, and the SP/1.0 reference audit ledger.
// The formats stream; writeVerifiedShackleLedger also verifies the chain and the signer, toJsonl does not.

import { createHash } from "node:crypto";
import { type ChainEntryRecord, canonicalJson, type ParamsBlob } from "@leash/core";
import { ChainError } from "./errors.js";
import type { Signer } from "./keys.js";
import { parseEntryBody, ZERO_HASH } from "./verify/format.js";
import { keyId, publicKeyBytes } from "./verify/keys.js";
import type { ChainEntries, ChainFailure, Checkpoint } from "./verify/verify-chain.js";
import { verifyChain } from "./verify-node.js";

/**
 * created_ns as exact decimal digits: the body's timestamp_ns when the column agrees with it (the
 * column is a double, which cannot hold every nanosecond above 2^53), else the column's own exact
 * value, so that a column that disagrees with its body still disagrees once read back.
 */
function createdNsText(e: ChainEntryRecord, body: unknown): string | number {
  const stamp = (body as { timestamp_ns?: unknown } | null)?.timestamp_ns;
  if (typeof stamp === "string" && /^-?\d+$/.test(stamp) && Number(stamp) === e.created_ns) return stamp;
  return Number.isInteger(e.created_ns) ? BigInt(e.created_ns).toString() : e.created_ns;
}

/**
 * One JSON line (with "\n") per entry: every column, and `body` parsed into an object so the line is
 * readable. The signed bytes are still recoverable: canonicalJson(body) reproduces them exactly
 * (fromJsonl does that). A body that is not JSON (a corrupt row) is kept as its original string.
 * `created_ns` is a string of decimal digits: as a JSON number, nanoseconds past 2^53 lose digits.
 */
export async function* toJsonl(
  entries: ChainEntries,
  options: { params?: (hashes: readonly string[]) => Promise<Map<string, string>> } = {},
): AsyncGenerator<string> {
  for await (const e of entries) {
    let body: unknown;
    try {
      body = JSON.parse(e.body);
    } catch {
      body = e.body;
    }
    const params = await storedParamsOf(e, body, options.params);
    const line = {
      seq: e.seq,
      entry_id: e.entry_id,
      kind: e.kind,
      session_id: e.session_id,
      created_ns: createdNsText(e, body),
      key_id: e.key_id,
      prev_hash: e.prev_hash,
      entry_hash: e.entry_hash,
      signature: e.signature,
      body,
      ...(params === null ? {} : { params }),
    };
    yield `${JSON.stringify(line)}\n`;
  }
}

/**
 * The params an entry commits to by digest alone (`params_blob: true`), fetched and checked against
 * the digest, for its line: an export replays on its own. Null for other entries, and for params
 * missing or altered in the store (the line then lacks them, and a replay of the file says so).
 */
async function storedParamsOf(
  entry: ChainEntryRecord,
  body: unknown,
  source: ((hashes: readonly string[]) => Promise<Map<string, string>>) | undefined,
): Promise<ParamsBlob | null> {
  const data = (body as { data?: { params_blob?: unknown; params_hash?: unknown } } | null)?.data;
  if (data?.params_blob !== true || typeof data.params_hash !== "string") return null;
  const hash = data.params_hash;
  const text = entry.params?.hash === hash ? entry.params.text : (await source?.([hash]))?.get(hash);
  if (text === undefined || createHash("sha256").update(text, "utf8").digest("hex") !== hash) return null;
  return { hash, text };
}

/**
 * The entry a toJsonl line came from, with the body re-serialized to the exact signed bytes.
 * `created_ns` may be a decimal string (this format) or a number (files written before it).
 */
export function fromJsonl(line: string): ChainEntryRecord {
  let value: Record<string, unknown>;
  try {
    value = JSON.parse(line) as Record<string, unknown>;
  } catch (error) {
    throw new ChainError("invalid_argument", "a chain JSONL line is not JSON", { cause: error });
  }
  if (typeof value !== "object" || value === null)
    throw new ChainError("invalid_argument", "not a JSONL entry");
  const body = typeof value.body === "string" ? value.body : canonicalJson(value.body);
  return {
    seq: value.seq as number,
    entry_id: value.entry_id as string,
    entry_hash: value.entry_hash as string,
    prev_hash: value.prev_hash as string,
    body,
    signature: value.signature as string,
    key_id: value.key_id as string,
    kind: value.kind as string,
    session_id: (value.session_id ?? null) as string | null,
    ...paramsOfLine(value.params),
    created_ns:
      typeof value.created_ns === "string" && /^-?\d+$/.test(value.created_ns)
        ? Number(value.created_ns)
        : (value.created_ns as number),
  };
}

/** A line's stored params (toJsonl), as ChainEntryRecord.params; anything else is no params. */
function paramsOfLine(value: unknown): { params?: ParamsBlob } {
  const blob = value as { hash?: unknown; text?: unknown } | null | undefined;
  return typeof blob?.hash === "string" && typeof blob.text === "string"
    ? { params: { hash: blob.hash, text: blob.text } }
    : {};
}

/**
 * Python's json.dumps(sort_keys=True, separators=(",", ":")) with its default ensure_ascii=True,
 * which is the reference ledger's `_canonical`: canonicalJson, then every character outside
 * printable ASCII (U+007F and above, one UTF-16 unit at a time) as a lowercase \\uXXXX escape.
 */
export function referenceCanonical(value: unknown): string {
  return canonicalJson(value).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * The chain as the SP/1.0 reference audit ledger (Fame510/SHACKLE v2/spec/ledger.py): one JSON
 * object per line, its own hash chain over the records, each record Ed25519-signed.
 *
 * A record holds the entry's fields — seq, entry_id, chain_id, event_type (= kind), timestamp_ns,
 * session_id, key_id, entry_hash, entry_prev_hash, entry_signature (the chain's base64url JWS
 * signature) and data (body.data) — plus:
 * - prev_hash: the previous record's record_hash, or 64 zeros for the first record;
 * - record_hash: lowercase hex SHA-256 of the UTF-8 bytes of
 *     referenceCanonical(record without record_hash, signature and verify_key) + prev_hash
 *   (the canonical text, then the 64 hex characters of prev_hash appended, no separator);
 * - signature: hex Ed25519 signature by `signer` over the 64 ASCII bytes of record_hash;
 * - verify_key: the signer's raw public key, 64 hex.
 * Without a signer, signature and verify_key are "" (the reference's unsigned form). The chain
 * entry can be rebuilt from a record: body = canonicalJson({ v: 1, chain_id, seq, entry_id, kind:
 * event_type, timestamp_ns, prev_hash: entry_prev_hash, key_id, data }).
 * @throws ChainError "invalid_argument" for an entry whose body is not a v1 body.
 */
export async function* toShackleLedger(entries: ChainEntries, signer?: Signer): AsyncGenerator<string> {
  let prev = ZERO_HASH;
  for await (const e of entries) {
    const { line, recordHash } = ledgerRecord(e, prev, signer);
    prev = recordHash;
    yield line;
  }
}

/** One ledger line for `e` after the record whose hash is `prev` (see toShackleLedger). */
function ledgerRecord(
  e: ChainEntryRecord,
  prev: string,
  signer: Signer | undefined,
): { line: string; recordHash: string } {
  const body = parseEntryBody(e.body);
  if (typeof body === "string") {
    throw new ChainError("invalid_argument", `entry ${e.seq} cannot be exported: ${body}`);
  }
  const core = {
    seq: body.seq,
    entry_id: body.entry_id,
    chain_id: body.chain_id,
    event_type: body.kind,
    timestamp_ns: body.timestamp_ns,
    session_id: e.session_id,
    key_id: body.key_id,
    entry_hash: e.entry_hash,
    entry_prev_hash: body.prev_hash,
    entry_signature: e.signature,
    data: body.data,
    prev_hash: prev,
  };
  const recordHash = createHash("sha256")
    .update(referenceCanonical(core) + prev, "utf8")
    .digest("hex");
  const record = {
    ...core,
    record_hash: recordHash,
    signature:
      signer === undefined ? "" : Buffer.from(signer.sign(Buffer.from(recordHash, "latin1"))).toString("hex"),
    verify_key: signer === undefined ? "" : signer.publicKeyHex,
  };
  return { line: `${JSON.stringify(record)}\n`, recordHash };
}

/**
 * The id of the key that signs whatever follows `head` (a verified entry): the next key a
 * key_rotation introduces, else the key that signed `head` itself.
 * @throws ChainError "invalid_argument" for an entry whose body is not a v1 body.
 */
export function keyInForceAfter(head: ChainEntryRecord): string {
  const body = parseEntryBody(head.body);
  if (typeof body === "string") throw new ChainError("invalid_argument", `entry ${head.seq}: ${body}`);
  const next = body.data.next_key_id;
  return body.kind === "key_rotation" && typeof next === "string" ? next : body.key_id;
}

export interface VerifiedLedgerOptions {
  /** Signs each record; refused unless it is the key in force at the chain's head. */
  signer: Signer;
  /** The keys trusted from the genesis on, as for verifyChain. */
  publicKeys: readonly (string | Uint8Array)[];
  checkpoint?: Checkpoint;
  chainId?: string;
  verifier?: "node" | "noble";
  onProgress?: (verified: number) => void;
}

export type VerifiedLedgerResult =
  | { ok: true; count: number; head_hash: string }
  /** The chain does not verify against the trusted keys: nothing written may be used. */
  | { ok: false; reason: "chain"; failure: ChainFailure }
  /** The chain verifies, but the signer is not the key in force at its head: nothing written may be used. */
  | { ok: false; reason: "signer"; message: string };

/**
 * The SP/1.0 reference ledger of a chain that is verified in the same pass, for evidence: the
 * reference ledger's verifier trusts the verify_key written in each record, so a ledger signed over
 * an unverified chain, or by a key the chain never handed signing to, would launder a forgery.
 * `write` receives each line as it is made, before the verdict is known: the caller MUST keep the
 * lines aside (a temporary file) and publish them only when the result is ok. One pass, so the
 * lines are exactly the entries verified, even if the store changes meanwhile.
 * The ledger proves the records' order, content and the signer's assent; it does not carry the
 * chain's key history (each entry's own signature is kept in entry_signature, the keys are not).
 */
export async function writeVerifiedShackleLedger(
  entries: ChainEntries,
  options: VerifiedLedgerOptions,
  write: (line: string) => void | Promise<void>,
): Promise<VerifiedLedgerResult> {
  const { signer } = options;
  let prev = ZERO_HASH;
  let head: ChainEntryRecord | undefined;
  // After an entry that cannot be a record, nothing more is written; verification says what is wrong.
  let writing = true;
  async function* tapped(): AsyncGenerator<ChainEntryRecord> {
    for await (const e of entries) {
      head = e;
      if (writing) {
        try {
          const { line, recordHash } = ledgerRecord(e, prev, signer);
          prev = recordHash;
          await write(line);
        } catch (error) {
          if (!ChainError.isInstance(error)) throw error;
          writing = false;
        }
      }
      yield e;
    }
  }
  const result = await verifyChain(tapped(), {
    publicKeys: options.publicKeys,
    ...(options.checkpoint === undefined ? {} : { checkpoint: options.checkpoint }),
    ...(options.chainId === undefined ? {} : { chainId: options.chainId }),
    ...(options.verifier === undefined ? {} : { verifier: options.verifier }),
    ...(options.onProgress === undefined ? {} : { onProgress: options.onProgress }),
  });
  if (!result.ok) return { ok: false, reason: "chain", failure: result.failure };
  if (!writing) {
    // Unreachable for a chain that verifies (every verified body is a v1 body); kept fail-closed.
    return {
      ok: false,
      reason: "chain",
      failure: { index: -1, seq: null, kind: "edited", message: "an entry cannot be exported" },
    };
  }
  if (head === undefined) {
    // An empty chain hands signing to nobody yet: only a trusted key may sign its (empty) ledger.
    const trusted = options.publicKeys.map((k) => keyId(publicKeyBytes(k)));
    if (!trusted.includes(signer.keyId)) {
      return {
        ok: false,
        reason: "signer",
        message: `key ${signer.keyId} is not a trusted key of this empty chain`,
      };
    }
    return { ok: true, count: 0, head_hash: result.head_hash };
  }
  const inForce = keyInForceAfter(head);
  if (signer.keyId !== inForce) {
    return {
      ok: false,
      reason: "signer",
      message: `key ${signer.keyId} is not the chain's signing key: key ${inForce} is in force at its head (seq ${head.seq})`,
    };
  }
  return { ok: true, count: result.count, head_hash: result.head_hash };
}
