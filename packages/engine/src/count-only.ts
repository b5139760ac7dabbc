// The engine's own verdicts that count the call and change nothing else: no feedback, no circuit trip,
// an approval left unspent. One list, so the engine and the replay (@leash/recovery) apply the same rule.
import { type EngineDecision, PARAMS_HASH_MISMATCH, TOOL_MISMATCH } from "./hitl-binding.js";
import { PARAMS_TOO_LARGE } from "./params-cap.js";
import { isPolicyReason } from "./policy-layer.js";
import { TOOL_DENIED } from "./tool-policy.js";

const COUNT_ONLY: ReadonlySet<EngineDecision> = new Set([
  TOOL_MISMATCH,
  PARAMS_HASH_MISMATCH,
  TOOL_DENIED,
  PARAMS_TOO_LARGE,
]);

/**
 * True for a verdict after which the session's state is the one decide() saw, the call count aside. A
 * policy rule's DENY is one (as a denied tool: the circuit stays closed); its HITL pauses the session.
 */
export function countsOnly(decision: EngineDecision): boolean {
  return COUNT_ONLY.has(decision) || (decision.verdict === "DENY" && isPolicyReason(decision.reason));
}
