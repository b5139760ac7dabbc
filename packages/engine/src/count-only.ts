// The engine's own verdicts that count the call and change nothing else (the state machine's list,
// @leash/machine), with the policy layer's reasons: the form @leash/engine has always exported.
import { type EngineDecision, countsOnly as machineCountsOnly } from "@leash/machine";
import { isPolicyReason } from "./policy-layer.js";

/** True for a verdict after which the session's state is the one decide() saw, the call count aside. */
export function countsOnly(decision: EngineDecision): boolean {
  return machineCountsOnly(decision, isPolicyReason);
}
