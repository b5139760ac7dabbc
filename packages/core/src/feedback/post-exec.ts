// State after a tool ran (spec §5.3 PostExec): the actual cost replaces the held-back estimate.
// Exact decimals; an actual above the estimate is spent truthfully and `remaining` stops at zero.
import { Decimal } from "decimal.js";
import type { State } from "../types.js";
import { num } from "../util/values.js";

export interface PostExecInput {
  /** What the call really cost. */
  actualCostUsd: number;
  /** What ALLOW held back for it (the call's `estimated_cost_usd`), 0 when none. */
  estimatedCostUsd?: number;
}

export function afterPostExec(state: State, input: PostExecInput): State {
  const actual = new Decimal(Math.max(0, num(input.actualCostUsd) ?? 0));
  const estimate = new Decimal(Math.max(0, num(input.estimatedCostUsd) ?? 0));
  const next: State = {
    ...state,
    budget_spent_usd: actual.plus(num(state.budget_spent_usd) ?? 0).toNumber(),
  };
  const remaining = num(state.budget_remaining_usd);
  if (remaining !== undefined) {
    next.budget_remaining_usd = Decimal.max(0, estimate.plus(remaining).minus(actual)).toNumber();
  }
  return next;
}
