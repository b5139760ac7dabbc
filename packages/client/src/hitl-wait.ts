// waitForHitl over either transport: one wait_hitl long poll (socket) or WaitHitl stream (gRPC), answered
// when a human decides or the request expires. It never throws for the daemon's sake: no answer, a dead daemon or a refusal is a fail-closed outcome.
import { create } from "@bufbuild/protobuf";
import {
  errorCodeName,
  HitlDecisionKind,
  type HitlRequestView,
  HitlStatus,
  WaitHitlRequestSchema,
} from "@leash/wire";
import type { Transport } from "./transport.js";
import type { HitlOutcome } from "./types.js";

/** Without an expiry from the daemon, wait as long as its default HITL timeout (15 minutes). */
export const DEFAULT_HITL_WAIT_MS = 15 * 60_000;
/** Beyond the expiry: the daemon needs a moment to record it and answer. */
const EXPIRY_GRACE_MS = 5_000;

const DECISIONS: Partial<Record<HitlDecisionKind, HitlOutcome["decision"]>> = {
  [HitlDecisionKind.HITL_DECISION_APPROVE]: "approve",
  [HitlDecisionKind.HITL_DECISION_REJECT]: "reject",
  [HitlDecisionKind.HITL_DECISION_MODIFY]: "modify",
  [HitlDecisionKind.HITL_DECISION_DEFER]: "defer",
  [HitlDecisionKind.HITL_DECISION_ESCALATE]: "escalate",
};

/** How long to wait for a request that expires at `expiresNs` (daemon clock), from now. */
export function waitBudgetMs(expiresNs: bigint | null | undefined, nowMs = Date.now()): number {
  if (expiresNs === null || expiresNs === undefined || expiresNs <= 0n)
    return DEFAULT_HITL_WAIT_MS + EXPIRY_GRACE_MS;
  return Math.max(1, Number(expiresNs / 1_000_000n) - nowMs) + EXPIRY_GRACE_MS;
}

export function outcomeOf(view: HitlRequestView): HitlOutcome {
  const base = {
    request_id: view.requestId,
    session_id: view.sessionId,
    call_number: Number(view.callNumber),
    operator_id: view.operatorId === "" ? null : view.operatorId,
    comment: view.comment,
    view,
  };
  if (view.status === HitlStatus.HITL_EXPIRED) {
    return { ...base, kind: "expired", decision: null, reason: "hitl_timeout" };
  }
  const decision = DECISIONS[view.decision] ?? null;
  if (decision === null || view.status === HitlStatus.HITL_PENDING) {
    return { ...base, kind: "fail_closed", decision: null, reason: "fail_closed:bad_response" };
  }
  if (decision === "modify") {
    return {
      ...base,
      kind: "decided",
      decision,
      reason: "hitl_transition:modify",
      successor: { nonce: view.successorNonce, params_json: view.successorParamsJson },
    };
  }
  return { ...base, kind: "decided", decision, reason: `hitl_transition:${decision}` };
}

export async function waitForHitlOn(
  connection: Transport,
  request: { requestId: string; sessionId: string; timeoutMs: number },
): Promise<HitlOutcome> {
  const failed = (reason: string, detail: string): HitlOutcome => ({
    kind: "fail_closed",
    request_id: request.requestId,
    session_id: request.sessionId,
    call_number: 0,
    decision: null,
    operator_id: null,
    comment: "",
    reason,
    detail,
    view: null,
  });
  const outcome = await connection.request(
    {
      case: "waitHitl",
      value: create(WaitHitlRequestSchema, { requestId: request.requestId, sessionId: request.sessionId }),
    },
    request.timeoutMs,
  );
  if (!outcome.ok) return failed(`fail_closed:${outcome.failure}`, outcome.message);
  const payload = outcome.answer;
  if (payload.case === "error") {
    const e = payload.value;
    return failed("fail_closed:daemon_error", `${errorCodeName(e.code)} ${e.detail}: ${e.message}`);
  }
  if (payload.case !== "hitlUpdate" || payload.value.request === undefined) {
    return failed("fail_closed:bad_response", `the daemon answered ${payload.case} to a wait_hitl`);
  }
  const view = payload.value.request;
  if (view.requestId !== request.requestId || view.sessionId !== request.sessionId) {
    return failed("fail_closed:bad_response", "the daemon answered for another request");
  }
  return outcomeOf(view);
}
