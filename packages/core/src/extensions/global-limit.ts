// Extension guard (spec §5.2 max_total_calls): a session-wide cap on allowed calls.
// Counts only what feedback recorded in `total_calls`; 0 or absent disables it.

import type { DecideContext } from "../checkers/context.js";
import { deny } from "../decision.js";
import { num } from "../util/values.js";

const GLOBAL = deny("global_limit");

export function checkGlobalLimit(ctx: DecideContext) {
  const max = num(ctx.config.max_total_calls);
  if (max === undefined || !(max > 0)) return null;
  return (num(ctx.state.total_calls) ?? 0) >= max ? GLOBAL : null;
}
