// Writes the engine's audit records: one signed chain entry per state change, queued in the outbox,
// inside the caller's transaction. It decides nothing; hashing and signing live in @leash/chain.
import { appendEntry, chainIdOf, type Json, type Signer } from "@leash/chain";
import type { ChainEntryRecord, SubstrateTx } from "@leash/core";
import { enqueueEntry } from "@leash/outbox";

/**
 * JSON that canonical JSON accepts: integers beyond 2^53 (epoch nanoseconds) become exact decimal
 * strings, non-finite numbers and undefined become null. Audit data must never fail to serialize.
 */
export function auditJson(value: unknown): Json {
  if (value === null || value === undefined) return null;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return null;
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : value;
  }
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (Array.isArray(value)) return value.map(auditJson);
  if (typeof value === "object") {
    const out: Record<string, Json> = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = auditJson(v);
    return out;
  }
  return String(value);
}

export class Auditor {
  /** The chain's id, cached once read from a committed genesis entry. */
  #chainId: string | null = null;

  constructor(public signer: Signer) {}

  /** Appends one entry after the current head and enqueues it for relay, in `tx`. */
  async record(
    tx: SubstrateTx,
    kind: string,
    data: Record<string, unknown>,
    nowNs: number,
  ): Promise<ChainEntryRecord> {
    const entry = await appendEntry(tx, {
      chainId: this.#chainId,
      kind,
      data: auditJson(data) as Record<string, Json>,
      signer: this.signer,
      nowNs,
    });
    // A genesis made in this transaction may still roll back; a later entry names a committed one.
    if (this.#chainId === null && entry.seq > 0) this.#chainId = chainIdOf((await tx.chain.range(0, 1))[0]!);
    await enqueueEntry(tx, entry); // the transactional outbox: queued with the entry or not at all
    return entry;
  }
}
