// What ties a human's approval to the one call it paused, beyond SP/1.0's (nonce, args digest): the tool,
// the session and the request. It checks and names; it reads no store and never widens what decide() allows.
import type {
  Call,
  Decision,
  HitlRequest,
  Nonce,
  PendingRequest,
  PendingTransition,
  State,
} from "@leash/core";
import type { EngineDecision, EngineReason } from "./reasons.js";

export type { EngineDecision } from "./reasons.js";

/** The released call is another tool than the paused one: denied, and the approval is left unspent. */
export const TOOL_MISMATCH: EngineDecision & { reason: EngineReason } = {
  verdict: "DENY",
  reason: "hitl_transition:tool_mismatch",
};

/**
 * The caller's digest of the params is not the engine's: denied like a tool mismatch (the call is
 * counted, the circuit and any approval are left as they were), since the call itself was never judged.
 */
export const PARAMS_HASH_MISMATCH: EngineDecision & { reason: EngineReason } = {
  verdict: "DENY",
  reason: "policy_violation:params_hash_mismatch",
};

/**
 * The paused call as the session's state keeps it (`pending_request`): decide()'s fields plus the
 * request that asked the human and its call number, so the answer and its use name one request.
 */
export interface BoundRequest extends PendingRequest {
  request_id: string;
  call_number: number;
  /** When the request stops waiting (so evaluate knows without reading the request). */
  expires_ns?: number | null;
  /** It expired unanswered: the session's next call of the tool is told DENY hitl_timeout. */
  expired?: boolean;
}

export function boundRequest(request: HitlRequest): BoundRequest {
  return {
    nonce: request.nonce,
    args_digest: request.args_digest,
    tool_name: request.tool_name,
    reason: request.reason,
    request_id: request.request_id,
    call_number: request.call_number,
    expires_ns: request.expires_ns,
  };
}

/** The engine's DENY for the call whose request expired unanswered (told once, then forgotten). */
export const HITL_TIMEOUT: EngineDecision & { reason: EngineReason } = {
  verdict: "DENY",
  reason: "hitl_timeout",
};

const RELEASED = new Set<string>(["hitl_transition:approve", "hitl_transition:modify_successor"]);

/** decide() released a human's approval (or its modified successor) to this call. */
export const releasesApproval = (decision: EngineDecision): boolean => RELEASED.has(decision.reason);

/**
 * decide() binds a release to the nonce and digest only; the engine also requires the paused call's
 * tool. A state without a paused tool to compare with fails closed. Everything read here is in the
 * state the decision entry records, so the verdict can still be re-derived from the log.
 */
export function bindToPausedTool(decision: Decision, state: State, call: Call): EngineDecision {
  if (!releasesApproval(decision)) return decision;
  const paused = state.pending_request;
  const tool = paused === null || typeof paused !== "object" ? undefined : paused.tool_name;
  return typeof tool === "string" && tool === call.tool_name ? decision : TOOL_MISMATCH;
}

/** The request a released approval answers, when the state names it (states written before it did, do not). */
export function boundRequestId(state: State): string | null {
  const paused = state.pending_request as Partial<BoundRequest> | null | undefined;
  return typeof paused?.request_id === "string" ? paused.request_id : null;
}

/** The session's paused call as its state names it, when it names a request (states before did not). */
export function pausedOf(state: State): BoundRequest | null {
  const paused = state.pending_request as Partial<BoundRequest> | null | undefined;
  return typeof paused?.request_id === "string" ? (paused as BoundRequest) : null;
}

export const hasTransition = (state: State): boolean =>
  state.pending_transition !== null &&
  typeof state.pending_transition === "object" &&
  Object.keys(state.pending_transition).length > 0;

/** This call is the session's next attempt of the tool whose request expired: it is told hitl_timeout. */
export function timedOut(state: State, call: Call): boolean {
  const paused = pausedOf(state);
  return paused?.expired === true && paused.tool_name === call.tool_name;
}

/**
 * The used approval (or modify successor) among a session's CONSUMED requests that released `nonce`,
 * as the terminal transition decide() is shown for its re-dispatch (rule 3: duplicate_resume_no_effect).
 */
export function consumedTransitionOf(used: readonly HitlRequest[], nonce: Nonce): PendingTransition | null {
  const row = used.find((r) =>
    r.decision === "modify" ? r.successor_nonce === nonce : r.decision === "approve" && r.nonce === nonce,
  );
  if (row === undefined) return null;
  return {
    decision: row.decision!,
    original_nonce: row.nonce,
    original_args_digest: row.args_digest,
    ...(row.decision === "modify"
      ? { successor_nonce: row.successor_nonce, successor_args_digest: row.successor_args_digest }
      : {}),
    terminal_status: "consumed",
    resume_attempt: true,
  };
}
