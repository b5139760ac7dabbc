// The daemon's PreExec: an SP/1.0 PreExecRequest checked and mapped onto engine.evaluate, and the
// engine's result mapped onto a PreExecResponse. The decision itself is the engine's, not this module's.
import { create } from "@bufbuild/protobuf";
import type { Nonce } from "@leash/core";
import type { Engine, EvaluateRequest } from "@leash/engine";
import {
  denyReasonFor,
  ErrorCode,
  MAX_FRAME_BYTES,
  moneyFromWire,
  type Payload,
  type PreExecRequest,
  PreExecResponseSchema,
  paramsFromJson,
  verdictToWire,
  WireError,
} from "@leash/wire";
import { answerFits, preExecAnswerBound } from "./answer-size.js";
import type { HandlerScope } from "./handler-scope.js";
import type { RequestContext } from "./handler-types.js";
import { money, Refusal, toNs } from "./handler-wire.js";
import { countPolicy } from "./metrics.js";

/** The key rule 1 reads as "not canonicalizable" (spec §3.2 rule 1, core canonicalizationError). */
const NONCANONICAL = { __noncanonical__: true };

type EvaluateResult = Awaited<ReturnType<Engine["evaluate"]>>;

export async function preExec(
  scope: HandlerScope,
  request: PreExecRequest,
  context: RequestContext,
): Promise<Payload> {
  // Looked up before the first await: only settlements that arrived before this request count.
  const earlier = scope.settlements.before(request.sessionId);
  await scope.sessions.check(request.sessionId, context.auth);
  if (earlier !== undefined) await earlier;
  const evaluate = evaluateRequestOf(request, context);
  refuseUnsendableAnswer(request, context);
  const gate = scope.gate;
  const go = gate?.enter(request.sessionId);
  if (go !== undefined) await go;
  let result: EvaluateResult;
  try {
    result = await scope.options.engine.evaluate(evaluate);
  } finally {
    gate?.answered(request.sessionId);
  }
  return preExecResponse(scope, request, result);
}

/** The request as the engine takes it: parameters, digest, nonce, estimate and message id. */
function evaluateRequestOf(request: PreExecRequest, context: RequestContext): EvaluateRequest {
  const estimate = moneyFromWire(
    request.estimatedCostUsd,
    request.estimatedCostUsdDecimal,
    "estimated_cost_usd",
  );
  const { params, expected } = paramsOf(request);
  const nonce: Nonce | null = request.nonce === 0n ? null : request.nonce.toString();
  return {
    session_id: request.sessionId,
    tool_name: request.toolName,
    params,
    nonce,
    // Exact decimal text: the engine reads it without a float (1.0000000000000000000000001 > 1).
    ...(estimate === undefined ? {} : { estimated_cost_usd: estimate }),
    ...(expected === undefined ? {} : { expected_params_hash: expected }),
    ...(context.message === undefined
      ? {}
      : { message: { id: context.message.id, sent_ns: Number(context.message.sentNs) } }),
  };
}

/** The tool parameters the engine evaluates, and the digest the client expects of them (if it sent one). */
function paramsOf(request: PreExecRequest): { params: Record<string, unknown>; expected?: string } {
  const sentHash = request.toolParamsHash;
  if (request.toolParamsJson === "") {
    // The daemon never saw the arguments (a spec-only client sends the hash alone): rule 9 cannot
    // evaluate them, so they stand in as opaque context — HITL unless a higher rule decides first.
    // The sent digest is kept, so rule 6 still tells different calls apart.
    return { params: { context: "opaque", tool_params_hash: Buffer.from(sentHash).toString("hex") } };
  }
  try {
    const params = paramsFromJson(request.toolParamsJson);
    if (sentHash.length === 0) return { params };
    // Any digest that is not 32 bytes can match nothing: the engine then denies the mismatch.
    const expected = sentHash.length === 32 ? Buffer.from(sentHash).toString("hex") : "not-a-sha256-digest";
    return { params, expected };
  } catch (error) {
    if (!WireError.isInstance(error) || error.code !== "invalid_params_json") throw error;
    return { params: NONCANONICAL }; // rule 1: DENY policy_violation:malformed_input, recorded like any decision
  }
}

/** Nothing is decided whose answer could not be sent (answer-size.ts): the caller learns why, unrecorded. */
function refuseUnsendableAnswer(request: PreExecRequest, context: RequestContext): void {
  const texts = {
    sessionId: request.sessionId,
    toolName: request.toolName,
    organizationId: context.auth.organizationId,
  };
  if (!answerFits(texts)) {
    throw new Refusal(
      ErrorCode.MESSAGE_TOO_LARGE,
      "answer_too_large",
      `the answer could be ${preExecAnswerBound(texts)} bytes, over the ${MAX_FRAME_BYTES}-byte frame: shorten tool_name`,
    );
  }
}

/** The engine's result as the wire shows it, after telling the HITL desk and the metrics. */
async function preExecResponse(
  scope: HandlerScope,
  request: PreExecRequest,
  result: EvaluateResult,
): Promise<Payload> {
  const { options } = scope;
  if (result.state_failure !== undefined) {
    options.logger.warn(
      { rpc: "PreExec", state_failure: result.state_failure },
      result.error ?? "state unverified",
    );
  }
  // §3.10: a probabilistic denial looks like a real exhaustion on the wire; the chain has the truth.
  const reason = result.reason === "probabilistic_deny" ? "budget_exhausted" : result.reason;
  if (options.hitl !== undefined && result.call_number > 0) {
    options.hitl.noteVerdict(result.session_id, {
      callNumber: result.call_number,
      toolName: request.toolName,
      verdict: result.verdict,
      reason,
      budgetRemaining: result.budget_remaining_usd,
    });
  }
  // With HITL the agent learns which request to wait for, and until when.
  const hitlRequestId = result.verdict === "HITL" ? (result.hitl_request_id ?? "") : "";
  const hitlExpiresNs =
    hitlRequestId === "" ? 0n : toNs((await options.engine.getHitl(hitlRequestId)).expires_ns);
  // A re-delivered message's answer is a decision already counted (by whichever daemon made it).
  if (result.redelivered !== true) {
    options.metrics.verdicts.inc({ verdict: result.verdict, reason });
    countPolicy(options.metrics, result.policy);
    if (result.reservation_id !== null) options.metrics.holdsPlaced.inc();
  }
  const remaining = money(result.budget_remaining_usd);
  return {
    case: "preExecResponse",
    value: create(PreExecResponseSchema, {
      sessionId: result.session_id,
      callNumber: BigInt(result.call_number),
      verdict: verdictToWire(result.verdict),
      denyReason: denyReasonFor(reason),
      // A refused row is named (table and key), for the agent's log as for the daemon's.
      humanReadableReason:
        result.state_failure === undefined
          ? `${result.verdict}: ${reason}`
          : `${result.verdict}: ${reason}: ${result.error}`,
      budgetRemainingUsd: remaining.double,
      budgetRemainingUsdDecimal: remaining.decimal,
      repeatCount: result.repeat_count,
      daemonTimeNs: scope.nowNs(),
      // §3.10: false even for a probabilistic denial, which the wire shows as budget_exhausted.
      probabilisticDeny: false,
      reason,
      // Absent only for fail_closed:chain_unverified, which the engine answers without an entry.
      receipt: result.receipt ?? "",
      chainSeq: BigInt(result.entry_seq ?? 0),
      entryHash: result.entry_hash ?? "",
      hitlRequestId,
      hitlExpiresNs,
    }),
  };
}
