// createEngine(): library mode — one substrate transaction per evaluate (load → decide → feedback →
// reserve → commit → verdict). No verdict is returned before its transaction has committed.
import { randomUUID } from "node:crypto";
import {
  accountChain,
  available,
  BudgetGuardError,
  chainAvailable,
  chainOverLimit,
  chargeExpired,
  ensureAccount,
  type Money,
  type SettleResult,
  settle,
  toMoney,
} from "@leash/budget-guard";
import { type Checkpoint, compactJws, keyRotationData, type Signer } from "@leash/chain";
import {
  type ChainEntryRecord,
  canonicalHash,
  canonicalJson,
  type HitlRequest,
  type Nonce,
  type Reservation,
  type SessionRecord,
  type Substrate,
  type SubstrateTx,
} from "@leash/core";
import { validateConfig } from "@leash/core/schema";
import {
  type AnswerCommand,
  type AnswerReply,
  DEFAULT_HOLD_TTL_NS,
  type ExpireReply,
  holdId,
  type MarkStaleCommand,
  malformedInput,
  type RegisterCommand,
  recordableErrorText,
} from "@leash/machine";
import { systemClock } from "@leash/outbox";
import type { CompiledPolicy } from "@leash/policy";
import { budgetEnabled, guardAccountId, sessionAccountId } from "./accounts.js";
import { Auditor } from "./audit.js";
import { Batcher, type Outcome } from "./batcher.js";
import { ChainTrust, ChainUnverifiedError, trustedKeyMap } from "./chain-trust.js";
import { CheckpointWriter, checkpointIntervalOf } from "./checkpoint-writer.js";
import { LeashError } from "./errors.js";
import { expiryEntryData } from "./expiry-entry.js";
import { checkSessionId, type EvaluateContext, type Evaluated, evaluateCall } from "./flow/evaluate-call.js";
import { envOf, runCommand } from "./flow/run.js";
import { HitlEvents } from "./hitl-events.js";
import { hitlView, isDue, storedStatus } from "./hitl-view.js";
import { MAX_RESERVATION_TTL_S } from "./limits.js";
import { decideOnce, messagePairs, recordedAfterConflict } from "./message-ids.js";
import {
  type CounterLayer,
  chainRange,
  EnginePolicies,
  POLICY_PUBLISHED,
  publishedData,
} from "./policy-runtime.js";
import { Projection, type ProjectionTx } from "./projection.js";
import { checkHitlAnswer, checkResumeRequest } from "./resume-input.js";
import { runSteps } from "./steps.js";
import {
  callIdOf,
  defined,
  type EngineSpan,
  EngineTracing,
  SPAN_EVALUATE,
  SPAN_POST_EXEC,
  SPAN_RESUME,
} from "./tracing.js";
import type {
  ChainOpenReport,
  EngineOptions,
  EvaluateRequest,
  EvaluateResult,
  HitlAnswer,
  HitlEvent,
  HitlListFilter,
  HitlRequestView,
  PostExecRequest,
  PostExecResult,
  RegisterRequest,
  ResumeRequest,
  SessionView,
  WaitForHitlOptions,
} from "./types.js";

/** Params read with their number texts (the CLI's) keep them in the stored JSON, as their digest does. */
const NUMBER_TEXT = { numberText: true } as const;

/** The default clock: epoch nanoseconds that never go backwards within the process. */
export { systemClock };

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

/**
 * The hold TTL in nanoseconds, checked here so a bad value is a clear error at creation, not an
 * internal one at the first ALLOW (an expiry past 2^63 ns overflows the stores' integer columns).
 */
function reservationTtlNs(ms: number | undefined): number {
  if (ms === undefined) return DEFAULT_HOLD_TTL_NS;
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0 || ms > MAX_RESERVATION_TTL_S * 1000) {
    throw new LeashError(
      "invalid_argument",
      `reservationTtlMs must be a positive number of milliseconds up to ${MAX_RESERVATION_TTL_S * 1000} (365 days), got ${String(ms)}`,
    );
  }
  return ms * 1e6;
}

function neverAllowed(sessionId: string, callNumber: number): LeashError {
  return new LeashError(
    "reservation_not_found",
    `call ${callNumber} of session ${sessionId} was never allowed: there is nothing to settle`,
  );
}

/**
 * Settles a call's hold once. The same actual again is a replay, whatever idempotency key it
 * comes with; another actual is a settlement_conflict, and the first settlement stands.
 */
async function settleOnce(
  tx: SubstrateTx,
  hold: Reservation,
  actual: Money,
  nowNs: number,
  idempotencyKey: string,
): Promise<SettleResult> {
  const key =
    hold.status === "SETTLED" && hold.actual_usd !== null && toMoney(hold.actual_usd).eq(actual)
      ? (hold.idempotency_key ?? idempotencyKey)
      : idempotencyKey;
  try {
    return await settle(tx, hold.reservation_id, { actual_usd: actual, nowNs, idempotency_key: key });
  } catch (error) {
    if (
      BudgetGuardError.isInstance(error) &&
      (error.code === "settlement_conflict" || error.code === "already_resolved")
    ) {
      throw new LeashError(
        "settlement_conflict",
        `call ${hold.call_number} of session ${hold.session_id}: ${error.message}`,
        { cause: error },
      );
    }
    throw error;
  }
}

const DEFAULT_HITL_POLL_MS = 500;

/** The most calls one evaluate transaction judges (batcher.ts). */
const DEFAULT_MAX_BATCH = 64;

export interface Engine {
  readonly substrate: Substrate;
  register(request: RegisterRequest): Promise<SessionView>;
  evaluate(request: EvaluateRequest): Promise<EvaluateResult>;
  postExec(request: PostExecRequest): Promise<PostExecResult>;
  getSession(sessionId: string): Promise<SessionView>;
  /**
   * Records a human's decision on the session's paused call (spec §3.6). Each request takes one
   * answer: a later (or concurrent) one is refused with LeashAlreadyDecided; bad input with
   * invalid_argument, before anything is written.
   */
  resume(request: ResumeRequest): Promise<SessionView>;
  /**
   * HITL requests, oldest first, optionally of one session and/or in one status. Requests past
   * their expiry are expired (and recorded) first.
   */
  listHitl(filter?: HitlListFilter): Promise<HitlRequestView[]>;
  /** One request as it is stored now (a read: expiry is recorded by list, answer, wait or expireHitl). */
  getHitl(requestId: string): Promise<HitlRequestView>;
  /**
   * An operator's answer to one request (spec §3.6), recorded with a hitl_decision entry. modify takes
   * the operator's params: the engine names a successor nonce and binds their canonical digest.
   * An answered request throws LeashAlreadyDecided, an expired one LeashHitlExpired; both change nothing.
   */
  answerHitl(requestId: string, answer: HitlAnswer): Promise<HitlRequestView>;
  /**
   * Resolves once the request is answered or expired (recording the expiry when its time is up). An
   * answer through this engine resolves it at once; one written by another process is seen at the
   * next poll (EngineOptions.hitlPollMs). With `timeoutMs` it resolves with the still-pending request.
   */
  waitForHitl(requestId: string, options?: WaitForHitlOptions): Promise<HitlRequestView>;
  /** Listens to this engine's HITL events (after each commit); returns the unsubscribe function. */
  onHitlEvent(listener: (event: HitlEvent) => void): () => void;
  /** Expires every unanswered request past its expiry (of one session, when given); returns how many. */
  expireHitl(options?: { sessionId?: string }): Promise<number>;
  /** Operator reset of a tripped circuit. */
  reset(sessionId: string, operatorId: string): Promise<SessionView>;
  heartbeat(sessionId: string): Promise<void>;
  /**
   * Marks an ACTIVE or PAUSED session STALE when its last heartbeat (or its registration) is older
   * than `staleAfterNs` (spec §4.5: three missed 30 s heartbeats), with a signed session_stale entry.
   * Returns the entry's position, or null when the session is not (or no longer) overdue.
   */
  markStale(
    sessionId: string,
    options: { staleAfterNs: number; heartbeatIntervalMs?: number; missedHeartbeats?: number },
  ): Promise<{ entry_seq: number; entry_hash: string } | null>;
  /** Creates a named budget guard that sessions can draw on through `parent_guard_id`. */
  createGuard(guard: {
    guard_id: string;
    limit_usd: number | string;
    parent_guard_id?: string;
  }): Promise<void>;
  /** Releases budget holds whose agent never reported back; returns how many. */
  expireReservations(limit?: number): Promise<number>;
  /**
   * Forgets up to `limit` (default 10,000) decided message ids sent before `beforeNs`, oldest first;
   * returns how many. Call it with a time past which the transport refuses a copy by its timestamp
   * anyway (the daemon: two replay windows ago), so forgetting never lets one be decided twice.
   */
  forgetMessages(beforeNs: number, limit?: number): Promise<number>;
  /** Signs a key_rotation entry naming `next` with the current key, then signs with `next`. */
  rotateKey(next: Signer, operatorId: string): Promise<void>;
  /** The public key that signs new entries (hex). */
  readonly publicKeyHex: string;
  /**
   * Verifies the store's audit chain from the last trusted checkpoint (from the genesis without
   * one); every other method does this first, once. While the chain does not verify, evaluate
   * answers DENY `fail_closed:chain_unverified` and every other call rejects with chain_unverified.
   */
  open(): Promise<ChainOpenReport>;
  /** At a clean shutdown: writes the checkpoint of the chain as this engine verified and wrote it. */
  close(): Promise<Checkpoint | null>;
}

export function createEngine(options: EngineOptions): Engine {
  const { substrate } = options;
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? Math.random;
  const ttlNs = reservationTtlNs(options.reservationTtlMs);
  const newId = options.newId ?? randomUUID;
  const pollMs = options.hitlPollMs ?? DEFAULT_HITL_POLL_MS;
  if (typeof pollMs !== "number" || !Number.isFinite(pollMs) || pollMs <= 0) {
    throw new LeashError("invalid_argument", `hitlPollMs must be a positive number, got ${String(pollMs)}`);
  }
  const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
  if (!Number.isSafeInteger(maxBatch) || maxBatch < 1) {
    throw new LeashError(
      "invalid_argument",
      `maxBatch must be a whole number of at least 1, got ${String(maxBatch)}`,
    );
  }
  const events = new HitlEvents();
  /** The Env of one command at `nowNs` (flow/run.ts): the rng and a new id drawn once if it needs them. */
  const envAt = (nowNs: number) => envOf(nowNs, rng, newId, ttlNs);
  // The operator's policy layer (policy-layer.ts), when one is configured.
  const policies = options.policy === undefined ? null : new EnginePolicies(options.policy);
  if (options.signer === undefined) {
    throw new LeashError(
      "invalid_argument",
      "createEngine needs a signer: every decision is signed into the audit chain",
    );
  }
  // Opening the store (chain-trust.ts): verified once before the first call, and at every append.
  const trust = new ChainTrust({
    substrate,
    trustedKeys: trustedKeyMap([...(options.trustedKeys ?? []), options.signer.publicKeyHex]),
    readCheckpoint: async () => options.trustedCheckpoint ?? (await options.checkpointStore?.read()) ?? null,
    ...(options.checkpointStore === undefined
      ? {}
      : { checkpointLocation: options.checkpointStore.location }),
  });
  // The last trusted head, kept outside the store as the chain grows (a restored older copy is refused).
  const checkpoints =
    options.checkpointStore === undefined
      ? null
      : new CheckpointWriter(
          options.checkpointStore,
          () => trust.checkpoint,
          checkpointIntervalOf(options.checkpointIntervalMs),
          options.onCheckpointError,
        );
  const auditor = new Auditor(options.signer, trust);
  const evalContext: EvaluateContext = {
    nowNs: () => clock.nowNs(),
    rng,
    newId,
    holdTtlNs: ttlNs,
    auditor,
    policies,
  };
  const signedByKnownKey = (entry: ChainEntryRecord) => trust.signedByKnownKey(entry);
  const tracing = new EngineTracing(options.tracer);
  /**
   * Every write transaction of the engine runs on the projection (projection.ts): it reads the chain
   * head first (under the store's write lock; on PostgreSQL every writer then takes the head's lock
   * before any row's, so two never wait on each other in a cycle), folds in what others appended,
   * serves sessions and accounts from memory, and writes each one it changed once, stamped, before
   * COMMIT. The auditor and the projection learn of the transaction only once it has committed
   * (the last try, after a substrate's retries).
   */
  const projection = new Projection();
  async function inProjection<T>(fn: (ptx: ProjectionTx) => Promise<T>, judged?: () => void): Promise<T> {
    // Nothing reaches the store before its chain verified (fail closed; see ChainTrust).
    if (!trust.trusted) await trust.ready();
    let ptx: ProjectionTx | undefined;
    try {
      const value = await substrate.transaction(async (tx) => {
        // A substrate's retry starts afresh: the try before never reached the store.
        if (ptx !== undefined) projection.failed(ptx);
        ptx = projection.begin(tx);
        await ptx.open();
        await trust.checkHeadRow(tx, ptx.headNow());
        const result = await fn(ptx);
        await ptx.flush();
        projection.judged(ptx);
        judged?.();
        return result;
      });
      projection.committed(ptx!);
      auditor.committed(ptx!);
      checkpoints?.poke();
      return value;
    } catch (error) {
      if (ptx !== undefined) projection.failed(ptx);
      throw error;
    }
  }
  /** A write transaction other than evaluate's (register, postExec, answers, resets, expiries, …). */
  function transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    return policies === null ? inProjection(fn) : policies.around(inProjection, fn);
  }

  /**
   * evaluate's batches (batcher.ts): one transaction judges every waiting call in turn on the
   * projection, then writes each touched session and account once. A call that fails before writing
   * anything fails alone; one that fails after fails the batch (the batcher then runs each call on
   * its own).
   */
  type Waiting = { request: EvaluateRequest; malformed: string | null; policy?: CompiledPolicy };
  function evaluateBatch(items: readonly Waiting[], judged: () => void): Promise<Outcome<Evaluated>[]> {
    // The policy counters this batch adds count once it commits (each try of the transaction afresh).
    let layer: CounterLayer | undefined;
    const batch = inProjection(async (ptx) => {
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
  async function policyInForce(): Promise<CompiledPolicy | undefined> {
    if (policies === null) return undefined;
    if (!trust.trusted) await trust.ready();
    await policies.load((fromSeq, limit) => substrate.transaction((tx) => tx.chain.range(fromSeq, limit)));
    const policy = policies.current();
    await policies.publishOnce(policy.hash, async () => {
      await transaction((tx) => auditor.record(tx, POLICY_PUBLISHED, publishedData(policy), clock.nowNs()));
    });
    return policy;
  }
  const evaluations = new Batcher<Waiting, Evaluated>(evaluateBatch, maxBatch);
  /** Submits a call with the policy in force; without waiting once the chain is trusted, loaded, published. */
  function submitUnderPolicy(request: EvaluateRequest, malformed: string | null): Promise<Evaluated> {
    const ready = trust.trusted ? policies!.ready() : undefined;
    if (ready !== undefined) return evaluations.submit({ request, malformed, policy: ready });
    return policyInForce().then((policy) => evaluations.submit({ request, malformed, policy }));
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

  async function loadSession(tx: SubstrateTx, sessionId: string): Promise<SessionRecord> {
    checkSessionId(sessionId);
    const session = await tx.sessions.get(sessionId);
    if (session === null)
      throw new LeashError("session_not_found", `unknown session ${JSON.stringify(sessionId)}`);
    return session;
  }

  /** Expires the due requests among `rows`, one transaction per session; returns the events. */
  async function expireRows(rows: readonly HitlRequest[]): Promise<HitlEvent[]> {
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
      const done = await transaction(async (tx) => {
        const found: HitlEvent[] = [];
        if ((await tx.sessions.get(sessionId)) === null) return found;
        const at = clock.nowNs();
        for (const requestId of ids) {
          const command = { kind: "expire", sessionId, requestId } as const;
          const { reply } = await runCommand<ExpireReply>(tx, auditor, command, envAt(at));
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
  async function readRequest(requestId: string): Promise<HitlRequest> {
    const row = await substrate.transaction((tx) => tx.hitl.get(requestId));
    if (row === null) {
      throw new LeashError("hitl_not_found", `no HITL request ${JSON.stringify(requestId)}`);
    }
    return row;
  }

  /** Expires the due requests of one session (of every session without one). */
  async function expireSession(sessionId?: string): Promise<HitlEvent[]> {
    const pending = await substrate.transaction((tx) =>
      tx.hitl.list(sessionId === undefined ? { status: "PENDING" } : { sessionId, status: "PENDING" }),
    );
    return expireRows(pending);
  }

  async function remainingOf(tx: SubstrateTx, session: SessionRecord): Promise<string | null> {
    if (!budgetEnabled(session.config)) return null;
    return (await available(tx, sessionAccountId(session.config, session))).toFixed();
  }

  async function view(tx: SubstrateTx, session: SessionRecord): Promise<SessionView> {
    return {
      session_id: session.session_id,
      agent_id: session.agent_id,
      organization_id: session.organization_id,
      status: session.status,
      config: session.config,
      state: session.state,
      call_count: session.call_count,
      budget_remaining_usd: await remainingOf(tx, session),
    };
  }

  function postExecIn(request: PostExecRequest, span: EngineSpan): Promise<PostExecResult> {
    if (typeof request !== "object" || request === null) {
      return Promise.reject(new LeashError("invalid_argument", "postExec needs a request object"));
    }
    const { call_number: callNumber } = request;
    if (!Number.isSafeInteger(callNumber) || callNumber < 1) {
      return Promise.reject(
        new LeashError("invalid_argument", "call_number must be a whole number of at least 1"),
      );
    }
    let actual: Money;
    try {
      actual = toMoney(request.actual_cost_usd);
    } catch (cause) {
      return Promise.reject(
        new LeashError("invalid_argument", `actual_cost_usd: ${(cause as Error).message}`, { cause }),
      );
    }
    return transaction(async (tx) => {
      const session = await loadSession(tx, request.session_id);
      const nowNs = clock.nowNs();
      if (!budgetEnabled(session.config)) {
        // Without a budget no hold records which calls were allowed; a call never evaluated is
        // still refused.
        if (callNumber > session.call_count) throw neverAllowed(session.session_id, callNumber);
        return {
          session_id: session.session_id,
          call_number: callNumber,
          actual_usd: actual.toFixed(),
          overrun_usd: "0",
          budget_remaining_usd: null,
          replayed: false,
          late: false,
        };
      }
      const id = holdId(session.session_id, callNumber);
      const hold = await tx.budgets.getReservation(id);
      if (hold === null) throw neverAllowed(session.session_id, callNumber);
      const settled = await settleOnce(tx, hold, actual, nowNs, request.idempotency_key ?? `postexec:${id}`);
      const accounts = await accountChain(tx, sessionAccountId(session.config, session));
      const remaining = chainAvailable(accounts).toFixed();
      if (!settled.replayed) {
        const entry = await auditor.record(
          tx,
          "post_exec",
          {
            session_id: session.session_id,
            call_number: callNumber,
            reservation_id: id,
            estimated_usd: settled.amount_usd.toFixed(),
            actual_usd: settled.actual_usd.toFixed(),
            overrun_usd: settled.overrun_usd.toFixed(),
            success: request.success ?? true,
            ...(request.success === false && recordableErrorText(request.error_message) !== undefined
              ? { error_message: recordableErrorText(request.error_message) }
              : {}),
            budget_after_usd: remaining,
            // Came at or after the hold's expiry; `hold_status` EXPIRED: the hold had been charged
            // at its estimate (settled_by_expiry), and this corrects the charge to the actual.
            late: settled.late,
            hold_status: hold.status,
            // How far past its limit this left the budget (0 within it): what an overrun beyond
            // what was left amounts to, while the remaining reads 0.
            over_limit_usd: chainOverLimit(accounts).toFixed(),
            // The key the settlement is stored under, for replay (a retry with it is a no-op).
            idempotency_key: settled.reservation.idempotency_key,
          },
          nowNs,
        );
        if (span.recording) span.set({ "leash.chain.seq": entry.seq });
        const spent = toMoney(session.state.budget_spent_usd ?? 0).plus(actual);
        await tx.sessions.update({
          ...session,
          state: {
            ...session.state,
            budget_spent_usd: spent.toNumber(),
            budget_remaining_usd: Number(remaining),
          },
          updated_ns: nowNs,
        });
      }
      return {
        session_id: session.session_id,
        call_number: callNumber,
        actual_usd: settled.actual_usd.toFixed(),
        overrun_usd: settled.overrun_usd.toFixed(),
        budget_remaining_usd: remaining,
        replayed: settled.replayed,
        late: settled.late,
      };
    });
  }

  function resumeIn(input: ResumeRequest, span: EngineSpan): Promise<SessionView> {
    let request: ReturnType<typeof checkResumeRequest>;
    try {
      request = checkResumeRequest(input); // before the transaction: bad input records nothing
    } catch (error) {
      return Promise.reject(error);
    }
    // An answer after the deadline finds the expiry recorded, and is refused (LeashHitlExpired).
    return expireSession(request.session_id)
      .then(() =>
        transaction(async (tx) => {
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
            envAt(clock.nowNs()),
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
          return { view: await view(tx, next), decided };
        }),
      )
      .then(({ view: answered, decided }) => {
        events.emit({ type: "hitl_decided", request: hitlView(decided) });
        return answered;
      });
  }

  return {
    substrate,

    async register(request) {
      const config = validateConfig(request.config);
      if (!config.ok)
        throw new LeashError("config_invalid", `invalid guard config: ${config.errors.join("; ")}`);
      if (typeof request.agent_id !== "string" || request.agent_id === "") {
        throw new LeashError("invalid_argument", "agent_id must be a non-empty string");
      }
      return transaction(async (tx) => {
        const command: RegisterCommand = {
          kind: "register",
          sessionId: request.session_id ?? null,
          agentId: request.agent_id,
          organizationId: request.organization_id ?? "default",
          config: config.value,
        };
        const { reply } = await runCommand<{ session: SessionRecord }>(
          tx,
          auditor,
          command,
          envAt(clock.nowNs()),
        );
        return view(tx, reply.session);
      });
    },

    evaluate(request) {
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
          : submitUnderPolicy(request, malformed);
      const answer = submitted.then(
        ({ result, entry, hitl }) => {
          for (const event of hitl) events.emit(event);
          return { ...result, receipt: compactJws(entry) };
        },
        async (error: unknown) => {
          if (error instanceof ChainUnverifiedError) return chainUnverified(request, error);
          // Two engines raced on one message and this one lost: it answers with the winner's decision.
          const recorded = await recordedAfterConflict(substrate, request, error, signedByKnownKey);
          if (recorded === null) throw error;
          return { ...recorded.result, receipt: compactJws(recorded.entry) };
        },
      );
      return span.recording ? answer.then(...endSpan(span, evaluateAttributes)) : answer;
    },

    postExec(request) {
      const span = tracing.start(SPAN_POST_EXEC, request?.traceparent, () =>
        defined({
          "gen_ai.operation.name": "execute_tool",
          "gen_ai.tool.call.id": callIdOf(request?.call_id, undefined),
          "leash.session_id": typeof request?.session_id === "string" ? request.session_id : undefined,
          "leash.call_number": typeof request?.call_number === "number" ? request.call_number : undefined,
        }),
      );
      const answer = postExecIn(request, span);
      return span.recording ? answer.then(...endSpan(span, postExecAttributes)) : answer;
    },

    getSession(sessionId) {
      // A read: it decides and appends nothing, so it needs no verified chain (read-only tools use it
      // without any trusted key); what it returns is the snapshot, which `leash verify --replay` checks.
      return substrate.transaction(async (tx) => view(tx, await loadSession(tx, sessionId)));
    },

    resume(input) {
      const span = tracing.start(SPAN_RESUME, input?.traceparent, () =>
        defined({
          "gen_ai.operation.name": "execute_tool",
          "leash.session_id": typeof input?.session_id === "string" ? input.session_id : undefined,
          "leash.hitl.decision": typeof input?.decision === "string" ? input.decision : undefined,
        }),
      );
      const answer = resumeIn(input, span);
      return span.recording ? answer.then(...endSpan(span, resumeAttributes)) : answer;
    },

    async listHitl(filter = {}) {
      if (filter === null || typeof filter !== "object") {
        throw new LeashError("invalid_argument", "listHitl takes a filter object");
      }
      const status = filter.status === undefined ? undefined : storedStatus(filter.status);
      if (filter.sessionId !== undefined) checkSessionId(filter.sessionId);
      if (filter.recordExpiry !== false) await expireSession(filter.sessionId);
      const rows = await substrate.transaction((tx) =>
        tx.hitl.list({
          ...(filter.sessionId === undefined ? {} : { sessionId: filter.sessionId }),
          ...(status === undefined ? {} : { status }),
        }),
      );
      rows.sort((a, b) => a.created_ns - b.created_ns || a.request_id.localeCompare(b.request_id));
      return rows.map(hitlView);
    },

    async getHitl(requestId) {
      if (typeof requestId !== "string" || requestId === "") {
        throw new LeashError("invalid_argument", "a request id must be a non-empty string");
      }
      return hitlView(await readRequest(requestId));
    },

    async answerHitl(requestId, answer) {
      const checked = checkHitlAnswer(requestId, answer);
      const found = await readRequest(requestId);
      // Past its expiry: the expiry is recorded (its own commit) and this answer refused below.
      await expireRows([found]);
      // Named outside the transaction, which a substrate may retry: one successor per answer.
      const successor =
        checked.params === null
          ? undefined
          : { nonce: answer.successorNonce ?? newId(), args_digest: canonicalHash(checked.params) };
      const decided = await transaction(async (tx) => {
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
        return (await runCommand<AnswerReply>(tx, auditor, command, envAt(clock.nowNs()))).reply.decided;
      });
      const answered = hitlView(decided);
      events.emit({ type: "hitl_decided", request: answered });
      return answered;
    },

    async waitForHitl(requestId, waitOptions = {}) {
      const { signal, timeoutMs } = waitOptions;
      if (timeoutMs !== undefined && (typeof timeoutMs !== "number" || !(timeoutMs >= 0))) {
        throw new LeashError(
          "invalid_argument",
          `timeoutMs must be a number of milliseconds, got ${String(timeoutMs)}`,
        );
      }
      signal?.throwIfAborted();
      const first = await this.getHitl(requestId);
      if (first.status !== "pending") return first;
      return new Promise<HitlRequestView>((resolve, reject) => {
        let latest = first;
        let done = false;
        let poller: ReturnType<typeof setTimeout> | undefined;
        let deadline: ReturnType<typeof setTimeout> | undefined;
        const finish = (settle: () => void) => {
          if (done) return;
          done = true;
          clearTimeout(poller);
          clearTimeout(deadline);
          off();
          signal?.removeEventListener("abort", onAbort);
          settle();
        };
        // An answer or expiry through this engine resolves the wait at once.
        const off = events.on((event) => {
          if (event.type !== "hitl_request" && event.request.request_id === requestId) {
            finish(() => resolve(event.request));
          }
        });
        const onAbort = () => finish(() => reject(signal?.reason));
        signal?.addEventListener("abort", onAbort, { once: true });
        if (signal?.aborted) onAbort(); // aborted while the first read was under way
        if (timeoutMs !== undefined) deadline = setTimeout(() => finish(() => resolve(latest)), timeoutMs);
        // The next poll comes at the poll interval, or sooner when the request expires before it.
        const delayFor = (request: HitlRequestView) =>
          request.expires_ns === null
            ? pollMs
            : Math.min(pollMs, Math.max(1, Math.ceil((request.expires_ns - clock.nowNs()) / 1e6)));
        const poll = async () => {
          try {
            let current = await this.getHitl(requestId);
            if (
              current.status === "pending" &&
              current.expires_ns !== null &&
              clock.nowNs() >= current.expires_ns
            ) {
              await expireRows([await readRequest(requestId)]);
              current = await this.getHitl(requestId);
            }
            latest = current;
            if (current.status !== "pending") finish(() => resolve(current));
            else if (!done) poller = setTimeout(poll, delayFor(current));
          } catch (error) {
            finish(() => reject(error));
          }
        };
        poller = setTimeout(poll, delayFor(first));
      });
    },

    onHitlEvent(listener) {
      if (typeof listener !== "function") {
        throw new LeashError("invalid_argument", "onHitlEvent takes a listener function");
      }
      return events.on(listener);
    },

    async expireHitl(expireOptions = {}) {
      if (expireOptions.sessionId !== undefined) checkSessionId(expireOptions.sessionId);
      return (await expireSession(expireOptions.sessionId)).length;
    },

    reset(sessionId, operatorId) {
      if (typeof operatorId !== "string" || operatorId === "") {
        return Promise.reject(
          new LeashError("invalid_argument", "an operator id is required to reset a circuit"),
        );
      }
      return transaction(async (tx) => {
        checkSessionId(sessionId);
        const command = { kind: "reset", sessionId, operatorId } as const;
        const { reply } = await runCommand<SessionRecord>(tx, auditor, command, envAt(clock.nowNs()));
        return view(tx, reply);
      });
    },

    heartbeat(sessionId) {
      return transaction(async (tx) => {
        checkSessionId(sessionId);
        await runCommand(tx, auditor, { kind: "heartbeat", sessionId }, envAt(clock.nowNs()));
      });
    },

    markStale(sessionId, options) {
      return transaction(async (tx) => {
        checkSessionId(sessionId);
        const command: MarkStaleCommand = {
          kind: "mark_stale",
          sessionId,
          staleAfterNs: options.staleAfterNs,
          heartbeatIntervalMs: options.heartbeatIntervalMs ?? null,
          missedHeartbeats: options.missedHeartbeats ?? null,
        };
        const { entries } = await runCommand(tx, auditor, command, envAt(clock.nowNs()));
        const entry = entries[0];
        return entry === undefined ? null : { entry_seq: entry.seq, entry_hash: entry.entry_hash };
      });
    },

    createGuard(guard) {
      return transaction(async (tx) => {
        const nowNs = clock.nowNs();
        const account = await ensureAccount(tx, {
          account_id: guardAccountId(guard.guard_id),
          scope: "guard",
          parent_id: guard.parent_guard_id ? guardAccountId(guard.parent_guard_id) : null,
          limit_usd: guard.limit_usd,
          nowNs,
        });
        if (account.created_ns === nowNs) {
          await auditor.record(
            tx,
            "guard_created",
            {
              guard_id: guard.guard_id,
              parent_guard_id: guard.parent_guard_id ?? null,
              limit_usd: account.limit_usd,
            },
            nowNs,
          );
        }
      });
    },

    forgetMessages(beforeNs, limit = 10_000) {
      if (!Number.isInteger(beforeNs) || !Number.isSafeInteger(limit) || limit < 1) {
        return Promise.reject(
          new LeashError(
            "invalid_argument",
            "forgetMessages needs an integral beforeNs and a positive limit",
          ),
        );
      }
      return substrate.transaction((tx) => tx.messages.prune(beforeNs, limit));
    },

    expireReservations(limit = 1000) {
      return transaction(async (tx) => {
        const nowNs = clock.nowNs();
        // An ALLOWed call's hold stays spent at its estimate (the call may have run); a late
        // post-exec corrects it to the actual.
        const charged = await chargeExpired(tx, nowNs, limit);
        for (const r of charged) {
          await auditor.record(tx, "settled_by_expiry", await expiryEntryData(tx, r), nowNs);
        }
        return charged.length;
      });
    },

    async rotateKey(next, operatorId) {
      if (typeof operatorId !== "string" || operatorId === "") {
        throw new LeashError("invalid_argument", "an operator id is required to rotate the signing key");
      }
      await transaction(async (tx) => {
        await auditor.record(
          tx,
          "key_rotation",
          { ...keyRotationData(next), operator_id: operatorId },
          clock.nowNs(),
        );
      });
      auditor.signer = next; // only once the rotation entry is committed
      // A checkpoint past the rotation lets an engine that holds only the next key open from it.
      await checkpoints?.flush();
    },

    get publicKeyHex() {
      return auditor.signer.publicKeyHex;
    },

    async open() {
      try {
        await trust.ready();
      } catch (error) {
        if (!(error instanceof ChainUnverifiedError)) throw error;
      }
      return trust.report!;
    },

    async close() {
      return checkpoints === null ? trust.checkpoint : await checkpoints.flush();
    },
  };
}

/** A remaining budget as a span attribute: a number dashboards can plot (the exact text is in the chain). */
function budgetAttribute(remaining: string | null): number | undefined {
  return remaining === null ? undefined : Number(remaining);
}

/**
 * then() handlers that end a span with its answer's attributes: a DENY is an answer, not an error;
 * only a rejection marks the span as failed.
 */
function endSpan<T>(span: EngineSpan, attributesOf: (answer: T) => Parameters<typeof defined>[0]) {
  return [
    (answer: T) => {
      span.set(defined(attributesOf(answer)));
      span.end();
      return answer;
    },
    (error: unknown): never => {
      span.end(error);
      throw error;
    },
  ] as const;
}

const evaluateAttributes = (result: EvaluateResult) => ({
  "leash.verdict": result.verdict,
  "leash.reason": result.reason,
  "leash.session_id": result.session_id,
  "leash.call_number": result.call_number,
  "leash.budget_remaining_usd": budgetAttribute(result.budget_remaining_usd),
  "leash.chain.seq": result.entry_seq,
});

const postExecAttributes = (result: PostExecResult) => ({
  "leash.budget_remaining_usd": budgetAttribute(result.budget_remaining_usd),
  "leash.actual_usd": Number(result.actual_usd),
  "leash.overrun_usd": Number(result.overrun_usd),
  "leash.replayed": result.replayed,
  "leash.late": result.late,
});

const resumeAttributes = (view: SessionView) => ({
  "leash.session_status": view.status,
  "leash.budget_remaining_usd": budgetAttribute(view.budget_remaining_usd),
});

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
