// @leash/chain: the hash-chained, Ed25519-signed audit log — keys, entries, append, verify, export.
// Storage is the ChainStore port of @leash/core; browser-only verification is @leash/chain/verify.

export {
  type AppendEntryInput,
  appendEntry,
  type BuildEntryInput,
  buildEntry,
  chainIdOf,
  compactJws,
  keyRotationData,
} from "./entry.js";
export { ChainError, type ChainErrorCode, KeyFileError } from "./errors.js";
export * from "./events/index.js";
export {
  fromJsonl,
  keyInForceAfter,
  referenceCanonical,
  toJsonl,
  toShackleLedger,
  type VerifiedLedgerOptions,
  type VerifiedLedgerResult,
  writeVerifiedShackleLedger,
} from "./export.js";
export {
  createSigner,
  type GeneratedKeyPair,
  generateKeyPair,
  type KeyFilePaths,
  keyFilePathsFor,
  type LoadSigningKeyOptions,
  loadPublicKey,
  loadSigningKey,
  type PublicKeyInfo,
  SIGNING_KEY_ENV,
  type Signer,
  type WriteKeyFilesOptions,
  writeKeyFiles,
} from "./keys.js";
export {
  parseRowKey,
  ROW_DIGESTS_FIELD,
  rowDigest,
  rowDigestsOf,
  rowDigestsProblem,
  rowKey,
  STATE_TABLES,
  type StateTable,
} from "./state-rows.js";
export { defaultRandom, type RandomBytes, uuidv7 } from "./uuid.js";
export { checkpointOf } from "./verify/checkpoint.js";
export {
  type DecisionData,
  ENTRY_FORMAT_VERSION,
  type EntryBody,
  type Json,
  jwsOf,
  type KeyRotationData,
  parseEntryBody,
  signingInputOf,
  ZERO_HASH,
} from "./verify/format.js";
export { KEY_ID_LENGTH, keyId, publicKeyBytes } from "./verify/keys.js";
export { nobleBackend } from "./verify/noble.js";
export {
  type ChainEntries,
  type ChainFailure,
  type ChainFailureKind,
  type Checkpoint,
  type VerifyBackend,
  type VerifyChainOptions,
  type VerifyChainResult,
  verifyChainWith,
} from "./verify/verify-chain.js";
export { type NodeVerifyChainOptions, nodeBackend, verifyChain } from "./verify-node.js";
