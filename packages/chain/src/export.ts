// Export formats of a chain: JSON Lines of the stored entries, and the SP/1.0 reference audit ledger.
// Both stream (async generators of lines); neither verifies — run verifyChain on the source first.

import { createHash } from "node:crypto";
import { type ChainEntryRecord, canonicalJson } from "@leash/core";
import { ChainError } from "./errors.js";
import type { Signer } from "./keys.js";
import { parseEntryBody, ZERO_HASH } from "./verify/format.js";
import type { ChainEntries } from "./verify/verify-chain.js";

/**
 * One JSON line (with "\n") per entry: every column, and `body` parsed into an object so the line is
 * readable. The signed bytes are still recoverable: canonicalJson(body) reproduces them exactly
 * (fromJsonl does that). A body that is not JSON (a corrupt row) is kept as its original string.
 */
export async function* toJsonl(entries: ChainEntries): AsyncGenerator<string> {
  for await (const e of entries) {
    let body: unknown;
    try {
      body = JSON.parse(e.body);
    } catch {
      body = e.body;
    }
    const line = {
      seq: e.seq,
      entry_id: e.entry_id,
      kind: e.kind,
      session_id: e.session_id,
      created_ns: e.created_ns,
      key_id: e.key_id,
      prev_hash: e.prev_hash,
      entry_hash: e.entry_hash,
      signature: e.signature,
      body,
    };
    yield `${JSON.stringify(line)}\n`;
  }
}

/** The entry a toJsonl line came from, with the body re-serialized to the exact signed bytes. */
export function fromJsonl(line: string): ChainEntryRecord {
  let value: Record<string, unknown>;
  try {
    value = JSON.parse(line) as Record<string, unknown>;
  } catch (error) {
    throw new ChainError("invalid_input", "a chain JSONL line is not JSON", { cause: error });
  }
  if (typeof value !== "object" || value === null) throw new ChainError("invalid_input", "not a JSONL entry");
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
    created_ns: value.created_ns as number,
  };
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
 * @throws ChainError "invalid_input" for an entry whose body is not a v1 body.
 */
export async function* toShackleLedger(entries: ChainEntries, signer?: Signer): AsyncGenerator<string> {
  let prev = ZERO_HASH;
  for await (const e of entries) {
    const body = parseEntryBody(e.body);
    if (typeof body === "string") {
      throw new ChainError("invalid_input", `entry ${e.seq} cannot be exported: ${body}`);
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
        signer === undefined
          ? ""
          : Buffer.from(signer.sign(Buffer.from(recordHash, "latin1"))).toString("hex"),
      verify_key: signer === undefined ? "" : signer.publicKeyHex,
    };
    prev = recordHash;
    yield `${JSON.stringify(record)}\n`;
  }
}
