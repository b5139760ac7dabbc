// evaluate's flow: public call → batch (batcher.ts) → one transaction judging each waiting call on the
// projection (evaluate-call.ts: command → decide → sign) → commit → answer with its receipt.
import { accountChain } from "@leash/budget-guard";
import { compactJws } from "@leash/chain";
import type { Nonce } from "@leash/core";
import { budgetEnabled, malformedInput, sessionAccountId } from "@leash/machine";
import type { CompiledPolicy } from "@leash/policy";
import { Batcher, type Outcome } from "../batcher.js";
import { ChainUnverifiedError } from "../chain-trust.js";
import { LeashError } from "../errors.js";
import { decideOnce, messagePairs, recordedAfterConflict } from "../message-ids.js";
import { type CounterLayer, chainRange, POLICY_PUBLISHED, publishedData } from "../policy-runtime.js";
import type { ProjectionTx } from "../projection.js";
import { StateUnverifiedError, stateUnverified } from "../state-auth.js";
import { runSteps } from "../steps.js";
import { callIdOf, defined, SPAN_EVALUATE } from "../tracing.js";
import type { EvaluateRequest, EvaluateResult } from "../types.js";
import type { EngineContext } from "./context.js";
import { type Evaluated, evaluateCall } from "./evaluate-call.js";
import { endSpan, evaluateAttributes } from "./spans.js";

type Waiting = { request: EvaluateRequest; malformed: string | null; policy?: CompiledPolicy };

/** The engine's batcher of evaluate calls. */
export type Evaluations = Batcher<Waiting, Evaluated>;

/**
 * evaluate's batches (batcher.ts): one transaction judges every waiting call in turn on the
 * projection, then writes each touched session and account once. A call that fails before writing
 * anything fails alone; one that fails after fails the batch (the batcher then runs each call on
 * its own).
 */
export function evaluationsOf(ctx: EngineContext): Evaluations {
  return new Batcher<Waiting, Evaluated>((items, judged) => evaluateBatch(ctx, items, judged), ctx.maxBatch);
}

/** The nonces a batch's calls carry, asked of the store together before the first is judged. */
function noncesOf(
  items: ReadonlyArray<{ request: EvaluateRequest; malformed: string | null }>,
): Array<{ sessionId: string; nonce: Nonce }> {
  const pairs: Array<{ sessionId: string; nonce: Nonce }> = [];
  for (const { request, malformed } of items) {
    const { session_id: sessionId, nonce } = request;
    if (malformed !== null || typeof sessionId !== "string" || sessionId === "") continue;
    if (typeof nonce === "string" || typeof nonce === "number") pairs.push({ sessionId, nonce });
  }
  return pairs;
}
function evaluateBatch(
  ctx: EngineContext,
  items: readonly Waiting[],
  judged: () => void,
): Promise<Outcome<Evaluated>[]> {
  const { policies, signedByKnownKey, evalContext } = ctx;
  // The policy counters this batch adds count once it commits (each try of the transaction afresh).
  let layer: CounterLayer | undefined;
  const batch = ctx.inProjection(async (ptx) => {
    if (layer !== undefined) policies?.abort(layer);
    layer = policies?.begin();
    // Other engines' decisions since this one last counted (policy-runtime.ts), under the head's lock.
    if (layer !== undefined) await policies!.catchUp(layer, ptx.headNow() ?? null, chainRange(ptx.tx));
    const messages = messagePairs(items.map((item) => item.request));
    await Promise.all([
      ptx.prefetchNonces(noncesOf(items)),
      messages.length === 0 ? undefined : ptx.prefetchMessages(messages),
      warm(ptx, items),
    ]);
    const out: Outcome<Evaluated>[] = [];
    for (const { request, malformed, policy } of items) {
      const mark = ptx.mark();
      try {
        // A message decided before is answered from its record (message-ids.ts).
        const evaluated = runSteps(
          decideOnce(
            ptx,
            request,
            () => evaluateCall(evalContext, ptx, request, malformed, policy, layer),
            signedByKnownKey,
          ),
        );
        out.push({ ok: true, value: evaluated instanceof Promise ? await evaluated : evaluated });
      } catch (error) {
        if (items.length === 1 || ptx.writesSince(mark)) throw error;
        ptx.rollbackTo(mark);
        out.push({ ok: false, error });
      }
    }
    if (layer !== undefined) layer.end = ptx.currentHead ?? null;
    return out;
  }, judged);
  if (layer === undefined && policies === null) return batch;
  return batch.then(
    (out) => {
      if (layer !== undefined) policies?.commit(layer);
      return out;
    },
    (error: unknown) => {
      if (layer !== undefined) policies?.abort(layer);
      throw error;
    },
  );
}

/**
 * The policy in force, published first: its `policy_published` entry (canonical text and hash) is in
 * the chain before any decision names it. Loads the counters from the chain once.
 */
async function policyInForce(ctx: EngineContext): Promise<CompiledPolicy | undefined> {
  const { substrate, clock, policies, trust, auditor } = ctx;
  if (policies === null) return undefined;
  if (!trust.trusted) await trust.ready();
  await policies.load((fromSeq, limit) => substrate.transaction((tx) => tx.chain.range(fromSeq, limit)));
  const policy = policies.current();
  await policies.publishOnce(policy.hash, async () => {
    await ctx.transaction((tx) => auditor.record(tx, POLICY_PUBLISHED, publishedData(policy), clock.nowNs()));
  });
  return policy;
}

/** Submits a call with the policy in force; without waiting once the chain is trusted, loaded, published. */
function submitUnderPolicy(
  ctx: EngineContext,
  evaluations: Evaluations,
  request: EvaluateRequest,
  malformed: string | null,
): Promise<Evaluated> {
  const { policies, trust } = ctx;
  const ready = trust.trusted ? policies!.ready() : undefined;
  if (ready !== undefined) return evaluations.submit({ request, malformed, policy: ready });
  return policyInForce(ctx).then((policy) => evaluations.submit({ request, malformed, policy }));
}

/**
 * Reads the batch's sessions and their budget accounts together, before the first call is judged:
 * what the projection lacks (after another writer's entries, say) then costs a few round trips a
 * batch on a pipelining store, not a few a call. Errors are left to the calls themselves.
 */
async function warm(ptx: ProjectionTx, items: readonly Waiting[]): Promise<void> {
  const ids = new Set<string>();
  for (const { request, malformed } of items) {
    if (malformed === null && typeof request.session_id === "string" && request.session_id !== "") {
      ids.add(request.session_id);
    }
  }
  if (ids.size < 2) return;
  await Promise.all(
    [...ids]
      .map(async (id) => {
        const session = await ptx.sessions.get(id);
        if (session !== null && budgetEnabled(session.config)) {
          await accountChain(ptx, sessionAccountId(session.config, session));
        }
      })
      .map((read) => read.catch(() => undefined)),
  );
}

export function evaluate(
  ctx: EngineContext,
  evaluations: Evaluations,
  request: EvaluateRequest,
): Promise<EvaluateResult> {
  const { substrate, events, policies, tracing, signedByKnownKey } = ctx;
  if (typeof request !== "object" || request === null) {
    return Promise.reject(new LeashError("invalid_argument", "evaluate needs a request object"));
  }
  const malformed = malformedInput(request);
  const toolName = typeof request.tool_name === "string" ? request.tool_name : "";
  const span = tracing.start(`${SPAN_EVALUATE} ${toolName}`, request.traceparent, () =>
    defined({
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": toolName,
      "gen_ai.tool.call.id": callIdOf(request.call_id, request.nonce),
      "leash.session_id": typeof request.session_id === "string" ? request.session_id : undefined,
    }),
  );
  // The receipt is built outside the transaction: on a shared store, not while holding its locks.
  const submitted =
    policies === null
      ? evaluations.submit({ request, malformed })
      : submitUnderPolicy(ctx, evaluations, request, malformed);
  const answer = submitted.then(
    ({ result, entry, hitl }) => {
      for (const event of hitl) events.emit(event);
      return { ...result, receipt: compactJws(entry) };
    },
    async (error: unknown) => {
      if (error instanceof ChainUnverifiedError) return chainUnverified(request, error);
      if (error instanceof StateUnverifiedError) return stateUnverified(request, error);
      // Two engines raced on one message and this one lost: it answers with the winner's decision.
      const recorded = await recordedAfterConflict(substrate, request, error, signedByKnownKey);
      if (recorded === null) throw error;
      return { ...recorded.result, receipt: compactJws(recorded.entry) };
    },
  );
  return span.recording ? answer.then(...endSpan(span, evaluateAttributes)) : answer;
}

/** DENY without a decision or an entry: the store's chain does not verify (fail closed). */
function chainUnverified(request: EvaluateRequest, error: ChainUnverifiedError): EvaluateResult {
  return {
    session_id: request.session_id,
    call_number: 0,
    verdict: "DENY",
    reason: "fail_closed:chain_unverified",
    budget_remaining_usd: null,
    estimate_usd: null,
    reservation_id: null,
    rng: null,
    params_hash: null,
    repeat_count: 0,
    entry_seq: null,
    entry_hash: null,
    receipt: null,
    chain_failure: error.failure,
    error: error.message,
  };
}
