// Whether a store's chain is behind, or forked from, the last head a Leash process checkpointed outside
// it (a restored older copy), and the message that names both heads. It repairs and accepts nothing.
import type { Checkpoint } from "@leash/chain";
import type { Substrate } from "@leash/core";

type Head = { seq: number; entry_hash: string };

/** A store whose chain does not reach the checkpoint's head: shorter (`behind`) or different there (`forked`). */
export interface RollbackFinding {
  kind: "behind" | "forked";
  /** The store's head now (null: an empty chain). */
  store_head: Head | null;
  /** The last head checkpointed outside the store. */
  checkpoint: Checkpoint;
  /** For `forked`: the hash the store has where the checkpoint's head should be. */
  store_hash_at_checkpoint: string | null;
}

/**
 * Compares the store's head with `checkpoint` in one read transaction: the entry at the checkpoint's
 * position must be the checkpoint's head. Null when the store reaches it (a full verification from
 * the checkpoint still has to show the entries after it are genuine).
 */
export async function findRollback(
  substrate: Substrate,
  checkpoint: Checkpoint,
): Promise<RollbackFinding | null> {
  if (checkpoint.count === 0) return null;
  const at = checkpoint.count - 1;
  return substrate.transaction(async (tx) => {
    const head = await tx.chain.head();
    if (head === null || head.seq < at) {
      return { kind: "behind", store_head: head, checkpoint, store_hash_at_checkpoint: null };
    }
    const [entry] = await tx.chain.range(at, 1);
    // A head that names an entry the chain lacks (PostgreSQL keeps its head in a row of its own).
    if (entry === undefined) {
      return { kind: "behind", store_head: head, checkpoint, store_hash_at_checkpoint: null };
    }
    if (entry.entry_hash !== checkpoint.head_hash) {
      return {
        kind: "forked",
        store_head: head,
        checkpoint,
        store_hash_at_checkpoint: entry.entry_hash,
      };
    }
    return null;
  });
}

function headText(head: Head | null): string {
  return head === null ? "empty (no entries)" : `entry ${head.seq} (${head.entry_hash})`;
}

/**
 * One line naming both heads, where the checkpoint lives, and how to accept a restore made on purpose.
 */
export function rollbackMessage(finding: RollbackFinding, location?: string): string {
  const cp = finding.checkpoint;
  const where = location === undefined ? "" : ` (${location})`;
  const signed = `entry ${cp.count - 1} (${cp.head_hash})`;
  const what =
    finding.kind === "behind"
      ? `the store's chain is behind the last head checkpointed outside it: the store has no entry ${cp.count - 1} (its head is ${headText(finding.store_head)}), the checkpoint's head${where} is ${signed}`
      : `the store's chain forks from the last head checkpointed outside it: entry ${cp.count - 1} is ${finding.store_hash_at_checkpoint} in the store (its head is ${headText(finding.store_head)}), the checkpoint's head${where} is ${signed}`;
  return `${what}; an older copy of the store was restored? If on purpose, run \`leash recover --accept-rollback\` (a signed entry records it)`;
}
