// Checkpoints: the (count, head hash) of a verified chain, to keep where the chain's writer cannot reach.
// Storing the checkpoint is the caller's job; verifyChain only compares against one.

import { ChainError } from "../errors.js";
import type { Checkpoint, VerifyChainResult } from "./verify-chain.js";

/** The checkpoint of a successful verification. @throws ChainError "invalid_argument" for a failed one. */
export function checkpointOf(result: VerifyChainResult): Checkpoint {
  if (!result.ok) {
    throw new ChainError(
      "invalid_argument",
      "a failed verification has no checkpoint: the chain is not trustworthy",
    );
  }
  return { count: result.count, head_hash: result.head_hash };
}
