// @leash/engine: library mode (SHACKLE SP/1.0 Model A) — evaluate, postExec, HITL, resets, guard().
// Bring a substrate (@leash/substrate-sqlite, -postgres or -memory); the engine owns no storage.

// The pieces of evaluate() beyond decide(), for @leash/recovery's replay, which re-runs them on the chain.
export { budgetEnabled, guardAccountId, sessionAccountId } from "./accounts.js";
export { outranksEstimate, resolveEstimate } from "./call-input.js";
export { DEFAULT_CHECKPOINT_INTERVAL_MS } from "./checkpoint-writer.js";
export {
  DEFAULT_CONFIG,
  type LeashConfigFile,
  loadConfigFile,
  parseConfigObject,
  readConfigDocument,
} from "./config-file.js";
export { countsOnly } from "./count-only.js";
export { createEngine, type Engine, systemClock } from "./engine.js";
export {
  LeashAlreadyDecided,
  LeashDenied,
  LeashError,
  type LeashErrorCode,
  LeashHitl,
  LeashHitlExpired,
} from "./errors.js";
export { type EscrowControl, type EscrowedSubstrate, type EscrowOptions, withEscrow } from "./escrow.js";
export { policyStep } from "./flow/policy-step.js";
export { type GuardOptions, guard } from "./guard.js";
export {
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  consumedTransitionOf,
  type EngineDecision,
  HITL_TIMEOUT,
  hasTransition,
  PARAMS_HASH_MISMATCH,
  pausedOf,
  releasesApproval,
  TOOL_MISMATCH,
  timedOut,
} from "./hitl-binding.js";
export { DEFAULT_HITL_TIMEOUT_S, hitlExpiresNs, hitlView, TIMEOUT_OPERATOR } from "./hitl-view.js";
export { MAX_RESERVATION_TTL_S } from "./limits.js";
export {
  type OpenStoreOptions,
  openStore,
  redactStoreUrl,
  type StoreKind,
  storeKindOf,
} from "./open-store.js";
export {
  DEFAULT_MAX_PARAMS_BYTES,
  maxParamsBytes,
  oversizedBytes,
  PARAMS_INLINE_MAX,
  PARAMS_TOO_LARGE,
} from "./params-cap.js";
export {
  type CounterForm,
  countedAfter,
  countedCallOf,
  counterFormOf,
  estimateWithPolicy,
  isPolicyReason,
  judgeByPolicy,
  type PolicyLayerInput,
  type PolicyLayerResult,
  type PolicyRecord,
  policyFields,
  type StoredPolicyRecord,
  storedRecordOf,
  updatesOf,
} from "./policy-layer.js";
export { POLICY_PUBLISHED, type PolicySource, publishedData } from "./policy-runtime.js";
export { nodeSha256Hex, nodeSha256HexOfBytes, REPLAY_INPUTS_VERSION } from "./replay-inputs.js";
export { findRollback, type RollbackFinding, rollbackMessage } from "./rollback.js";
export { denyListed, TOOL_DENIED } from "./tool-policy.js";
export type * from "./types.js";
