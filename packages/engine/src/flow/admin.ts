// The engine's housekeeping: forgetting old message ids, rotating the signing key, opening (verifying
// the chain) and closing (the last checkpoint). No decision is made here.
import { type Checkpoint, keyRotationData, type Signer } from "@leash/chain";
import { ChainUnverifiedError } from "../chain-trust.js";
import { LeashError } from "../errors.js";
import type { ChainOpenReport } from "../types.js";
import type { EngineContext } from "./context.js";

export function forgetMessages(ctx: EngineContext, beforeNs: number, limit = 10_000): Promise<number> {
  const { substrate } = ctx;
  if (!Number.isInteger(beforeNs) || !Number.isSafeInteger(limit) || limit < 1) {
    return Promise.reject(
      new LeashError("invalid_argument", "forgetMessages needs an integral beforeNs and a positive limit"),
    );
  }
  return substrate.transaction((tx) => tx.messages.prune(beforeNs, limit));
}

export async function rotateKey(ctx: EngineContext, next: Signer, operatorId: string): Promise<void> {
  const { clock, checkpoints, auditor } = ctx;
  if (typeof operatorId !== "string" || operatorId === "") {
    throw new LeashError("invalid_argument", "an operator id is required to rotate the signing key");
  }
  await ctx.transaction(async (tx) => {
    await auditor.record(
      tx,
      "key_rotation",
      { ...keyRotationData(next), operator_id: operatorId },
      clock.nowNs(),
    );
  });
  auditor.signer = next; // only once the rotation entry is committed
  // A checkpoint past the rotation lets an engine that holds only the next key open from it.
  await checkpoints?.flush();
}

export async function open(ctx: EngineContext): Promise<ChainOpenReport> {
  const { trust } = ctx;
  try {
    await trust.ready();
  } catch (error) {
    if (!(error instanceof ChainUnverifiedError)) throw error;
  }
  return trust.report!;
}

export async function close(ctx: EngineContext): Promise<Checkpoint | null> {
  const { trust, checkpoints } = ctx;
  return checkpoints === null ? trust.checkpoint : await checkpoints.flush();
}
