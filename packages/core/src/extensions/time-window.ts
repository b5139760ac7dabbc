// Extension guard (spec §5.1/§5.2): at most `window_max_calls` calls per tool per `window_duration_s`.
// A window older than its duration counts as empty; without `inputs.nowNs` a configured window fails closed.

import type { DecideContext } from "../checkers/context.js";
import { deny } from "../decision.js";
import { isRecord, num } from "../util/values.js";

const WINDOW = deny("window_exceeded");

/** True when a window is configured and `nowNs` is past its end (or no window was opened yet). */
export function windowExpired(
  config: Record<string, unknown>,
  state: Record<string, unknown>,
  nowNs: number,
) {
  const duration = num(config.window_duration_s) ?? 0;
  const start = num(state.window_start_ns);
  return start === undefined || nowNs - start >= duration * 1e9;
}

export function windowConfigured(config: Record<string, unknown>) {
  const duration = num(config.window_duration_s);
  const max = num(config.window_max_calls);
  return duration !== undefined && duration > 0 && max !== undefined && max > 0;
}

export function checkTimeWindow(ctx: DecideContext) {
  if (!windowConfigured(ctx.config)) return null;
  const now = num(ctx.inputs.nowNs);
  if (now === undefined) return WINDOW;
  if (windowExpired(ctx.config, ctx.state, now)) return null;
  const counts = ctx.state.window_counts;
  const tool = ctx.call.tool_name;
  const count = isRecord(counts) && typeof tool === "string" ? (num(counts[tool]) ?? 0) : 0;
  return count >= (num(ctx.config.window_max_calls) as number) ? WINDOW : null;
}
