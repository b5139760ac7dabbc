// @leash/machine: Leash's state machine — decide(view, command, env) → events + reply | missing keys |
// error, pure and synchronous, that the engine runs live and the replay folds. No I/O, no clock, no store.
export {
  budgetEnabled,
  guardAccountId,
  type SessionIds,
  sessionAccountId,
  sessionAccountInput,
} from "./accounts.js";
export {
  ERROR_TEXT_MAX,
  type EstimateResolution,
  malformedInput,
  outranksEstimate,
  recordableErrorText,
  recordableEstimate,
  resolveEstimate,
} from "./call-input.js";
export {
  DEFAULT_HITL_TIMEOUT_S,
  DEFAULT_HOLD_TTL_NS,
  holdId,
  MAX_RESERVATION_TTL_S,
  TIMEOUT_OPERATOR,
} from "./constants.js";
export { countsOnly } from "./count-only.js";
export { decide } from "./decide.js";
export { type EvaluateReply, evaluate } from "./evaluate.js";
export {
  type AnswerReply,
  answer,
  answeredRequest,
  dueInState,
  type ExpireReply,
  expireRequest,
  hitlExpiresNs,
  isDue,
  storable,
} from "./hitl.js";
export {
  type BoundRequest,
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  consumedTransitionOf,
  HITL_TIMEOUT,
  hasTransition,
  PARAMS_HASH_MISMATCH,
  pausedOf,
  releasesApproval,
  TOOL_MISMATCH,
  timedOut,
} from "./hitl-binding.js";
export {
  DEFAULT_MAX_PARAMS_BYTES,
  maxParamsBytes,
  oversizedBytes,
  PARAMS_INLINE_MAX,
  PARAMS_TOO_LARGE,
} from "./params-cap.js";
export { type EngineDecision, type EngineReason, MALFORMED, OVERRUN } from "./reasons.js";
export { repeatSeen } from "./repeat-seen.js";
export {
  canonicalParamsText,
  nodeSha256Hex,
  nodeSha256HexOfBytes,
  paramsBlobOf,
  REPLAY_INPUTS_VERSION,
  type ReplayInputsArgs,
  replayInputs,
} from "./replay-inputs.js";
export { heartbeat, markStale, register, reset, sessionOf } from "./sessions.js";
export { postExecEvents, type SettledCall } from "./settlement.js";
export { denyListed, TOOL_DENIED } from "./tool-policy.js";
export type * from "./types.js";
