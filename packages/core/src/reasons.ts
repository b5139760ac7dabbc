// The reason vocabulary as values: the certified §3.5 strings and Leash's extension reasons.
// Documentation of when each fires lives in the README's reason table; no logic here.
import type { CertifiedReason, ExtensionDenyReason, Reason } from "./types.js";

export const CERTIFIED_REASONS: readonly CertifiedReason[] = [
  "within_thresholds",
  "circuit_open",
  "budget_exhausted",
  "budget_overrun",
  "max_repeat_exceeded",
  "policy_violation:malformed_input",
  "policy_violation:duplicate_nonce",
  "policy_violation:duplicate_resume_no_effect",
  "hitl_transition:approve",
  "hitl_transition:modify_successor",
  "hitl_transition:reject",
  "hitl_transition:superseded_original",
  "hitl_transition:terminal_no_effect",
  "hitl_transition:nonce_mismatch",
  "hitl_transition:digest_mismatch",
  "hitl_transition:unbound_authorization",
  "hitl_transition:unknown_decision",
  "hitl_transition:defer_escalate",
  "hitl_all_calls",
  "budget_threshold",
  "fail_closed:opaque_context",
];

export const EXTENSION_DENY_REASONS: readonly ExtensionDenyReason[] = [
  "timeout",
  "global_limit",
  "window_exceeded",
  "error_amplified_repeat",
  "probabilistic_deny",
];

export const ALL_REASONS: readonly Reason[] = [
  ...CERTIFIED_REASONS,
  ...EXTENSION_DENY_REASONS,
  ...EXTENSION_DENY_REASONS.map((r) => `hitl_on_deny:${r}` as const),
];

/** Terminal statuses of a pending transition (DESIGN.md §4); nothing else is terminal. */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set([
  "rejected",
  "superseded",
  "consumed",
  "executed",
  "expired",
  "revoked",
  "cancelled",
]);
