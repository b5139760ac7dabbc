// Rule 5: with a budget configured, a remaining budget at or below zero denies every call.
// A present but non-numeric remaining cannot be evaluated, so it counts as exhausted (fail closed).
import { deny } from "../decision.js";
import { num, present } from "../util/values.js";
import type { DecideContext } from "./context.js";

const EXHAUSTED = deny("budget_exhausted");

export function checkBudgetExhausted(ctx: DecideContext) {
  const budget = num(ctx.config.budget_usd);
  if (budget === undefined || !(budget > 0)) return null;
  const raw = ctx.state.budget_remaining_usd;
  if (!present(raw)) return null;
  const remaining = num(raw);
  return remaining === undefined || remaining <= 0 ? EXHAUSTED : null;
}
