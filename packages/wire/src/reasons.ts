// Verdicts and reasons between @leash/core's strings and the proto's enums (PreExecResponse fields 3, 4).
// The exact reason string (field 100) is authoritative; these enums are the spec's coarse view.

import type { Verdict as CoreVerdict } from "@leash/core";
import { DenyReason, Verdict } from "./gen/shackle/sp1/shackle_pb.js";

const DENY_REASONS: Readonly<Record<string, DenyReason>> = {
  within_thresholds: DenyReason.NONE,
  "hitl_transition:approve": DenyReason.NONE,
  "hitl_transition:modify_successor": DenyReason.NONE,
  circuit_open: DenyReason.CIRCUIT_OPEN,
  budget_exhausted: DenyReason.BUDGET_EXHAUSTED,
  budget_overrun: DenyReason.BUDGET_OVERRUN,
  max_repeat_exceeded: DenyReason.MAX_REPEAT_EXCEEDED,
  "policy_violation:malformed_input": DenyReason.MALFORMED_INPUT,
  "policy_violation:duplicate_nonce": DenyReason.DUPLICATE_NONCE,
  "policy_violation:duplicate_resume_no_effect": DenyReason.DUPLICATE_RESUME_NO_EFFECT,
  "hitl_transition:reject": DenyReason.HITL_REJECT,
  "hitl_transition:superseded_original": DenyReason.HITL_SUPERSEDED_ORIGINAL,
  "hitl_transition:terminal_no_effect": DenyReason.HITL_TERMINAL_NO_EFFECT,
  "hitl_transition:nonce_mismatch": DenyReason.HITL_NONCE_MISMATCH,
  "hitl_transition:digest_mismatch": DenyReason.HITL_DIGEST_MISMATCH,
  "hitl_transition:unbound_authorization": DenyReason.HITL_UNBOUND_AUTHORIZATION,
  "hitl_transition:unknown_decision": DenyReason.HITL_UNKNOWN_DECISION,
  "hitl_transition:defer_escalate": DenyReason.HITL_DEFER_ESCALATE,
  hitl_all_calls: DenyReason.HITL_ALL_CALLS,
  budget_threshold: DenyReason.BUDGET_THRESHOLD,
  "fail_closed:opaque_context": DenyReason.OPAQUE_CONTEXT,
  window_exceeded: DenyReason.WINDOW_EXCEEDED,
  global_limit: DenyReason.GLOBAL_LIMIT,
  timeout: DenyReason.TIMEOUT,
  error_amplified_repeat: DenyReason.ERROR_AMPLIFIED_REPEAT,
  // §3.10: a probabilistic denial must look like a real exhaustion on the wire.
  probabilistic_deny: DenyReason.BUDGET_EXHAUSTED,
  "hitl_transition:tool_mismatch": DenyReason.HITL_TOOL_MISMATCH,
  "policy_violation:params_hash_mismatch": DenyReason.PARAMS_HASH_MISMATCH,
  "policy_violation:tool_denied": DenyReason.TOOL_DENIED,
};

/**
 * The DenyReason for a reason string (§3.5, or a Leash extension reason); "hitl_on_deny:<r>" maps
 * to <r>'s value. A reason this table does not know is OTHER, never NONE.
 */
export function denyReasonFor(reason: string): DenyReason {
  const inner = reason.startsWith("hitl_on_deny:") ? reason.slice("hitl_on_deny:".length) : reason;
  return Object.hasOwn(DENY_REASONS, inner) ? DENY_REASONS[inner]! : DenyReason.OTHER;
}

/** The proto Verdict of a core verdict string. */
export function verdictToWire(verdict: CoreVerdict): Verdict {
  return verdict === "ALLOW" ? Verdict.ALLOW : verdict === "HITL" ? Verdict.HITL : Verdict.DENY;
}

/**
 * The core verdict a received Verdict means: UNSPECIFIED, or a value this version does not know,
 * is DENY (fail closed; shackle.proto Verdict).
 */
export function verdictFromWire(verdict: Verdict): CoreVerdict {
  return verdict === Verdict.ALLOW ? "ALLOW" : verdict === Verdict.HITL ? "HITL" : "DENY";
}
