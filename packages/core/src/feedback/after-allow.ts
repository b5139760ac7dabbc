// State after an ALLOW (spec §5.3): counters, nonce, repeat and window counts, last tool, reservation.
// Pure: returns a new State; the estimated cost is held back from `remaining` until post-exec settles it.
import { Decimal } from "decimal.js";
import { windowConfigured, windowExpired } from "../extensions/time-window.js";
import type { Call, Config, Nonce, State } from "../types.js";
import { isRecord, num, present, rec } from "../util/values.js";
import type { FeedbackInputs } from "./inputs.js";

export function afterAllow(config: Config, state: State, call: Call, inputs: FeedbackInputs): State {
  const next: State = { ...state };
  const tool = call.tool_name;
  const hash = inputs.paramsHash ?? null;
  const now = inputs.nowNs;

  next.total_calls = (num(state.total_calls) ?? 0) + 1;
  if (present(call.nonce)) next.seen_nonces = [...(state.seen_nonces ?? []), call.nonce as Nonce];

  // Consecutive identical calls (same tool, same argument digest) count up; anything else restarts at 1.
  const identical = state.last_tool_name === tool && hash !== null && state.last_tool_params_hash === hash;
  const previous = isRecord(state.repeat_counts) ? (num(state.repeat_counts[tool]) ?? 0) : 0;
  next.repeat_counts = { [tool]: identical ? previous + 1 : 1 };

  if (windowConfigured(rec(config))) {
    if (windowExpired(rec(config), rec(state), now)) {
      next.window_start_ns = now;
      next.window_counts = { [tool]: 1 };
    } else {
      const counts = isRecord(state.window_counts) ? state.window_counts : {};
      next.window_counts = { ...counts, [tool]: (num(counts[tool]) ?? 0) + 1 };
    }
  }

  next.last_tool_name = tool;
  next.last_tool_params_hash = hash;
  next.last_activity_ns = now;
  if (!present(state.session_started_ns)) next.session_started_ns = now;

  const estimate = num(call.estimated_cost_usd) ?? 0;
  const remaining = num(state.budget_remaining_usd);
  if (estimate > 0 && remaining !== undefined) {
    // Exact decimal arithmetic on the shortest decimal forms: 1,000 × 0.001 reaches exactly 0.
    next.budget_remaining_usd = Decimal.max(0, new Decimal(remaining).minus(estimate)).toNumber();
  }

  // A released human decision is single-use: once consumed it no longer gates the session.
  if (present(state.pending_transition)) {
    next.pending_transition = null;
    next.pending_request = null;
    next.status = "ACTIVE";
  }
  return next;
}
