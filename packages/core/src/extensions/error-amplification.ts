// Extension guard (spec §3.9): when the call (or the error its previous result reported, an input
// the runtime records) carries an error signal, the repeat limit is one lower. Off unless configured.

import type { DecideContext } from "../checkers/context.js";
import { repeatCount } from "../checkers/rule-06-repeat.js";
import { deny } from "../decision.js";
import { num, truthy } from "../util/values.js";
import { hasErrorSignal } from "./error-signals.js";

const AMPLIFIED = deny("error_amplified_repeat");

export function checkErrorAmplification(ctx: DecideContext) {
  if (!truthy(ctx.config.error_amplification)) return null;
  const max = num(ctx.config.max_repeat_calls);
  if (max === undefined || !(max > 0)) return null;
  const count = repeatCount(ctx);
  if (count === undefined || count < Math.max(1, max - 1)) return null;
  // The retried call's arguments rarely name the failure; the result that failed does (a 401 body).
  const errorText = ctx.inputs.errorText;
  const signalled =
    hasErrorSignal(ctx.params) || (typeof errorText === "string" && hasErrorSignal(errorText));
  return signalled ? AMPLIFIED : null;
}
