// The JSON form of a chain entry that the file, stdout and webhook sinks write, and its parser.
// One object per entry with every column; `body` stays the original string, so the signed bytes survive.

import type { ChainEntryRecord } from "@leash/core";
import { RelayError } from "./errors.js";

/**
 * Exact decimal digits of an integral number. JSON.stringify prints the shortest digits that read
 * back to the same double, which above 2^53 (every epoch-ns timestamp) need not be the integer the
 * stores hold; a reader in another language would then see a different number.
 */
function integer(value: number): string {
  return Number.isInteger(value) ? BigInt(value).toString() : JSON.stringify(value);
}

/** The entry as one JSON object (no newline). Keys in a fixed order, so equal entries give equal text. */
export function entryJson(entry: ChainEntryRecord): string {
  return (
    `{"seq":${integer(entry.seq)},"entry_id":${JSON.stringify(entry.entry_id)},` +
    `"kind":${JSON.stringify(entry.kind)},"session_id":${JSON.stringify(entry.session_id)},` +
    `"created_ns":${integer(entry.created_ns)},"key_id":${JSON.stringify(entry.key_id)},` +
    `"prev_hash":${JSON.stringify(entry.prev_hash)},"entry_hash":${JSON.stringify(entry.entry_hash)},` +
    `"signature":${JSON.stringify(entry.signature)},"body":${JSON.stringify(entry.body)}}`
  );
}

/** The entry as one NDJSON line, newline included. */
export function entryLine(entry: ChainEntryRecord): string {
  return `${entryJson(entry)}\n`;
}

const STRING_FIELDS = ["entry_id", "kind", "key_id", "prev_hash", "entry_hash", "signature", "body"] as const;

/**
 * The entry an entryJson text (or NDJSON line) holds; `body` comes back as the same string, so its
 * UTF-8 bytes are the signed ones.
 * @throws RelayError "corrupt" when the text is not such an object.
 */
export function parseEntryLine(line: string): ChainEntryRecord {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    throw new RelayError("corrupt", "not a JSON line", { cause: error });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new RelayError("corrupt", "not a JSON object");
  }
  const v = value as Record<string, unknown>;
  for (const field of STRING_FIELDS) {
    if (typeof v[field] !== "string") throw new RelayError("corrupt", `field ${field} is not a string`);
  }
  if (!Number.isInteger(v.seq) || !Number.isInteger(v.created_ns)) {
    throw new RelayError("corrupt", "seq and created_ns must be integers");
  }
  if (v.session_id !== null && typeof v.session_id !== "string") {
    throw new RelayError("corrupt", "session_id must be a string or null");
  }
  return {
    seq: v.seq as number,
    entry_id: v.entry_id as string,
    entry_hash: v.entry_hash as string,
    prev_hash: v.prev_hash as string,
    body: v.body as string,
    signature: v.signature as string,
    key_id: v.key_id as string,
    kind: v.kind as string,
    session_id: v.session_id as string | null,
    created_ns: v.created_ns as number,
  };
}
