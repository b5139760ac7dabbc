// Streams a substrate's whole audit chain through verifyChain, page by page, and keeps what recovery
// needs afterwards (entry ids, the head). It repairs nothing: a chain that fails is only described.
import { type Checkpoint, parseEntryBody, type VerifyChainResult, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";

export interface ChainScan {
  result: VerifyChainResult;
  /** entry_id of each entry read, by stream position (= seq for the verified prefix). */
  entryIds: string[];
  /** The last entry read: the head when the chain verified. */
  last: ChainEntryRecord | null;
}

export interface ScanOptions {
  publicKeys: readonly (string | Uint8Array)[];
  checkpoint: Checkpoint | undefined;
  pageSize: number;
  parallel: number;
}

/**
 * Verifies the chain from its genesis. Each page is read in its own short transaction, so a long
 * chain never holds a lock (or a PostgreSQL snapshot) for the whole walk; entries appended meanwhile
 * by another daemon are simply verified too, or left for the next start.
 */
export async function scanChain(substrate: Substrate, options: ScanOptions): Promise<ChainScan> {
  const entryIds: string[] = [];
  let last: ChainEntryRecord | null = null;
  async function* entries(): AsyncGenerator<ChainEntryRecord> {
    let from = 0;
    for (;;) {
      const page = await substrate.transaction((tx) => tx.chain.range(from, options.pageSize));
      for (const entry of page) {
        entryIds.push(entry.entry_id);
        last = entry;
        yield entry;
      }
      if (page.length < options.pageSize) return;
      const next = page[page.length - 1]!.seq + 1;
      // A seq column edited downwards must not make the walk go round in circles.
      if (!Number.isSafeInteger(next) || next <= from) return;
      from = next;
    }
  }
  const result = await verifyChain(entries(), {
    publicKeys: options.publicKeys,
    parallel: options.parallel,
    ...(options.checkpoint === undefined ? {} : { checkpoint: options.checkpoint }),
  });
  return { result, entryIds, last };
}

/**
 * The key id that must sign the next entry: the one a trailing key_rotation hands over to, else the
 * head's own. Only meaningful for a verified head (the body then parses and, for a rotation, names a key).
 */
export function keyInForce(head: ChainEntryRecord): string {
  if (head.kind === "key_rotation") {
    const body = parseEntryBody(head.body);
    if (typeof body !== "string" && typeof body.data.next_key_id === "string") return body.data.next_key_id;
  }
  return head.key_id;
}
