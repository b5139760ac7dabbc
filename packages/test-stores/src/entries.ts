// Plausible chain entries for tests: real hashes over bodies a careless re-serialization would change.
// Not signed (the signature is only signature-shaped) and not a chain builder: @leash/chain makes real ones.

import { createHash } from "node:crypto";
import type { ChainEntryRecord, Substrate, SubstrateTx } from "@leash/core";

const ZERO_HASH = "0".repeat(64);

/**
 * A plausible chain entry: a UUIDv7-shaped id, a body with non-ASCII text and escapes (bytes a careless
 * re-serialization would change), its real SHA-256, and a signature-shaped base64url string.
 */
export function makeEntry(
  seq: number,
  prevHash: string,
  sessionId: string | null,
  createdNs: number,
): ChainEntryRecord {
  const entryId = `01900000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`;
  const body =
    `{"data":{"note":"caf\u00e9 \\u2028 \\"q\\" \u{1F600}","seq_text":"${seq}"},"entry_id":"${entryId}",` +
    `"kind":"decision","prev_hash":"${prevHash}","seq":${seq},"session_id":${JSON.stringify(sessionId)},"v":1}`;
  return {
    seq,
    entry_id: entryId,
    entry_hash: createHash("sha256").update(body, "utf8").digest("hex"),
    prev_hash: prevHash,
    body,
    signature: createHash("sha512").update(body).digest("base64url"),
    key_id: "test-key-1",
    kind: "decision",
    session_id: sessionId,
    created_ns: createdNs,
  };
}

/** Queues one appended entry in the same transaction: the outbox's `enqueueEntry`. */
export type Enqueue = (tx: SubstrateTx, entry: ChainEntryRecord) => Promise<void>;

/** Appends entries to a store's chain; see `entryAppender`. */
export type AppendEntries = (
  substrate: Substrate,
  sessions: readonly (string | null)[],
  createdNs?: number,
) => Promise<ChainEntryRecord[]>;

/**
 * An `appendEntries(substrate, sessions, createdNs?)` that appends one entry per element of `sessions` after
 * the current head and queues each with `enqueue`, all in one transaction — what the engine does for a
 * decision. It returns the entries as stored. (`enqueue` is a parameter so that this package needs no outbox.)
 */
export function entryAppender(enqueue: Enqueue): AppendEntries {
  return (substrate, sessions, createdNs = 1_796_012_406_975_000_000) =>
    substrate.transaction(async (tx) => {
      const head = await tx.chain.head();
      let seq = head === null ? 0 : head.seq + 1;
      let prev = head === null ? ZERO_HASH : head.entry_hash;
      const entries: ChainEntryRecord[] = [];
      for (const session of sessions) {
        const entry = makeEntry(seq++, prev, session, createdNs);
        await tx.chain.append(entry);
        await enqueue(tx, entry);
        prev = entry.entry_hash;
        entries.push(entry);
      }
      return entries;
    });
}
