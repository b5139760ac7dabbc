// @leash/budget-guard: exact budgets (fixed-point money) with two-phase reservations, scopes and nested guards.
// Storage goes through the engine's SubstrateTx; this package opens no transactions and holds no state.

export { accountChain, available, type EnsureAccountInput, ensureAccount } from "./accounts.js";
export {
  AlreadyResolvedError,
  BudgetGuardError,
  type BudgetGuardErrorCode,
  InvalidAmountError,
} from "./errors.js";
export {
  allotmentOf,
  allotted,
  checkEscrow,
  type EscrowAccount,
  type EscrowAllotment,
  type EscrowRefusal,
  type EscrowResult,
  type EscrowViolation,
  type GrantPolicy,
  type GrantRequest,
  grantSize,
  headroom,
  planCharge,
  planGrant,
  planReclaim,
  planRelease,
  planReturn,
  unallotted,
} from "./escrow.js";
export {
  type AllotmentResult,
  chargeAllotment,
  escrowOf,
  type GrantInput,
  grantAllotment,
  reclaimAllotment,
  releaseAllotment,
  returnAllotment,
  type ShardLease,
} from "./escrow-store.js";
export { type EstimateReading, readEstimate } from "./estimate.js";
export { chargeExpired, expire } from "./expiry.js";
export type { MoneyInput, RoundingMode } from "./fixed-money.js";
export {
  accountAvailable,
  addMoney,
  type BudgetRefusal,
  chainAvailable,
  chainOverLimit,
  clampAtZero,
  isCanonicalMoney,
  judgeReservation,
  MONEY_SCALE,
  Money,
  moneyString,
  overrunOf,
  readStoredMoney,
  subtractMoney,
  toMoney,
  ZERO,
} from "./money.js";
export {
  type HoldPlan,
  planHold,
  type ReleaseOptions,
  type ReleaseResult,
  type ReserveInput,
  type ReserveResult,
  release,
  reserve,
  type SettleOptions,
  type SettleResult,
  settle,
} from "./reservations.js";
