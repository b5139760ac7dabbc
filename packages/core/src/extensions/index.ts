// The extension guards, in their fixed order after rule 6 and before rule 7, plus `hitl_mode: on_deny`.
// None is certified by SP/1.0; each is off unless configured, so certified vectors are untouched.
import type { DecideContext } from "../checkers/context.js";
import { hitl } from "../decision.js";
import { EXTENSION_DENY_REASONS } from "../reasons.js";
import type { Decision, ExtensionDenyReason } from "../types.js";
import { norm } from "../util/values.js";
import { checkErrorAmplification } from "./error-amplification.js";
import { checkGlobalLimit } from "./global-limit.js";
import { checkProbabilisticDeny } from "./probabilistic-deny.js";
import { checkTimeWindow } from "./time-window.js";
import { checkTimeout } from "./timeout.js";

export { ERROR_SIGNALS, hasErrorSignal } from "./error-signals.js";
export { denyProbability } from "./probabilistic-deny.js";
export { windowConfigured, windowExpired } from "./time-window.js";

const ON_DENY = new Map<string, Decision>(EXTENSION_DENY_REASONS.map((r) => [r, hitl(`hitl_on_deny:${r}`)]));

export function checkExtensions(ctx: DecideContext): Decision | null {
  const denied =
    checkTimeout(ctx) ??
    checkGlobalLimit(ctx) ??
    checkTimeWindow(ctx) ??
    checkErrorAmplification(ctx) ??
    checkProbabilisticDeny(ctx);
  if (denied === null) return null;
  // on_deny escalates only the extension guards' denials: rules 1–6 keep their certified verdicts.
  if (norm(ctx.config.hitl_mode) === "on_deny") return ON_DENY.get(denied.reason as ExtensionDenyReason)!;
  return denied;
}
