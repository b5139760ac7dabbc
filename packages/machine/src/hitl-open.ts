// The HITL request a paused call opens, and its own chain entry: what the operator judges (the exact
// params, the budget as it stood, the policy) and when it stops waiting. Pure; evaluate.ts calls it.
import type { BudgetAccount } from "@leash/core";
import { canonicalHash, canonicalJson, type HitlRequest, type Nonce, type SessionRecord } from "@leash/core";
import { hitlExpiresNs } from "./hitl.js";
import type { Env, MachineEvent } from "./types.js";

/** Params read with their number texts keep them in the stored JSON, as their digest does. */
const NUMBER_TEXT = { numberText: true } as const;

export interface OpenInput {
  readonly session: SessionRecord;
  readonly callNumber: number;
  readonly toolName: string;
  readonly nonce: Nonce | null;
  readonly params: unknown;
  readonly paramsText: string | null;
  readonly paramsHash: string | null;
  /** decide()'s reason, or a policy rule's (policy_hitl:rule:<name>). */
  readonly reason: string;
  readonly account: BudgetAccount | undefined;
  readonly remainingBefore: string | null;
}

/** The HITL request a paused call opens: what the operator judges, and when it stops waiting. */
export function openRequest(o: OpenInput, env: Env): HitlRequest {
  const { session, account } = o;
  return {
    request_id: env.newId(),
    session_id: session.session_id,
    call_number: o.callNumber,
    tool_name: o.toolName,
    nonce: o.nonce,
    args_digest: o.paramsHash,
    reason: o.reason as HitlRequest["reason"],
    status: "PENDING",
    decision: null,
    operator_id: null,
    successor_nonce: null,
    successor_args_digest: null,
    created_ns: env.nowNs,
    decided_ns: null,
    // The exact params (canonical JSON, so the digest can be checked), the budget as it stood, the policy.
    params_json:
      o.paramsHash === null || o.paramsText === null ? null : canonicalJson(o.params ?? {}, NUMBER_TEXT),
    budget_spent_usd: account === undefined ? null : account.spent_usd,
    budget_limit_usd: account === undefined ? null : account.limit_usd,
    budget_remaining_usd: o.remainingBefore,
    policy_id: canonicalHash(session.config),
    expires_ns: hitlExpiresNs(session.config, env.nowNs),
    comment: null,
    successor_params_json: null,
  };
}

/** The HITL request's own entry, so the relay delivers it; the params stay in the store (digest only). */
export function requestEntry(opened: HitlRequest): MachineEvent {
  return {
    type: "entry",
    kind: "hitl_request",
    data: {
      session_id: opened.session_id,
      request_id: opened.request_id,
      call_number: opened.call_number,
      tool_name: opened.tool_name,
      nonce: opened.nonce,
      args_digest: opened.args_digest,
      reason: opened.reason,
      budget_spent_usd: opened.budget_spent_usd,
      budget_limit_usd: opened.budget_limit_usd,
      budget_remaining_usd: opened.budget_remaining_usd,
      policy_id: opened.policy_id,
      created_ns: opened.created_ns,
      expires_ns: opened.expires_ns,
    },
  };
}
