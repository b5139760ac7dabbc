// Argument checks shared by the store-touching functions, so bad input fails before any write.
// Not money parsing (money.ts) and not part of the public API.
import type { BudgetStore, SubstrateTx } from "@leash/core";
import { BudgetGuardError } from "./errors.js";

/** Accepts the engine's transaction or just its budget store: both are the same transaction. */
export function budgetsOf(tx: SubstrateTx | BudgetStore): BudgetStore {
  return "budgets" in tx ? tx.budgets : tx;
}

export function requireId(value: unknown, name: string): asserts value is string {
  if (typeof value !== "string" || value.length === 0) {
    throw new BudgetGuardError("invalid_argument", `${name} must be a non-empty string`);
  }
}

/**
 * Timestamps are nanoseconds in a JS number (the port's type). Values past 2^53 lose sub-microsecond
 * digits, which is harmless for TTLs; NaN or ±Infinity would silently break every comparison.
 */
export function requireTimestamp(value: unknown, name: string): asserts value is number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new BudgetGuardError(
      "invalid_argument",
      `${name} must be a finite, non-negative number of nanoseconds`,
    );
  }
}

export function requirePositiveDuration(value: unknown, name: string): asserts value is number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new BudgetGuardError(
      "invalid_argument",
      `${name} must be a finite, positive number of nanoseconds`,
    );
  }
}

export function requireCount(value: unknown, name: string, minimum: number): asserts value is number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < minimum) {
    throw new BudgetGuardError("invalid_argument", `${name} must be an integer ≥ ${minimum}`);
  }
}
