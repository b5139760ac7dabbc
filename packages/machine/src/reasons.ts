// The verdicts the state machine gives beyond SP/1.0's decide(): their reasons and their constants, once.
// Names only; which step gives which verdict is evaluate.ts's.
import type { Reason, Verdict } from "@leash/core";

/**
 * Reasons the engine gives for checks the certified decide() is silent on (the README lists them with
 * the extension reasons); decide() itself never returns them. `fail_closed:chain_unverified`: the
 * store's audit chain does not verify, so nothing is decided and nothing is appended.
 */
export type EngineReason =
  | "fail_closed:chain_unverified"
  // A row the call needs is not the one the chain signed (engine/src/state-auth.ts): nothing decided or appended.
  | "fail_closed:state_unverified"
  | "hitl_transition:tool_mismatch"
  | "policy_violation:missing_estimate"
  | "policy_violation:invalid_estimate"
  | "policy_violation:params_hash_mismatch"
  | "policy_violation:tool_denied"
  | "policy_violation:params_too_large"
  | "hitl_timeout"
  // The policy layer's (the engine's policy-layer.ts): the rule that refused or asked for a human.
  | `policy_violation:rule:${string}`
  | `policy_hitl:rule:${string}`
  | `policy_error:rule:${string}`
  | "policy_violation:default_deny";

/** A verdict as the engine returns it: decide()'s, or one of the engine's own reasons. */
export interface EngineDecision {
  readonly verdict: Verdict;
  readonly reason: Reason | EngineReason;
}

/** A tool name or nonce that cannot be evaluated or recorded (call-input.ts): nothing of it is stored. */
export const MALFORMED: EngineDecision = { verdict: "DENY", reason: "policy_violation:malformed_input" };

/** An estimate beyond the money range: more than any budget holds. */
export const OVERRUN: EngineDecision = { verdict: "DENY", reason: "budget_overrun" };
