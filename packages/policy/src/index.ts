// @leash/policy: policies operators write (ordered rules, CEL conditions, allow / deny / hitl / limits),
// loaded with bounds and type checks, evaluated as a pure function of policy, call and counters.
export {
  type CaseDiff,
  type CaseExpectation,
  type CaseFailure,
  type CaseReport,
  type CaseStep,
  formatFailure,
  type PolicyCase,
  parseCases,
  runCases,
} from "./cases.js";
export type { CelT } from "./check.js";
export {
  type CallMatch,
  type CompiledPolicy,
  type CompiledRule,
  type LoadOptions,
  loadPolicy,
} from "./compile.js";
export { CONDITION_VARIABLES } from "./condition.js";
export { type CountedCall, updatesOfCounted } from "./counted.js";
export { PolicyError, type PolicyErrorCode, type PolicyErrorOptions } from "./errors.js";
export {
  evaluatePolicy,
  type MonitorRecord,
  type PolicyInput,
  type PolicyOutcome,
  type PolicyVerdict,
} from "./evaluate.js";
export * as limits from "./limits.js";
export { neverAllows, type ToolOf, toolEstimate } from "./reach.js";
export {
  type Mode,
  type Per,
  type Period,
  type PolicyAction,
  type PolicyDocument,
  type PolicyMatch,
  type PolicyRule,
  policySchema,
  type Verdict,
} from "./schema.js";
export {
  applyCounterUpdates,
  budgetPeriod,
  type CountedItem,
  type CounterReader,
  type CounterUpdate,
  counterKey,
  EMPTY_STATE,
  type PolicyCounter,
  type PolicyState,
  rateWindow,
} from "./state.js";
