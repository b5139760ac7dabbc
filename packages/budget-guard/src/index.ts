// @leash/budget-guard: exact-decimal budgets with two-phase reservations, scopes and nested guards.
// Storage goes through the engine's SubstrateTx; this package opens no transactions and holds no state.

export { accountChain, available, type EnsureAccountInput, ensureAccount } from "./accounts.js";
export {
  AlreadyResolvedError,
  BudgetGuardError,
  type BudgetGuardErrorCode,
  InvalidAmountError,
} from "./errors.js";
export { type EstimateReading, readEstimate } from "./estimate.js";
export {
  accountAvailable,
  addMoney,
  type BudgetRefusal,
  chainAvailable,
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
  expire,
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
