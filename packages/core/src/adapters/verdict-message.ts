// The words a model reads when Leash stops a tool call: verdict, reason code and what to do next.
// Shared by the framework adapters so every framework says it alike; it decides nothing.
import type { DeciderVerdict } from "./decider.js";

/** What each reason means to an agent that wants to carry on, in one clause. */
const PLAIN: Readonly<Record<string, string>> = {
  circuit_open: "this session's circuit breaker is open after earlier failures; an operator must reset it",
  budget_exhausted: "the session's budget is spent",
  budget_overrun: "the call would cost more than the budget has left",
  max_repeat_exceeded: "the same call with the same arguments was repeated too many times",
  "policy_violation:malformed_input": "the tool name or arguments are malformed",
  "policy_violation:duplicate_nonce": "this exact dispatch was already decided (a replay)",
  "policy_violation:missing_estimate": "the call has no cost estimate and the session has a budget",
  "policy_violation:invalid_estimate": "the call's cost estimate is not a valid amount",
  "policy_violation:params_hash_mismatch": "the arguments do not match their digest",
  "policy_violation:tool_denied": "this tool is not allowed in this session (denied_tools)",
  "policy_violation:params_too_large": "the arguments are larger than this session allows (max_params_bytes)",
  "hitl_transition:reject": "a human rejected this call",
  "hitl_transition:tool_mismatch": "the approval was for another tool",
  "hitl_transition:nonce_mismatch": "the approval was for another dispatch",
  "hitl_transition:digest_mismatch": "the approval was for other arguments",
  hitl_all_calls: "every call in this session needs a human's approval",
  budget_threshold: "the call's cost needs a human's approval",
  "fail_closed:opaque_context": "the arguments carry context Leash cannot inspect",
  "fail_closed:chain_unverified": "Leash's audit log does not verify, so nothing is allowed",
  timeout: "the session ran past its time limit",
  global_limit: "the session made too many calls in total",
  window_exceeded: "too many calls of this tool in the current time window",
  error_amplified_repeat: "the call keeps failing the same way",
  probabilistic_deny: "calls after repeated errors are being shed",
};

const plainOf = (reason: string): string | null => {
  const direct = PLAIN[reason];
  if (direct !== undefined) return direct;
  if (reason.startsWith("hitl_on_deny:")) return `a human must decide (${PLAIN[reason.slice(13)] ?? reason})`;
  if (reason.startsWith("fail_closed:")) return "Leash could not get a verdict it can trust, so it refused";
  return null;
};

/**
 * One line for the model: `Leash denied search: <plain words> (max_repeat_exceeded). Do not retry …`.
 * DENY says not to retry unchanged; HITL says a human has to answer first (with the request id when known).
 */
export function verdictMessage(toolName: string, verdict: DeciderVerdict, requestId?: string | null): string {
  const plain = plainOf(verdict.reason);
  const why = plain === null ? verdict.reason : `${plain} (${verdict.reason})`;
  if (verdict.verdict === "HITL") {
    const request = requestId ? ` Request ${requestId}` : " The request";
    return `Leash paused ${toolName}: ${why}; the tool did not run.${request} waits for a human's decision.`;
  }
  return `Leash denied ${toolName}: ${why}; the tool did not run. Do not retry the same call unchanged.`;
}
