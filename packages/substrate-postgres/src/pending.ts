// Chain entries appended with appendSigning whose rows wait for their signatures. The head has
// already moved past them (chain.move); the rows are written, all in one statement, just before
// COMMIT (substrate.ts). It checks nothing itself and sends nothing: chain.ts and substrate.ts do.
import type { ChainEntryRecord, UnsignedChainEntry } from "@leash/core";

/** Who appended an entry: its transaction fails when the signature does. */
export interface SignatureOwner {
  signatureRejected(error: unknown): void;
}

interface Pending {
  readonly entry: UnsignedChainEntry;
  readonly signature: Promise<string>;
  readonly owner: SignatureOwner;
  /** Set once the signature resolves; a rejection is reported to the owner instead. */
  signed: string | undefined;
}

/**
 * One per solo transaction, one per group-commit batch (shared by its transactions, as the head
 * they hand on is): the entries appended but not yet written, oldest (lowest seq) first.
 */
export class PendingChain {
  private entries: Pending[] = [];

  get size(): number {
    return this.entries.length;
  }

  add(entry: UnsignedChainEntry, signature: Promise<string>, owner: SignatureOwner): void {
    const pending: Pending = { entry: { ...entry }, signature, owner, signed: undefined };
    this.entries.push(pending);
    // Reported to the owner at once, so that the transaction still running (or the batch, when it
    // has ended) fails; the rejection is also seen wherever the signature is awaited.
    signature.then(
      (value) => {
        pending.signed = value;
      },
      (error: unknown) => owner.signatureRejected(error),
    );
  }

  hasEntryId(entryId: string): boolean {
    return this.entries.some((p) => p.entry.entry_id === entryId);
  }

  /** Forgets the entries of a transaction that failed: its savepoint (and its head move) is rolled back. */
  drop(owner: SignatureOwner): void {
    if (this.entries.some((p) => p.owner === owner)) {
      this.entries = this.entries.filter((p) => p.owner !== owner);
    }
  }

  /**
   * The pending entries with their signatures, oldest first, seq >= fromSeq; waits for signatures
   * still being computed and rejects as the first rejected one does.
   */
  async signedEntries(fromSeq = Number.NEGATIVE_INFINITY): Promise<ChainEntryRecord[]> {
    const entries = this.entries.filter((p) => p.entry.seq >= fromSeq);
    const signatures = await Promise.all(entries.map((p) => p.signed ?? p.signature));
    return entries.map((p, i) => ({ ...p.entry, signature: signatures[i]! }));
  }

  /** Resolves once every signature has settled (resolved or rejected); never rejects. */
  async settled(): Promise<void> {
    await Promise.allSettled(this.entries.map((p) => p.signature));
  }
}
