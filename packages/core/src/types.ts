// The data types of the SP/1.0 decision surface: config, state, call, verdict, reason.
// Field names are the spec's snake_case JSON names; no behaviour lives here.

/** The three verdicts of SP/1.0 §3.4. */
export type Verdict = "ALLOW" | "DENY" | "HITL";

/** The certified reason vocabulary of SP/1.0 §3.5, exactly. */
export type CertifiedReason =
  | "within_thresholds"
  | "circuit_open"
  | "budget_exhausted"
  | "budget_overrun"
  | "max_repeat_exceeded"
  | "policy_violation:malformed_input"
  | "policy_violation:duplicate_nonce"
  | "policy_violation:duplicate_resume_no_effect"
  | "hitl_transition:approve"
  | "hitl_transition:modify_successor"
  | "hitl_transition:reject"
  | "hitl_transition:superseded_original"
  | "hitl_transition:terminal_no_effect"
  | "hitl_transition:nonce_mismatch"
  | "hitl_transition:digest_mismatch"
  | "hitl_transition:unbound_authorization"
  | "hitl_transition:unknown_decision"
  | "hitl_transition:defer_escalate"
  | "hitl_all_calls"
  | "budget_threshold"
  | "fail_closed:opaque_context";

/** DENY reasons of Leash's extension guards (spec §3.7, §3.9, §3.10, §5.2); not certified. */
export type ExtensionDenyReason =
  | "timeout"
  | "global_limit"
  | "window_exceeded"
  | "error_amplified_repeat"
  | "probabilistic_deny";

/** With `hitl_mode: "on_deny"`, an extension guard's DENY becomes HITL with this reason. */
export type HitlOnDenyReason = `hitl_on_deny:${ExtensionDenyReason}`;

export type Reason = CertifiedReason | ExtensionDenyReason | HitlOnDenyReason;

/** What `decide` returns. */
export interface Decision {
  readonly verdict: Verdict;
  readonly reason: Reason;
}

export type HitlMode = "never" | "on_deny" | "on_threshold" | "always";
export type BudgetScope = "session" | "agent" | "organization";

/**
 * Guard configuration (spec §5.2 GuardConfig, JSON names). Every field is optional;
 * an absent or zero limit is disabled. `decide` accepts any value here and never
 * throws; schema validation belongs to the edges (files, CLI, wire).
 */
export interface Config {
  budget_usd?: number;
  budget_scope?: BudgetScope;
  max_repeat_calls?: number;
  error_amplification?: boolean;
  timeout_seconds?: number;
  window_duration_s?: number;
  window_max_calls?: number;
  max_total_calls?: number;
  probabilistic_deny?: boolean;
  deny_jitter_ratio?: number;
  hitl_mode?: HitlMode;
  hitl_budget_threshold?: number;
  /** How long a HITL request waits for a human before it expires (a DENY `hitl_timeout`). The engine's; default 900. */
  hitl_timeout_s?: number;
  parent_guard_id?: string;
  /**
   * The estimate a budgeted call without `estimated_cost_usd` is held at (a number or exact
   * decimal text); without it (or a per-tool one) such a call is denied. The engine's, not decide's.
   */
  default_estimate_usd?: number | string;
  /** Per-tool estimates by tool name, ahead of `default_estimate_usd`. */
  tool_estimates_usd?: Record<string, number | string>;
  /**
   * Tools this session may never run: a call to one is DENY `policy_violation:tool_denied`, recorded
   * and counted without tripping the circuit. The engine's, not decide's.
   */
  denied_tools?: readonly string[];
  /**
   * The largest params a call may carry, in bytes of their canonical JSON (UTF-8); default 262144
   * (256 KiB). A call over it is DENY `policy_violation:params_too_large`, recorded without the
   * params, counted, and nothing held. The engine's, not decide's.
   */
  max_params_bytes?: number;
}

export type Nonce = string | number;

/** A human's decision on a paused call (spec §3.6). */
export interface PendingTransition {
  decision?: string;
  original_nonce?: Nonce | null;
  original_args_digest?: string | null;
  successor_nonce?: Nonce | null;
  successor_args_digest?: string | null;
  terminal_status?: string | null;
  resume_attempt?: boolean;
}

/** A call that HITL paused, waiting for a human (recorded by feedback). */
export interface PendingRequest {
  nonce: Nonce | null;
  args_digest: string | null;
  tool_name: string;
  reason: Reason;
}

export type SessionStatus = "ACTIVE" | "PAUSED" | "TERMINATED" | "STALE";

/** Session state (spec §5.1, JSON names), as `decide` reads it and `feedback` writes it. */
export interface State {
  status?: SessionStatus;
  circuit_tripped?: boolean;
  circuit_trip_reason?: string | null;
  circuit_tripped_at_ns?: number | null;
  seen_nonces?: Nonce[];
  budget_initial_usd?: number;
  budget_remaining_usd?: number;
  budget_spent_usd?: number;
  total_calls?: number;
  repeat_counts?: Record<string, number>;
  window_counts?: Record<string, number>;
  window_start_ns?: number | null;
  last_tool_name?: string | null;
  last_tool_params_hash?: string | null;
  last_activity_ns?: number | null;
  session_started_ns?: number | null;
  pending_transition?: PendingTransition | null;
  pending_request?: PendingRequest | null;
}

/** A proposed tool call (spec §4.3, JSON names). */
export interface Call {
  tool_name: string;
  params?: Record<string, unknown> | null;
  nonce?: Nonce | null;
  estimated_cost_usd?: number;
}

/**
 * What the runtime passes in for the extension guards: `decide` itself has no clock
 * and no randomness (P2). `nowNs` feeds the time window and timeout guards; `rng`
 * (a number in [0, 1)) feeds probabilistic denial and is recorded by the runtime.
 * `errorText` is the error the runtime saw in this tool's previous result (an MCP `isError`
 * result, a failed post_exec): error amplification (§3.9) searches it as it searches params.
 */
export interface DecideInputs {
  nowNs?: number;
  rng?: number;
  errorText?: string;
  /**
   * SHA-256 of a string's UTF-8 bytes as lowercase hex, for the argument digest (rule 4). A runtime
   * may pass a native one (node:crypto); absent, core's own pure implementation is used. It must be
   * a correct SHA-256: decide() trusts it as it trusts its own.
   */
  sha256Hex?: (text: string) => string;
  /**
   * The same SHA-256 over bytes (canonical JSON already written as UTF-8), preferred to `sha256Hex`
   * when both are given: it saves decoding the text and re-encoding it. Same correctness duty.
   */
  sha256HexOfBytes?: (bytes: Uint8Array) => string;
}
