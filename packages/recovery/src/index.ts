// @leash/recovery: what a Leash process runs at every start — verify the chain, reconcile the outbox,
// expire leaked holds, mark stale sessions, and refuse to serve a tampered store. It serves nothing itself.

export { type ChainScan, keyInForce, scanChain } from "./chain-scan.js";
export { type CheckpointStore, fileCheckpointStore, parseCheckpoint } from "./checkpoint.js";
export { RecoveryError, type RecoveryErrorCode } from "./errors.js";
export { checkAllotments, describeViolation, type EscrowCheck, withAllotments } from "./escrow-check.js";
export { checkOutbox, type OutboxCheck, reenqueueMissing, releaseLeases } from "./outbox-check.js";
export {
  type RecoverOptions,
  type RecoveryProblem,
  type RecoveryReport,
  type RecoveryWarning,
  type RecoveryWarningCode,
  recover,
  redactUrl,
} from "./recover.js";
export {
  ChainReplayer,
  emptyProjection,
  nonceKey,
  type ParamsSource,
  type Projection,
  type ReplayMismatch,
  type ReplayOptions,
  type ReplayResult,
  recordedForm,
} from "./replay/replay.js";
export { replayChain, storedParams } from "./replay/replay-chain.js";
export { assertRecovered, formatReport } from "./report.js";
export { ROLLBACK_ACCEPTED, recordRollbackAccepted } from "./rollback.js";
export {
  compareSnapshots,
  describeDifferences,
  repairSnapshots,
  type SnapshotDifference,
  type SnapshotTable,
} from "./snapshot-check.js";
export { findStaleSessions, lastSeenNs } from "./stale.js";
export { defaultStateDir, stateCheckpointStore, storeIdentity } from "./state-dir.js";
