// Rule 5b: a call whose estimate exceeds the PRE-call remaining budget is denied before any spend.
// An estimate that is present but not a finite number cannot be trusted, so it overruns (fail closed).
import { deny } from "../decision.js";
import { num, present } from "../util/values.js";
import type { DecideContext } from "./context.js";

const OVERRUN = deny("budget_overrun");

export function checkBudgetOverrun(ctx: DecideContext) {
  const budget = num(ctx.config.budget_usd);
  if (budget === undefined || !(budget > 0)) return null;
  const remaining = num(ctx.state.budget_remaining_usd);
  if (remaining === undefined) return null;
  const raw = ctx.call.estimated_cost_usd;
  if (!present(raw)) return null;
  const estimate = num(raw);
  if (estimate === undefined) return OVERRUN;
  // For finite doubles `remaining - estimate < 0` has the same truth as `estimate > remaining`.
  return estimate > 0 && estimate > remaining ? OVERRUN : null;
}
