// Extension guard (spec §5.2 timeout_seconds): a session older than its wall-clock limit is denied.
// Time comes in as `inputs.nowNs`; without it (or a start time) a configured timeout fails closed.

import type { DecideContext } from "../checkers/context.js";
import { deny } from "../decision.js";
import { num } from "../util/values.js";

const TIMEOUT = deny("timeout");

export function checkTimeout(ctx: DecideContext) {
  const seconds = num(ctx.config.timeout_seconds);
  if (seconds === undefined || !(seconds > 0)) return null;
  const now = num(ctx.inputs.nowNs);
  const started = num(ctx.state.session_started_ns);
  if (now === undefined) return TIMEOUT;
  if (started === undefined) return null; // the first call starts the clock
  return now - started >= seconds * 1e9 ? TIMEOUT : null;
}
