// replayChain(): drives the fold (replay.ts) over a whole chain, from seq 0, and reports the first entry
// whose recorded outcome does not follow from the entries before it. Reading, not deciding.
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { Mismatch, recordedForm } from "./diff.js";
import {
  ChainReplayer,
  type ParamsSource,
  type ParsedBody,
  type ReplayMismatch,
  type ReplayOptions,
  type ReplayResult,
} from "./replay.js";

/** The params a store keeps by digest (ChainStore.params), read in a transaction of their own. */
export function storedParams(substrate: Substrate): ParamsSource {
  return (hashes) => substrate.transaction((tx) => tx.chain.params(hashes));
}

/**
 * Replays `entries` (a whole chain, from seq 0) and stops at the first entry whose recorded verdict,
 * state or amounts do not follow from the entries before it. A body that does not parse is reported
 * the same way (verifyChain says why).
 */
export async function replayChain(
  entries: Iterable<ChainEntryRecord> | AsyncIterable<ChainEntryRecord>,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  const replayer = new ChainReplayer(options);
  const kinds: Record<string, number> = {};
  let index = 0;
  let head: ReplayResult["head"] = null;
  let mismatch: ReplayMismatch | null = null;
  for await (const entry of entries) {
    let body: ParsedBody | null = null;
    try {
      body = JSON.parse(entry.body) as ParsedBody;
      kinds[entry.kind] = (kinds[entry.kind] ?? 0) + 1;
      await replayer.applyEntry(index, entry, body);
    } catch (error) {
      const data = body?.data;
      mismatch = {
        index,
        seq: entry.seq,
        kind: entry.kind,
        session_id: typeof data?.session_id === "string" ? data.session_id : entry.session_id,
        field: error instanceof Mismatch ? error.field : "entry",
        expected: error instanceof Mismatch ? recordedForm(error.expected) : null,
        recorded: error instanceof Mismatch ? error.recorded : null,
        message: error instanceof Error ? error.message : String(error),
      };
      index++;
      head = { seq: entry.seq, entry_hash: entry.entry_hash };
      break;
    }
    index++;
    head = { seq: entry.seq, entry_hash: entry.entry_hash };
  }
  return {
    ok: mismatch === null,
    count: index,
    proved_from: replayer.provedFrom,
    verdicts_checked: replayer.verdictsChecked,
    mismatch,
    head,
    projection: replayer.projection,
    kinds,
    unknown_kinds: [...replayer.unknownKinds],
  };
}
