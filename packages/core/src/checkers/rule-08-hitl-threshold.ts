// Rule 8: in `on_threshold` mode, a remaining/initial budget ratio at or below the threshold asks a human.
// Needs a threshold and a non-zero initial budget; a missing remaining counts as 0 (docs/architecture.md §4).
import { hitl } from "../decision.js";
import { norm, num } from "../util/values.js";
import type { DecideContext } from "./context.js";

const THRESHOLD = hitl("budget_threshold");

export function checkHitlThreshold(ctx: DecideContext) {
  if (norm(ctx.config.hitl_mode) !== "on_threshold") return null;
  const threshold = num(ctx.config.hitl_budget_threshold);
  const initial = num(ctx.state.budget_initial_usd);
  if (threshold === undefined || initial === undefined || initial === 0) return null;
  const remaining = num(ctx.state.budget_remaining_usd) ?? 0;
  return remaining / initial <= threshold ? THRESHOLD : null;
}
