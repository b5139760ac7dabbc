// HITL requests as operators see them, and the facts about their expiry: pure functions over rows.
// It reads and writes no store; flow/hitl.ts decides when a request expires (the machine records it).
import type { HitlRequest, HitlRequestStatus } from "@leash/core";
import { LeashError } from "./errors.js";
import type { HitlRequestView, HitlStatus, HumanDecision } from "./types.js";

export { DEFAULT_HITL_TIMEOUT_S, hitlExpiresNs, isDue, TIMEOUT_OPERATOR } from "@leash/machine";

const STATUS_OF: Record<HitlRequestStatus, HitlStatus> = {
  PENDING: "pending",
  DECIDED: "decided",
  CONSUMED: "consumed",
  EXPIRED: "expired",
};

const STORED_STATUS: Record<HitlStatus, HitlRequestStatus> = {
  pending: "PENDING",
  decided: "DECIDED",
  consumed: "CONSUMED",
  expired: "EXPIRED",
};

/** The store's status for a view status, or invalid_argument naming the four. */
export function storedStatus(status: unknown): HitlRequestStatus {
  const stored = typeof status === "string" ? STORED_STATUS[status as HitlStatus] : undefined;
  if (stored === undefined) {
    throw new LeashError(
      "invalid_argument",
      `status must be one of pending, decided, consumed, expired (got ${JSON.stringify(status) ?? typeof status})`,
    );
  }
  return stored;
}

function parsed(json: string | null): Record<string, unknown> | null {
  return json === null ? null : (JSON.parse(json) as Record<string, unknown>);
}

export function hitlView(request: HitlRequest): HitlRequestView {
  const hasBudget =
    request.budget_limit_usd !== null ||
    request.budget_spent_usd !== null ||
    request.budget_remaining_usd !== null;
  return {
    request_id: request.request_id,
    session_id: request.session_id,
    call_number: request.call_number,
    tool_name: request.tool_name,
    nonce: request.nonce,
    status: STATUS_OF[request.status],
    reason: request.reason,
    params: parsed(request.params_json),
    params_json: request.params_json,
    args_digest: request.args_digest,
    budget: hasBudget
      ? {
          spent_usd: request.budget_spent_usd,
          limit_usd: request.budget_limit_usd,
          remaining_usd: request.budget_remaining_usd,
        }
      : null,
    policy_id: request.policy_id,
    created_ns: request.created_ns,
    expires_ns: request.expires_ns,
    decided_ns: request.decided_ns,
    decision: request.decision as HumanDecision | null,
    operator_id: request.operator_id,
    comment: request.comment,
    successor:
      request.successor_nonce === null || request.successor_args_digest === null
        ? null
        : {
            nonce: request.successor_nonce,
            args_digest: request.successor_args_digest,
            params: parsed(request.successor_params_json),
          },
  };
}
