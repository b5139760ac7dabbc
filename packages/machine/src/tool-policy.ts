// The guard config's `denied_tools`: tools a session may never run, checked by the engine (the certified
// decide() is silent on them). It names the verdict; the engine and the replay apply it at the same step.
import type { Call, Config } from "@leash/core";
import type { EngineDecision, EngineReason } from "./reasons.js";

/** A denied tool: recorded and counted, but no circuit trip (the model may go on with allowed tools). */
export const TOOL_DENIED: EngineDecision & { reason: EngineReason } = {
  verdict: "DENY",
  reason: "policy_violation:tool_denied",
};

/**
 * decide()'s verdict, unless the call's tool is in `denied_tools`: then DENY tool_denied. A DENY of
 * decide() stands (an open circuit, a replayed nonce: the session's own stops keep their reason and effect).
 */
export function denyListed(decision: EngineDecision, config: Config, call: Call): EngineDecision {
  if (decision.verdict === "DENY") return decision;
  const denied = config.denied_tools;
  return Array.isArray(denied) && denied.includes(call.tool_name) ? TOOL_DENIED : decision;
}
