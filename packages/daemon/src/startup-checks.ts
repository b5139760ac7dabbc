// What a daemon checks of its store before it serves: the chain verifies (and is not behind the last head
// this daemon signed), the signer is the key in force, and the state tables agree with the replayed chain.
import { type Checkpoint, parseEntryBody, type Signer, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { findRollback, rollbackMessage } from "@leash/engine";
import {
  type CheckpointStore,
  compareSnapshots,
  describeDifferences,
  replayChain,
  storedParams,
} from "@leash/recovery";

async function* wholeChain(substrate: Substrate): AsyncGenerator<ChainEntryRecord> {
  const batch = 5_000;
  for (let from = 0; ; from += batch) {
    const entries = await substrate.transaction((tx) => tx.chain.range(from, batch));
    yield* entries;
    if (entries.length < batch) return;
  }
}

/**
 * Verifies the store's chain and checks `signer` is the key that must sign its next entry; a daemon
 * that appended to a broken chain, or with another key, would make every later receipt worthless.
 */
export async function checkChain(
  substrate: Substrate,
  signer: Signer,
  trusted: readonly string[],
  checkpoints: CheckpointStore | null,
): Promise<void> {
  let checkpoint: Checkpoint | null = null;
  if (checkpoints !== null) {
    checkpoint = await checkpoints.read();
    const rollback = checkpoint === null ? null : await findRollback(substrate, checkpoint);
    if (rollback !== null) throw new Error(rollbackMessage(rollback, checkpoints.location));
  }
  const result = await verifyChain(wholeChain(substrate), {
    publicKeys: [signer.publicKeyHex, ...trusted],
    ...(checkpoint === null ? {} : { checkpoint }),
  });
  if (!result.ok) {
    throw new Error(
      `the audit chain does not verify (${result.failure.kind} at seq ${result.failure.seq ?? "?"}): run \`leash verify\` and \`leash recover\``,
    );
  }
  // What was verified is the head to compare the next start with, before anything is served.
  if (checkpoints !== null && result.count > 0) {
    await checkpoints.write({ count: result.count, head_hash: result.head_hash });
  }
  const head = await substrate.transaction(async (tx) => {
    const h = await tx.chain.head();
    return h === null ? null : (await tx.chain.range(h.seq, 1))[0];
  });
  if (head === undefined || head === null) return;
  const body = parseEntryBody(head.body);
  if (typeof body === "string")
    throw new Error(`the audit chain's head (seq ${head.seq}) is unreadable: ${body}`);
  const inForce = body.kind === "key_rotation" ? String(body.data.next_key_id) : body.key_id;
  if (inForce !== signer.keyId) {
    throw new Error(
      `the signing key (key id ${signer.keyId}) is not the chain's key in force (key id ${inForce}): give that key, or hand over with \`leash key rotate\``,
    );
  }
}

/**
 * Replays the verified chain and compares the state tables with it: a daemon serving on a hand-edited
 * spent_usd or circuit flag would decide on a state its own chain contradicts (fail closed).
 */
export async function checkStateTables(substrate: Substrate): Promise<void> {
  const replay = await replayChain(wholeChain(substrate), { params: storedParams(substrate) });
  if (!replay.ok) {
    const m = replay.mismatch!;
    throw new Error(
      `the audit chain does not replay: entry ${m.index} (seq ${m.seq}) records ${m.field} ${JSON.stringify(m.recorded)}, the entries before it give ${JSON.stringify(m.expected)}: run \`leash verify --replay\``,
    );
  }
  const differences = await compareSnapshots(substrate, replay.projection);
  if (differences.length > 0) {
    throw new Error(
      `the state tables disagree with the replayed chain: ${describeDifferences(differences)}: run \`leash recover --repair\``,
    );
  }
}
