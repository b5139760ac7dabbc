// The errors budget-guard throws: one base class with a stable `code`, two subclasses that carry data.
// Refusals that are ordinary outcomes (budget_exhausted, budget_overrun) are results, not errors.
import { LeashBaseError, type ReservationStatus } from "@leash/core";

export type BudgetGuardErrorCode =
  /** A money amount is not a finite, non-negative decimal within range. */
  | "invalid_amount"
  /** A non-money argument (id, timestamp, TTL, scope, limit count) is malformed. */
  | "invalid_argument"
  /** Arithmetic on stored amounts would leave the range in which it is exact. */
  | "overflow"
  | "account_not_found"
  | "parent_not_found"
  /** `ensureAccount` found the id already defined with another scope, parent or limit. */
  | "account_conflict"
  | "child_exceeds_parent"
  | "account_cycle"
  | "reservation_not_found"
  /** `reserve` found the id already used by another request (or without the same idempotency key). */
  | "reservation_conflict"
  | "already_resolved"
  /** `settle` with the key of an earlier settlement but another actual cost: the first one stands. */
  | "settlement_conflict"
  /** The store holds something budget-guard never writes (an unparsable amount, a negative hold). */
  | "corrupt";

/** Every error budget-guard throws; `code` is stable and meant for programs, `message` for people. */
export class BudgetGuardError extends LeashBaseError<BudgetGuardErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.budget-guard.error");
  override readonly name: string = "BudgetGuardError";
}

/** An amount was rejected; `value` is what was passed, so a log shows the offending input. */
export class InvalidAmountError extends BudgetGuardError {
  static override readonly marker = Symbol.for("leash.budget-guard.error.invalid_amount");
  override readonly name = "InvalidAmountError";
  override readonly code = "invalid_amount" as const;
  readonly value: unknown;

  constructor(value: unknown, message: string, options?: { cause?: unknown }) {
    super("invalid_amount", message, options);
    this.value = value;
  }
}

/**
 * A settle or release reached a reservation that is no longer PENDING (and is not a replay of the
 * operation that resolved it); `status` tells the engine what happened instead, e.g. EXPIRED.
 */
export class AlreadyResolvedError extends BudgetGuardError {
  static override readonly marker = Symbol.for("leash.budget-guard.error.already_resolved");
  override readonly name = "AlreadyResolvedError";
  override readonly code = "already_resolved" as const;
  readonly reservationId: string;
  readonly status: Exclude<ReservationStatus, "PENDING">;

  constructor(reservationId: string, status: Exclude<ReservationStatus, "PENDING">, message: string) {
    super("already_resolved", message);
    this.reservationId = reservationId;
    this.status = status;
  }
}
