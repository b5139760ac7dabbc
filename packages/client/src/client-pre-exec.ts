// The client's pre_exec: the call checked and sent, and the daemon's answer checked (its session, reason,
// money and, with a daemon key, its signed receipt) before it is believed. It never throws: it fails closed.
import { create } from "@bufbuild/protobuf";
import {
  errorCodeName,
  moneyFromWire,
  moneyToWire,
  type Payload,
  PreExecRequestSchema,
  verdictFromWire,
} from "@leash/wire";
import { messageOf, nonceOf } from "./client-setup.js";
import { paramsOnWire } from "./params-on-wire.js";
import { receiptProblem } from "./receipt-check.js";
import type { Transport } from "./transport.js";
import type { ClientOptions, FailClosedReason, PreExecCall, PreExecResult } from "./types.js";

/** What pre_exec reads and updates of the client. */
export interface PreExecScope {
  readonly options: ClientOptions;
  readonly connection: Transport;
  readonly timeoutMs: number;
  /** The highest call number the daemon gave each session: the next request says the one after. */
  readonly lastCall: Map<string, number>;
}

type Deny = (reason: FailClosedReason, detail: string, paramsHash?: string | null) => PreExecResult;

/** A DENY the client decides itself (fail_closed: true), for `sessionId`. */
function denyFor(sessionId: string): Deny {
  return (reason, detail, paramsHash = null) => ({
    session_id: sessionId,
    call_number: 0,
    verdict: "DENY",
    reason,
    budget_remaining_usd: null,
    params_hash: paramsHash,
    entry_seq: null,
    entry_hash: null,
    receipt: null,
    fail_closed: true,
    detail,
  });
}

export async function preExec(
  scope: PreExecScope,
  call: PreExecCall,
  sessionId: string,
): Promise<PreExecResult> {
  const deny = denyFor(sessionId);
  try {
    if (sessionId === "")
      return deny("fail_closed:bad_request", "no session_id given and register() has not run");
    if (typeof call.tool_name !== "string" || call.tool_name === "") {
      return deny("fail_closed:bad_request", "tool_name must be a non-empty string");
    }
    const { json, hash, digest } = paramsOnWire(call.params);
    let estimate: { double: number; decimal: string };
    let nonce: bigint;
    try {
      estimate = moneyToWire(call.estimated_cost_usd ?? 0);
      nonce = nonceOf(call.nonce);
    } catch (error) {
      return deny("fail_closed:bad_request", messageOf(error), hash);
    }
    const outcome = await scope.connection.request(
      {
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId,
          callNumber: BigInt((scope.lastCall.get(sessionId) ?? 0) + 1),
          toolName: call.tool_name,
          toolParamsJson: json,
          ...(digest === null ? {} : { toolParamsHash: digest }),
          estimatedCostUsd: estimate.double,
          estimatedCostUsdDecimal: estimate.decimal,
          nonce,
        }),
      },
      scope.timeoutMs,
    );
    if (!outcome.ok) return deny(`fail_closed:${outcome.failure}`, outcome.message, hash);
    return await resultOf(scope, call, sessionId, { hash, nonce }, outcome.answer, deny);
  } catch (error) {
    // Whatever went wrong, the answer is DENY, never an exception a caller might swallow.
    return deny("fail_closed:bad_request", messageOf(error));
  }
}

/** The daemon's answer as a result, or a DENY when it cannot be trusted. */
async function resultOf(
  scope: PreExecScope,
  call: PreExecCall,
  sessionId: string,
  sent: { readonly hash: string | null; readonly nonce: bigint },
  payload: Payload,
  deny: Deny,
): Promise<PreExecResult> {
  const { hash } = sent;
  if (payload.case === "error") {
    const e = payload.value;
    return deny("fail_closed:daemon_error", `${errorCodeName(e.code)} ${e.detail}: ${e.message}`, hash);
  }
  if (payload.case !== "preExecResponse") {
    return deny("fail_closed:bad_response", `the daemon answered ${payload.case} to a pre_exec`, hash);
  }
  const r = payload.value;
  if (r.sessionId !== sessionId) {
    return deny("fail_closed:bad_response", `a verdict for session ${JSON.stringify(r.sessionId)}`, hash);
  }
  if (r.reason === "") return deny("fail_closed:bad_response", "a verdict without its reason", hash);
  let remaining: string | undefined;
  try {
    remaining = moneyFromWire(r.budgetRemainingUsd, r.budgetRemainingUsdDecimal, "budget_remaining_usd");
  } catch (error) {
    return deny("fail_closed:bad_response", messageOf(error), hash);
  }
  const result: PreExecResult = {
    session_id: sessionId,
    call_number: Number(r.callNumber),
    verdict: verdictFromWire(r.verdict),
    reason: r.reason,
    budget_remaining_usd: remaining ?? null,
    params_hash: hash,
    entry_seq: Number(r.chainSeq),
    entry_hash: r.entryHash,
    receipt: r.receipt === "" ? null : r.receipt,
    fail_closed: false,
    hitl_request_id: r.hitlRequestId === "" ? null : r.hitlRequestId,
    hitl_expires_ns: r.hitlExpiresNs === 0n ? null : r.hitlExpiresNs,
  };
  const { lastCall, options } = scope;
  if (result.call_number > (lastCall.get(sessionId) ?? 0)) lastCall.set(sessionId, result.call_number);
  if (options.daemonPublicKey !== undefined) {
    const problem = await receiptProblem(r.receipt, options.daemonPublicKey, {
      session_id: sessionId,
      call_number: result.call_number,
      tool_name: call.tool_name,
      params_hash: hash,
      nonce: sent.nonce.toString(),
      verdict: result.verdict,
      reason: result.reason,
      entry_hash: r.entryHash,
      entry_seq: Number(r.chainSeq),
    });
    if (problem !== null) return deny("fail_closed:bad_receipt", problem, hash);
  }
  return result;
}
