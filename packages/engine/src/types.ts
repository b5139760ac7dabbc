// The engine's public request and result shapes (library mode, spec Model A).
// Plain data; the wire package maps them onto SP/1.0 messages.
import type { Signer } from "@leash/chain";
import type {
  Clock,
  Config,
  Nonce,
  Reason,
  Rng,
  SessionStatus,
  State,
  Substrate,
  Verdict,
} from "@leash/core";

export interface EngineOptions {
  substrate: Substrate;
  /** Signs every audit chain entry (and so every receipt). See @leash/chain loadSigningKey / generateKeyPair. */
  signer: Signer;
  clock?: Clock;
  rng?: Rng;
  /** How long an ALLOW's budget hold lives without a postExec before recovery releases it. Default 300 s. */
  reservationTtlMs?: number;
  /** New ids (sessions, HITL requests). Default crypto.randomUUID. */
  newId?: () => string;
}

export interface RegisterRequest {
  agent_id: string;
  organization_id?: string;
  /** Resume or name a session; a new random id when absent. */
  session_id?: string;
  config: Config;
}

export interface EvaluateRequest {
  session_id: string;
  tool_name: string;
  params?: Record<string, unknown> | null;
  /** Per-dispatch replay token; never derived from the call's content (spec §3.2 rule 3). */
  nonce?: Nonce | null;
  estimated_cost_usd?: number;
  /**
   * The digest (64 hex) the caller says `params` has (a daemon passes the agent's tool_params_hash).
   * When given and it is not the engine's own canonical digest of `params`, the call is DENY
   * "policy_violation:params_hash_mismatch": the agent and the daemon do not agree on what it runs.
   */
  expected_params_hash?: string;
}

/**
 * Reasons the engine gives for checks the certified decide() is silent on (the README lists them with
 * the extension reasons); decide() itself never returns them.
 */
export type EngineReason = "hitl_transition:tool_mismatch" | "policy_violation:params_hash_mismatch";

export interface EvaluateResult {
  session_id: string;
  call_number: number;
  verdict: Verdict;
  reason: Reason | EngineReason;
  /** What the budget chain allows after this call (decimal string), or null when no budget is set. */
  budget_remaining_usd: string | null;
  /** The hold placed for an ALLOW under a budget; settle it with postExec. */
  reservation_id: string | null;
  /** The random number probabilistic denial used, when it was consulted (recorded for audit). */
  rng: number | null;
  params_hash: string | null;
  /** The decision's audit chain entry: its position and hash. */
  entry_seq: number;
  entry_hash: string;
  /** A compact JWS (EdDSA) of the entry, verifiable offline with the public key (@leash/receipts). */
  receipt: string;
}

export interface PostExecRequest {
  session_id: string;
  call_number: number;
  actual_cost_usd: number | string;
  success?: boolean;
  /** A retried postExec with the same key is a no-op. Default: derived from session and call number. */
  idempotency_key?: string;
}

export interface PostExecResult {
  session_id: string;
  call_number: number;
  actual_usd: string;
  overrun_usd: string;
  budget_remaining_usd: string | null;
  replayed: boolean;
}

export interface SessionView {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: SessionStatus;
  config: Config;
  state: State;
  call_count: number;
  budget_remaining_usd: string | null;
}

export type HumanDecision = "approve" | "reject" | "modify" | "defer" | "escalate";

export interface ResumeRequest {
  session_id: string;
  /** One of the five, compared trimmed and lowercased; anything else is refused and records nothing. */
  decision: HumanDecision;
  operator_id: string;
  /** For `modify`: the edited call the human allows instead (nonce + its canonical args digest). */
  successor?: { nonce: Nonce; args_digest: string };
  /**
   * The request the human answers (the session's `state.pending_request.request_id`). Given, the
   * answer lands on that request or nowhere; absent, on the session's open request.
   */
  request_id?: string;
}
