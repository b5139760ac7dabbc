// One evaluate in a batch's transaction: the request as the machine's command, decide on the
// projection's view, the events applied (held rows, the signed entry), the result the caller gets.
// The verdict is the machine's (@leash/machine evaluate); nothing here judges a call.
import type { ChainEntryRecord } from "@leash/core";
import { type EvaluateCommand, type EvaluateReply, REPLAY_INPUTS_VERSION } from "@leash/machine";
import type { CompiledPolicy } from "@leash/policy";
import type { Auditor } from "../audit.js";
import { LeashError } from "../errors.js";
import { hitlView } from "../hitl-view.js";
import type { PolicyRecord } from "../policy-layer.js";
import type { CounterLayer, EnginePolicies } from "../policy-runtime.js";
import type { ProjectionTx } from "../projection.js";
import type { Steps } from "../steps.js";
import type { EvaluateRequest, EvaluateResult, HitlEvent } from "../types.js";
import { policyStep } from "./policy-step.js";
import { applied, decided, envOf, TxView } from "./run.js";

/** What evaluate needs of the engine: its inputs of non-determinism, its signer, its policy counters. */
export interface EvaluateContext {
  readonly nowNs: () => number;
  readonly rng: () => number;
  readonly newId: () => string;
  readonly holdTtlNs: number;
  readonly auditor: Auditor;
  readonly policies: EnginePolicies | null;
}

export interface Evaluated {
  result: Omit<EvaluateResult, "receipt">;
  entry: ChainEntryRecord;
  hitl: HitlEvent[];
}

export function checkSessionId(sessionId: unknown): asserts sessionId is string {
  if (typeof sessionId !== "string" || sessionId === "") {
    throw new LeashError("invalid_argument", "session_id must be a non-empty string");
  }
}

/** The request as the machine's command (a malformed call's tool name and nonce reach nothing). */
function commandOf(
  ctx: EvaluateContext,
  request: EvaluateRequest,
  malformed: string | null,
  policy: CompiledPolicy | undefined,
  layer: CounterLayer | undefined,
): EvaluateCommand {
  const step =
    policy === undefined || layer === undefined
      ? undefined
      : policyStep(policy, (org) => ctx.policies!.view(layer, org));
  return {
    kind: "evaluate",
    sessionId: request.session_id,
    malformed,
    toolName: malformed === null ? request.tool_name : "",
    params: request.params,
    nonce: malformed === null ? request.nonce : undefined,
    estimatedCostUsd: request.estimated_cost_usd,
    previousError: request.previous_error,
    expectedHash: request.expected_params_hash,
    rules: REPLAY_INPUTS_VERSION,
    ...(step === undefined ? {} : { policy: step }),
  };
}

/**
 * The verdict and the entry that records it; the receipt is made from the entry after COMMIT. A step
 * function (steps.ts): synchronous from decide to signed entry when the projection holds the session,
 * its accounts, the head and the nonce (the batch read them first); it awaits only what is missing.
 */
export function* evaluateCall(
  ctx: EvaluateContext,
  tx: ProjectionTx,
  request: EvaluateRequest,
  malformed: string | null,
  policy?: CompiledPolicy,
  layer?: CounterLayer,
): Steps<Evaluated> {
  checkSessionId(request.session_id); // before any statement names it
  const command = commandOf(ctx, request, malformed, policy, layer);
  const env = envOf(ctx.nowNs(), ctx.rng, ctx.newId, ctx.holdTtlNs);
  const view = new TxView(tx);
  const { events, reply } = yield* decided<EvaluateReply>(view, command, env);
  const entries = yield* applied(tx, ctx.auditor, events, env.nowNs, tx);
  const entry = entries.find((e) => e.kind === "decision")!;
  const hitl: HitlEvent[] = [];
  if (reply.expired !== null) hitl.push({ type: "hitl_expired", request: hitlView(reply.expired) });
  if (reply.opened !== null) hitl.push({ type: "hitl_request", request: hitlView(reply.opened) });
  const record = reply.policyRecord as PolicyRecord | null;
  // Last, once nothing can fail: an allowed call's policy counters, counted when the batch commits.
  if (record != null && reply.decision.verdict === "ALLOW") {
    ctx.policies!.stage(layer!, reply.session.organization_id, record, env.nowNs, entry);
  }
  return { result: resultOf(reply, entry, policy), entry, hitl };
}

function resultOf(
  reply: EvaluateReply,
  entry: ChainEntryRecord,
  policy: CompiledPolicy | undefined,
): Omit<EvaluateResult, "receipt"> {
  return {
    session_id: reply.session.session_id,
    call_number: reply.callNumber,
    verdict: reply.decision.verdict,
    reason: reply.decision.reason,
    budget_remaining_usd: reply.remaining,
    reservation_id: reply.reservationId,
    estimate_usd: reply.estimateUsd,
    rng: reply.rng,
    params_hash: reply.paramsHash,
    repeat_count: reply.repeatCount,
    entry_seq: entry.seq,
    entry_hash: entry.entry_hash,
    ...(reply.opened === null ? {} : { hitl_request_id: reply.opened.request_id }),
    ...(policy === undefined
      ? {}
      : { policy_hash: policy.hash, policy: (reply.policyRecord as PolicyRecord | null) ?? null }),
  };
}
