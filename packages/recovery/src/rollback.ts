// An operator's acceptance of a restored older store, recorded as a signed "rollback_accepted" chain entry
// that names the head it rolled back from. Finding the rollback is @leash/engine's findRollback.
import { appendEntry, type Signer } from "@leash/chain";
import { type Substrate, SubstrateError } from "@leash/core";
import type { RollbackFinding } from "@leash/engine";
import { enqueueEntry } from "@leash/outbox";

/** The entry kind; it changes no session or budget state (replay folds it as nothing). */
export const ROLLBACK_ACCEPTED = "rollback_accepted";

/**
 * Appends the acceptance after the store's head, as it was when the rollback was found (another writer
 * having moved it since is a conflict: run recovery again). Returns the new head.
 */
export async function recordRollbackAccepted(
  substrate: Substrate,
  finding: RollbackFinding,
  options: { signer: Signer; operatorId: string; nowNs: number },
): Promise<{ count: number; head_hash: string }> {
  return substrate.transaction(async (tx) => {
    const head = await tx.chain.head();
    if (head?.entry_hash !== finding.store_head?.entry_hash) {
      throw new SubstrateError(
        "conflict",
        "the chain moved while the rollback was being accepted; run recovery again",
      );
    }
    const entry = await appendEntry(tx, {
      kind: ROLLBACK_ACCEPTED,
      data: {
        operator_id: options.operatorId,
        rollback: finding.kind,
        // What the store was rolled back from: the head checkpointed outside it.
        checkpoint_count: finding.checkpoint.count,
        checkpoint_head_hash: finding.checkpoint.head_hash,
        // What it was rolled back to.
        store_count: finding.store_head === null ? 0 : finding.store_head.seq + 1,
        store_head_hash: finding.store_head?.entry_hash ?? null,
      },
      signer: options.signer,
      nowNs: options.nowNs,
    });
    await enqueueEntry(tx, entry);
    return { count: entry.seq + 1, head_hash: entry.entry_hash };
  });
}
