// Rule 6: the same tool called again after `max_repeat_calls` consecutive identical calls is denied.
// It reads the count the runtime supplies; counting is feedback's job. Absent or 0 disables (§5.2).
import { deny } from "../decision.js";
import type { Decision } from "../types.js";
import { nonEmpty, num } from "../util/values.js";
import type { DecideContext } from "./context.js";

const REPEAT = deny("max_repeat_exceeded");

/** The current repeat count for this call's tool, when the repeat rule's preconditions hold. */
export function repeatCount(ctx: DecideContext): number | undefined {
  const counts = ctx.state.repeat_counts;
  if (!nonEmpty(counts)) return undefined;
  const last = ctx.state.last_tool_name;
  const tool = ctx.call.tool_name;
  if (typeof last !== "string" || last === "" || last !== tool) return undefined;
  return num(counts[last]);
}

export function checkRepeat(ctx: DecideContext): Decision | null {
  const max = num(ctx.config.max_repeat_calls);
  if (max === undefined || !(max > 0)) return null;
  const count = repeatCount(ctx);
  return count !== undefined && count >= max ? REPEAT : null;
}
