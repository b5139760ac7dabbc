// Whether the chain a transaction finds still continues what the engine's projection knew: the same head,
// or a tail of entries linked onto it. Pure; the projection (projection.ts) decides what to drop.
import type { ChainEntryRecord } from "@leash/core";
import type { ChainHead } from "./audit.js";

export function sameHead(a: ChainHead | null | undefined, b: ChainHead | null): boolean {
  if (a === undefined) return false;
  if (a === null || b === null) return a === b;
  return a.seq === b.seq && a.entry_hash === b.entry_hash;
}

/**
 * Whether `tail` is the chain's next entries after (knownSeq, knownHash), each linked to the one
 * before by seq and hash, ending at `head`: only then may the projection fold them in.
 */
export function continues(
  tail: readonly ChainEntryRecord[],
  knownSeq: number,
  knownHash: string | undefined,
  head: ChainHead | null,
): boolean {
  let seq = knownSeq;
  let hash = knownHash;
  for (const entry of tail) {
    if (entry.seq !== seq + 1 || entry.prev_hash !== hash) return false;
    seq = entry.seq;
    hash = entry.entry_hash;
  }
  return head !== null && seq === head.seq && hash === head.entry_hash;
}
