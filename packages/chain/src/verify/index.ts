// @leash/chain/verify: verification of a Leash audit chain and its entries in any JavaScript runtime.
// No node: imports (Ed25519 and SHA-256 come from @noble); building, signing and key files are in @leash/chain.

import { nobleBackend } from "./noble.js";
import {
  type ChainEntries,
  type VerifyChainOptions,
  type VerifyChainResult,
  verifyChainWith,
} from "./verify-chain.js";

export { ChainError, type ChainErrorCode, KeyFileError } from "../errors.js";
export { checkpointOf } from "./checkpoint.js";
export { base64UrlDecode, base64UrlEncode, bytesToHex, hexToBytes } from "./encoding.js";
export {
  columnProblem,
  type DecisionData,
  ENTRY_FORMAT_VERSION,
  type EntryBody,
  type Json,
  jwsOf,
  type KeyRotationData,
  keyRotationProblem,
  parseEntryBody,
  protectedHeaderB64,
  sessionIdOf,
  signingInputOf,
  ZERO_HASH,
} from "./format.js";
export { KEY_ID_LENGTH, keyId, publicKeyBytes } from "./keys.js";
export { nobleBackend } from "./noble.js";
export {
  type ChainEntries,
  type ChainFailure,
  type ChainFailureKind,
  type Checkpoint,
  type VerifyBackend,
  type VerifyChainOptions,
  type VerifyChainResult,
  verifyChainWith,
} from "./verify-chain.js";

/** verifyChainWith the @noble backend: the same answers as @leash/chain's verifyChain, anywhere. */
export function verifyChain(entries: ChainEntries, options: VerifyChainOptions): Promise<VerifyChainResult> {
  return verifyChainWith(nobleBackend, entries, options);
}
