// Reconciles the outbox with a verified chain: every entry queued exactly once, nothing queued that the
// chain lacks; re-enqueues what a lost enqueue left out and frees a restarted relay's leases. No delivery.
import type { OutboxItem, OutboxStatus, Substrate } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { enqueueEntry } from "@leash/outbox";

export interface OutboxOrphan {
  seq: number;
  entry_id: string;
  status: OutboxStatus;
  problem: string;
}

export interface OutboxCheck {
  counts: Record<OutboxStatus, number>;
  /** Chain seqs (of the verified prefix) with no outbox item: committed but never shipped. */
  missing: number[];
  /** Items whose entry the chain does not hold at that seq. */
  orphans: OutboxOrphan[];
  /** PENDING items still leased to someone, the lease over: the next claim takes them (by design). */
  expiredLeases: number;
  /** PENDING items leased until later, by holder: a running relay, or a dead one whose lease has not run out. */
  liveLeases: Record<string, number>;
  /** DEAD items: never retried by any relay; an operator's to look at. */
  dead: Pick<OutboxItem, "seq" | "entry_id" | "attempts" | "last_error">[];
  /** Every item, for the lease release that may follow. */
  items: OutboxItem[];
}

/**
 * Compares the whole outbox with the verified chain prefix (`entryIds[seq]` for seq < entryIds.length);
 * with `entryIds` null (a chain that failed) it only counts. The outbox is read before the chain's
 * tail, in one transaction: an item enqueued by a concurrent append has its entry committed with it,
 * so the later read sees that entry and the item is not mistaken for an orphan.
 */
export async function checkOutbox(
  substrate: Substrate,
  entryIds: readonly string[] | null,
  nowNs: number,
): Promise<OutboxCheck> {
  const compare = entryIds !== null;
  const verifiedCount = entryIds?.length ?? 0;
  const { items, counts, tail } = await substrate.transaction(async (tx) => {
    const items = await tx.outbox.list({});
    const counts = await tx.outbox.counts();
    const beyond = compare ? items.filter((i) => i.seq >= verifiedCount).length : 0;
    const tail = beyond === 0 ? [] : await tx.chain.range(verifiedCount, beyond + 1024);
    return { items, counts, tail };
  });
  const tailIds = new Map(tail.map((e) => [e.seq, e.entry_id]));
  const queued = new Uint8Array(verifiedCount);
  const orphans: OutboxOrphan[] = [];
  let expiredLeases = 0;
  const liveLeases: Record<string, number> = {};
  const dead: OutboxCheck["dead"] = [];
  for (const item of items) {
    const expected = !compare
      ? item.entry_id
      : item.seq < verifiedCount
        ? entryIds[item.seq]
        : tailIds.get(item.seq);
    if (expected === undefined) {
      orphans.push({
        seq: item.seq,
        entry_id: item.entry_id,
        status: item.status,
        problem: `queued as seq ${item.seq}, but the chain holds no entry there (it ends at seq ${verifiedCount + tail.length - 1})`,
      });
    } else if (expected !== item.entry_id) {
      orphans.push({
        seq: item.seq,
        entry_id: item.entry_id,
        status: item.status,
        problem: `queued as entry ${item.entry_id}, but the chain holds entry ${expected} at seq ${item.seq}`,
      });
    }
    if (item.seq >= 0 && item.seq < verifiedCount) queued[item.seq] = 1;
    if (item.status === "DEAD") {
      dead.push({
        seq: item.seq,
        entry_id: item.entry_id,
        attempts: item.attempts,
        last_error: item.last_error,
      });
    } else if (item.status === "PENDING" && item.claimed_by !== null && item.lease_until_ns !== null) {
      if (item.lease_until_ns <= nowNs) expiredLeases++;
      else liveLeases[item.claimed_by] = (liveLeases[item.claimed_by] ?? 0) + 1;
    }
  }
  const missing: number[] = [];
  for (let seq = 0; seq < verifiedCount; seq++) if (queued[seq] === 0) missing.push(seq);
  return { counts, missing, orphans, expiredLeases, liveLeases, dead, items };
}

/**
 * Queues each missing entry again, one transaction per entry, never touching the entry itself. An
 * entry queued meanwhile by another recovering daemon fails "conflict", which counts as done.
 * Returns the seqs this call queued.
 */
export async function reenqueueMissing(
  substrate: Substrate,
  missing: readonly number[],
  entryIds: readonly string[],
): Promise<number[]> {
  const queued: number[] = [];
  for (const seq of missing) {
    try {
      const done = await substrate.transaction(async (tx) => {
        const [entry] = await tx.chain.range(seq, 1);
        // Only the very entry that was verified: the chain could have been changed since.
        if (entry === undefined || entry.seq !== seq || entry.entry_id !== entryIds[seq]) return false;
        await enqueueEntry(tx, entry);
        return true;
      });
      if (done) queued.push(seq);
    } catch (error) {
      if (!(SubstrateError.isInstance(error) && error.code === "conflict")) throw error;
    }
  }
  return queued;
}

/**
 * Frees every lease `owner` holds, whatever its end: `owner` is the relay id this process used before
 * it restarted, so nothing can be using those leases now, and waiting them out would only delay
 * delivery. Returns how many were freed. Other holders' leases are left alone (they may be alive).
 */
export async function releaseLeases(
  substrate: Substrate,
  owner: string,
  items: readonly OutboxItem[],
): Promise<number> {
  const held = items.filter((i) => i.status === "PENDING" && i.claimed_by === owner);
  if (held.length === 0) return 0;
  return substrate.transaction(async (tx) => {
    // fail() changes only items `owner` still holds: one claimed away meanwhile is not touched.
    for (const item of held) {
      await tx.outbox.fail(owner, item.seq, "lease released by recovery: its relay restarted", false);
    }
    const seqs = new Set(held.map((i) => i.seq));
    const still = (await tx.outbox.list({ status: "PENDING" })).filter(
      (i) => seqs.has(i.seq) && i.claimed_by === owner,
    ).length;
    return held.length - still;
  });
}
