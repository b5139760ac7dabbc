// Chain entries appended with appendSigning whose rows wait for their signatures: written, in seq
// order, just before the batch's COMMIT. It checks nothing itself; stores.ts and substrate.ts do.

import { SubstrateError } from "@leash/core";
import { type ChainRow, text } from "./codec.js";

interface Pending {
  /** The row as it will be written, with an empty signature until `signature` resolves. */
  readonly row: ChainRow;
  readonly signature: Promise<string>;
  /** The transaction that appended it: if that one fails, its entries go with it. */
  readonly owner: object;
}

/** One per connection; empty between batches. */
export class PendingChain {
  #entries: Pending[] = [];

  get size(): number {
    return this.#entries.length;
  }

  /** The newest pending entry, which is the chain's head while there is one. */
  get last(): { seq: number; entry_hash: string } | undefined {
    const last = this.#entries.at(-1);
    return last === undefined ? undefined : { seq: last.row.seq, entry_hash: last.row.entry_hash };
  }

  add(row: ChainRow, signature: Promise<string>, owner: object): void {
    // Handled where it is awaited (flush, or a read); this only keeps an early rejection handled.
    signature.catch(() => undefined);
    this.#entries.push({ row, signature, owner });
  }

  hasEntryId(entryId: string): boolean {
    return this.#entries.some((p) => p.row.entry_id === entryId);
  }

  /** Forgets the entries of a transaction that failed (they are the newest: transactions run in turn). */
  dropOwnedBy(owner: object): void {
    this.#entries = this.#entries.filter((p) => p.owner !== owner);
  }

  clear(): void {
    this.#entries = [];
  }

  /** The pending rows with their signatures, oldest first; rejects as the first failed signature does. */
  async signedRows(): Promise<ChainRow[]> {
    const entries = this.#entries;
    const signatures = await Promise.all(
      entries.map((p) =>
        p.signature.then(
          (signature) => text("signature", signature),
          (error: unknown) => {
            const detail = error instanceof Error ? error.message : String(error);
            throw new SubstrateError("io", `chain entry ${p.row.seq} could not be signed: ${detail}`, {
              cause: error,
            });
          },
        ),
      ),
    );
    return entries.map((p, i) => ({ ...p.row, signature: signatures[i]! }));
  }

  /**
   * Takes every pending row out, signed, for the caller to write. The list is emptied first, so a
   * failure part-way (a rejected signature, a failed insert) leaves nothing behind to write twice:
   * the caller then fails the whole batch.
   */
  async take(): Promise<ChainRow[]> {
    const rows = this.signedRows();
    this.#entries = [];
    return rows;
  }
}
