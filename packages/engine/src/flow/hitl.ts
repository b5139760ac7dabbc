// The HITL lifecycle: requests expiring (recorded lazily, when looked at), a human's answer through
// resume or answerHitl, lists and reads. Transitions are the machine's (expire, answer); waiting is waiting.ts.
import { canonicalHash, canonicalJson, type HitlRequest } from "@leash/core";
import type { AnswerCommand, AnswerReply, ExpireReply } from "@leash/machine";
import { LeashError } from "../errors.js";
import { hitlView, isDue, storedStatus } from "../hitl-view.js";
import { checkHitlAnswer, checkResumeRequest } from "../resume-input.js";
import { callIdOf, defined, type EngineSpan, SPAN_RESUME } from "../tracing.js";
import type {
  HitlAnswer,
  HitlEvent,
  HitlListFilter,
  HitlRequestView,
  ResumeRequest,
  SessionView,
} from "../types.js";
import type { EngineContext } from "./context.js";
import { checkSessionId } from "./evaluate-call.js";
import { runCommand } from "./run.js";
import { sessionView } from "./sessions.js";
import { endSpan, resumeAttributes } from "./spans.js";

/** Params read with their number texts (the CLI's) keep them in the stored JSON, as their digest does. */
const NUMBER_TEXT = { numberText: true } as const;

/** Expires the due requests among `rows`, one transaction per session; returns the events. */
export async function expireRows(ctx: EngineContext, rows: readonly HitlRequest[]): Promise<HitlEvent[]> {
  const { clock, events, auditor } = ctx;
  const bySession = new Map<string, string[]>();
  const nowNs = clock.nowNs();
  for (const row of rows) {
    if (!isDue(row, nowNs)) continue;
    const ids = bySession.get(row.session_id);
    if (ids === undefined) bySession.set(row.session_id, [row.request_id]);
    else ids.push(row.request_id);
  }
  const all: HitlEvent[] = [];
  for (const [sessionId, ids] of bySession) {
    const done = await ctx.transaction(async (tx) => {
      const found: HitlEvent[] = [];
      if ((await tx.sessions.get(sessionId)) === null) return found;
      const at = clock.nowNs();
      for (const requestId of ids) {
        const command = { kind: "expire", sessionId, requestId } as const;
        const { reply } = await runCommand<ExpireReply>(tx, auditor, command, ctx.envAt(at));
        if (reply.closed !== null) found.push({ type: "hitl_expired", request: hitlView(reply.closed) });
      }
      return found;
    });
    for (const event of done) events.emit(event);
    all.push(...done);
  }
  return all;
}

/** Reads one request outside any write (its session id tells the writer which row to lock first). */
export async function readRequest(ctx: EngineContext, requestId: string): Promise<HitlRequest> {
  const { substrate } = ctx;
  const row = await substrate.transaction((tx) => tx.hitl.get(requestId));
  if (row === null) {
    throw new LeashError("hitl_not_found", `no HITL request ${JSON.stringify(requestId)}`);
  }
  return row;
}

/** Expires the due requests of one session (of every session without one). */
export async function expireSession(ctx: EngineContext, sessionId?: string): Promise<HitlEvent[]> {
  const { substrate } = ctx;
  const pending = await substrate.transaction((tx) =>
    tx.hitl.list(sessionId === undefined ? { status: "PENDING" } : { sessionId, status: "PENDING" }),
  );
  return expireRows(ctx, pending);
}

function resumeIn(ctx: EngineContext, input: ResumeRequest, span: EngineSpan): Promise<SessionView> {
  const { clock, events, auditor } = ctx;
  let request: ReturnType<typeof checkResumeRequest>;
  try {
    request = checkResumeRequest(input); // before the transaction: bad input records nothing
  } catch (error) {
    return Promise.reject(error);
  }
  // An answer after the deadline finds the expiry recorded, and is refused (LeashHitlExpired).
  return expireSession(ctx, request.session_id)
    .then(() =>
      ctx.transaction(async (tx) => {
        checkSessionId(request.session_id);
        const command: AnswerCommand = {
          kind: "answer",
          sessionId: request.session_id,
          requestId: request.request_id,
          decision: request.decision,
          operatorId: request.operator_id,
          successor: request.successor,
          comment: (request as { comment?: string | null }).comment,
        };
        const { reply, entries } = await runCommand<AnswerReply>(
          tx,
          auditor,
          command,
          ctx.envAt(clock.nowNs()),
        );
        const { session: next, decided } = reply;
        if (span.recording) {
          span.set(
            defined({
              "gen_ai.tool.name": decided.tool_name,
              "gen_ai.tool.call.id": callIdOf(undefined, decided.nonce),
              "leash.hitl.decision": request.decision,
              "leash.hitl.request_id": decided.request_id,
              "leash.call_number": decided.call_number,
              "leash.chain.seq": entries[0]!.seq,
            }),
          );
        }
        return { view: await sessionView(tx, next), decided };
      }),
    )
    .then(({ view: answered, decided }) => {
      events.emit({ type: "hitl_decided", request: hitlView(decided) });
      return answered;
    });
}

export function resume(ctx: EngineContext, input: ResumeRequest): Promise<SessionView> {
  const { tracing } = ctx;
  const span = tracing.start(SPAN_RESUME, input?.traceparent, () =>
    defined({
      "gen_ai.operation.name": "execute_tool",
      "leash.session_id": typeof input?.session_id === "string" ? input.session_id : undefined,
      "leash.hitl.decision": typeof input?.decision === "string" ? input.decision : undefined,
    }),
  );
  const answer = resumeIn(ctx, input, span);
  return span.recording ? answer.then(...endSpan(span, resumeAttributes)) : answer;
}

export async function listHitl(ctx: EngineContext, filter: HitlListFilter = {}): Promise<HitlRequestView[]> {
  const { substrate } = ctx;
  if (filter === null || typeof filter !== "object") {
    throw new LeashError("invalid_argument", "listHitl takes a filter object");
  }
  const status = filter.status === undefined ? undefined : storedStatus(filter.status);
  if (filter.sessionId !== undefined) checkSessionId(filter.sessionId);
  if (filter.recordExpiry !== false) await expireSession(ctx, filter.sessionId);
  const rows = await substrate.transaction((tx) =>
    tx.hitl.list({
      ...(filter.sessionId === undefined ? {} : { sessionId: filter.sessionId }),
      ...(status === undefined ? {} : { status }),
    }),
  );
  rows.sort((a, b) => a.created_ns - b.created_ns || a.request_id.localeCompare(b.request_id));
  return rows.map(hitlView);
}

export async function getHitl(ctx: EngineContext, requestId: string): Promise<HitlRequestView> {
  if (typeof requestId !== "string" || requestId === "") {
    throw new LeashError("invalid_argument", "a request id must be a non-empty string");
  }
  return hitlView(await readRequest(ctx, requestId));
}

export async function answerHitl(
  ctx: EngineContext,
  requestId: string,
  answer: HitlAnswer,
): Promise<HitlRequestView> {
  const { clock, newId, events, auditor } = ctx;
  const checked = checkHitlAnswer(requestId, answer);
  const found = await readRequest(ctx, requestId);
  // Past its expiry: the expiry is recorded (its own commit) and this answer refused below.
  await expireRows(ctx, [found]);
  // Named outside the transaction, which a substrate may retry: one successor per answer.
  const successor =
    checked.params === null
      ? undefined
      : { nonce: answer.successorNonce ?? newId(), args_digest: canonicalHash(checked.params) };
  const decided = await ctx.transaction(async (tx) => {
    const command: AnswerCommand = {
      kind: "answer",
      sessionId: found.session_id,
      requestId,
      decision: checked.decision,
      operatorId: checked.operator_id,
      successor,
      successorParamsJson: checked.params === null ? null : canonicalJson(checked.params, NUMBER_TEXT),
      comment: checked.comment,
    };
    return (await runCommand<AnswerReply>(tx, auditor, command, ctx.envAt(clock.nowNs()))).reply.decided;
  });
  const answered = hitlView(decided);
  events.emit({ type: "hitl_decided", request: answered });
  return answered;
}

export async function expireHitl(
  ctx: EngineContext,
  expireOptions: { sessionId?: string } = {},
): Promise<number> {
  if (expireOptions.sessionId !== undefined) checkSessionId(expireOptions.sessionId);
  return (await expireSession(ctx, expireOptions.sessionId)).length;
}

export function onHitlEvent(ctx: EngineContext, listener: (event: HitlEvent) => void): () => void {
  const { events } = ctx;
  if (typeof listener !== "function") {
    throw new LeashError("invalid_argument", "onHitlEvent takes a listener function");
  }
  return events.on(listener);
}
