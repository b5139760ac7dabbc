// The engine's own verdicts that count the call and change nothing else: no feedback, no circuit trip,
// an approval left unspent. One list, for the live engine and the replay alike.
import { PARAMS_HASH_MISMATCH, TOOL_MISMATCH } from "./hitl-binding.js";
import { PARAMS_TOO_LARGE } from "./params-cap.js";
import type { EngineDecision } from "./reasons.js";
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
 * `isPolicyReason` is the policy layer's (the engine's policy-layer.ts).
 */
export function countsOnly(decision: EngineDecision, isPolicyReason: (reason: string) => boolean): boolean {
  return COUNT_ONLY.has(decision) || (decision.verdict === "DENY" && isPolicyReason(decision.reason));
}
