// Maps the engine's HITL request view onto the wire's HitlRequestView (plus the agent, organization and
// recent verdicts the daemon knows). Pure mapping: it reads nothing and decides nothing.
import { create } from "@bufbuild/protobuf";
import type { HitlRequestView as EngineView } from "@leash/engine";
import {
  HitlDecisionKind,
  type HitlRequestView,
  HitlRequestViewSchema,
  HitlStatus,
  type HitlVerdictSummary,
} from "@leash/wire";

export type DecisionName = "approve" | "reject" | "modify" | "defer" | "escalate";

export const DECISION_KIND: Record<DecisionName, HitlDecisionKind> = {
  approve: HitlDecisionKind.HITL_DECISION_APPROVE,
  reject: HitlDecisionKind.HITL_DECISION_REJECT,
  modify: HitlDecisionKind.HITL_DECISION_MODIFY,
  defer: HitlDecisionKind.HITL_DECISION_DEFER,
  escalate: HitlDecisionKind.HITL_DECISION_ESCALATE,
};

export const DECISION_NAME: Partial<Record<HitlDecisionKind, DecisionName>> = Object.fromEntries(
  Object.entries(DECISION_KIND).map(([name, kind]) => [kind, name]),
);

export const STATUS: Record<EngineView["status"], HitlStatus> = {
  pending: HitlStatus.HITL_PENDING,
  decided: HitlStatus.HITL_DECIDED,
  consumed: HitlStatus.HITL_CONSUMED,
  expired: HitlStatus.HITL_EXPIRED,
};

export const ENGINE_STATUS: Partial<Record<HitlStatus, EngineView["status"]>> = {
  [HitlStatus.HITL_PENDING]: "pending",
  [HitlStatus.HITL_DECIDED]: "decided",
  [HitlStatus.HITL_CONSUMED]: "consumed",
  [HitlStatus.HITL_EXPIRED]: "expired",
};

/** Who the request's session belongs to. */
export interface SessionOwner {
  readonly agentId: string;
  readonly organizationId: string;
}

const ns = (value: number | null | undefined): bigint =>
  value === null || value === undefined ? 0n : BigInt(Math.trunc(value));
const text = (value: unknown): string => (value === null || value === undefined ? "" : String(value));

export function requestView(
  view: EngineView,
  owner: SessionOwner | undefined,
  recent: readonly HitlVerdictSummary[],
): HitlRequestView {
  return create(HitlRequestViewSchema, {
    requestId: view.request_id,
    sessionId: view.session_id,
    agentId: owner?.agentId ?? "",
    organizationId: owner?.organizationId ?? "",
    callNumber: BigInt(view.call_number),
    toolName: view.tool_name,
    nonce: text(view.nonce),
    paramsJson: view.params_json ?? "",
    argsDigest: view.args_digest ?? "",
    reason: view.reason,
    budget: {
      limitUsdDecimal: text(view.budget?.limit_usd),
      remainingUsdDecimal: text(view.budget?.remaining_usd),
      spentUsdDecimal: text(view.budget?.spent_usd),
    },
    policy: view.policy_id ?? "",
    createdNs: ns(view.created_ns),
    expiresNs: ns(view.expires_ns),
    status: STATUS[view.status] ?? HitlStatus.HITL_STATUS_UNSPECIFIED,
    decision:
      view.decision === null
        ? HitlDecisionKind.HITL_DECISION_UNSPECIFIED
        : (DECISION_KIND[view.decision] ?? HitlDecisionKind.HITL_DECISION_UNSPECIFIED),
    operatorId: view.operator_id ?? "",
    comment: view.comment ?? "",
    decidedNs: ns(view.decided_ns),
    successorNonce: text(view.successor?.nonce),
    successorParamsJson: view.successor?.params ? JSON.stringify(view.successor.params) : "",
    successorArgsDigest: view.successor?.args_digest ?? "",
    recentVerdicts: [...recent],
  });
}

/** Whether the waiting agent has its answer: anything but PENDING. */
export const isFinal = (view: HitlRequestView): boolean => view.status !== HitlStatus.HITL_PENDING;
