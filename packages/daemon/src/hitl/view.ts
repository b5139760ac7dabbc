// Builds the wire's HitlRequestView from the store's HITL row plus what the daemon remembers (params,
// expiry, comment, recent verdicts). Pure mapping: it reads nothing and decides nothing.
import { create } from "@bufbuild/protobuf";
import type { HitlRequest } from "@leash/core";
import {
  HitlDecisionKind,
  type HitlRequestView,
  HitlRequestViewSchema,
  HitlStatus,
  type HitlVerdictSummary,
} from "@leash/wire";

export const DECISION_KIND: Record<string, HitlDecisionKind> = {
  approve: HitlDecisionKind.HITL_DECISION_APPROVE,
  reject: HitlDecisionKind.HITL_DECISION_REJECT,
  modify: HitlDecisionKind.HITL_DECISION_MODIFY,
  defer: HitlDecisionKind.HITL_DECISION_DEFER,
  escalate: HitlDecisionKind.HITL_DECISION_ESCALATE,
};

export const DECISION_NAME: Partial<
  Record<HitlDecisionKind, "approve" | "reject" | "modify" | "defer" | "escalate">
> = {
  [HitlDecisionKind.HITL_DECISION_APPROVE]: "approve",
  [HitlDecisionKind.HITL_DECISION_REJECT]: "reject",
  [HitlDecisionKind.HITL_DECISION_MODIFY]: "modify",
  [HitlDecisionKind.HITL_DECISION_DEFER]: "defer",
  [HitlDecisionKind.HITL_DECISION_ESCALATE]: "escalate",
};

const STATUS: Record<string, HitlStatus> = {
  PENDING: HitlStatus.HITL_PENDING,
  DECIDED: HitlStatus.HITL_DECIDED,
  CONSUMED: HitlStatus.HITL_CONSUMED,
  EXPIRED: HitlStatus.HITL_EXPIRED,
};

/** What the daemon knows of a request beyond its store row. */
export interface RequestNotes {
  paramsJson: string;
  agentId: string;
  organizationId: string;
  policy: string;
  budget: { limit: string; remaining: string; spent: string };
  expiresNs: number;
  expired: boolean;
  comment: string;
  successorParamsJson: string;
}

export const EMPTY_NOTES: RequestNotes = {
  paramsJson: "",
  agentId: "",
  organizationId: "",
  policy: "",
  budget: { limit: "", remaining: "", spent: "" },
  expiresNs: 0,
  expired: false,
  comment: "",
  successorParamsJson: "",
};

const ns = (value: number | null | undefined): bigint =>
  value === null || value === undefined ? 0n : BigInt(Math.trunc(value));

export function requestView(
  row: HitlRequest,
  notes: RequestNotes,
  recent: readonly HitlVerdictSummary[],
): HitlRequestView {
  // A row the engine closed as expired, or one this daemon expired (its answer is the timeout's).
  const status = notes.expired
    ? HitlStatus.HITL_EXPIRED
    : (STATUS[row.status] ?? HitlStatus.HITL_STATUS_UNSPECIFIED);
  const extra = row as HitlRequest & { params_json?: unknown; expires_ns?: unknown };
  return create(HitlRequestViewSchema, {
    requestId: row.request_id,
    sessionId: row.session_id,
    agentId: notes.agentId,
    organizationId: notes.organizationId,
    callNumber: BigInt(row.call_number),
    toolName: row.tool_name,
    nonce: row.nonce === null ? "" : String(row.nonce),
    paramsJson: typeof extra.params_json === "string" ? extra.params_json : notes.paramsJson,
    argsDigest: row.args_digest ?? "",
    reason: row.reason,
    budget: {
      limitUsdDecimal: notes.budget.limit,
      remainingUsdDecimal: notes.budget.remaining,
      spentUsdDecimal: notes.budget.spent,
    },
    policy: notes.policy,
    createdNs: ns(row.created_ns),
    expiresNs: typeof extra.expires_ns === "number" ? ns(extra.expires_ns) : ns(notes.expiresNs),
    status,
    decision:
      row.decision === null ? HitlDecisionKind.HITL_DECISION_UNSPECIFIED : (DECISION_KIND[row.decision] ?? 0),
    operatorId: row.operator_id ?? "",
    comment: notes.comment,
    decidedNs: ns(row.decided_ns),
    successorNonce: row.successor_nonce === null ? "" : String(row.successor_nonce),
    successorParamsJson: notes.successorParamsJson,
    successorArgsDigest: row.successor_args_digest ?? "",
    recentVerdicts: [...recent],
  });
}

/** Whether the waiting agent has its answer: anything but PENDING. */
export const isFinal = (view: HitlRequestView): boolean => view.status !== HitlStatus.HITL_PENDING;
