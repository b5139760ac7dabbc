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
  moneyString,
  planHold,
  type SettleResult,
  settle,
  toMoney,
} from "@leash/budget-guard";
import { type Checkpoint, compactJws, keyRotationData, type Signer } from "@leash/chain";
import {
  type BudgetAccount,
  type Call,
  type ChainEntryRecord,
  canonicalHash,
  canonicalizationError,
  canonicalJson,
  type Decision,
  decide,
  denyProbability,
  feedback,
  type HitlRequest,
  type Nonce,
  type PendingRequest,
  type PendingTransition,
  type Reservation,
  recordHumanDecision,
  resetCircuit,
  type SessionRecord,
  type State,
  type Substrate,
  type SubstrateTx,
} from "@leash/core";
import { validateConfig } from "@leash/core/schema";
import { systemClock } from "@leash/outbox";
import type { CompiledPolicy } from "@leash/policy";
import { budgetEnabled, ensureSessionAccount, guardAccountId, sessionAccountId } from "./accounts.js";
import { Auditor, type ChainHead } from "./audit.js";
import { Batcher, type Outcome } from "./batcher.js";
import {
  malformedInput,
  outranksEstimate,
  recordableErrorText,
  recordableEstimate,
  resolveEstimate,
} from "./call-input.js";
import { ChainTrust, ChainUnverifiedError, trustedKeyMap } from "./chain-trust.js";
import { CheckpointWriter, checkpointIntervalOf } from "./checkpoint-writer.js";
import { countsOnly } from "./count-only.js";
import { LeashAlreadyDecided, LeashError, LeashHitlExpired } from "./errors.js";
import { expiryEntryData } from "./expiry-entry.js";
import {
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  consumedTransitionOf,
  type EngineDecision,
  HITL_TIMEOUT,
  hasTransition,
  PARAMS_HASH_MISMATCH,
  pausedOf,
  releasesApproval,
  timedOut,
} from "./hitl-binding.js";
import { HitlEvents } from "./hitl-events.js";
import { hitlExpiresNs, hitlView, isDue, storedStatus, TIMEOUT_OPERATOR } from "./hitl-view.js";
import { MAX_RESERVATION_TTL_S } from "./limits.js";
import { decideOnce, messagePairs, recordedAfterConflict } from "./message-ids.js";
import { maxParamsBytes, oversizedBytes, PARAMS_TOO_LARGE } from "./params-cap.js";
import { estimateWithPolicy, judgeByPolicy, policyFields } from "./policy-layer.js";
import {
  type CounterLayer,
  chainRange,
  EnginePolicies,
  POLICY_PUBLISHED,
  publishedData,
} from "./policy-runtime.js";
import { Projection, type ProjectionTx } from "./projection.js";
import { repeatSeen } from "./repeat-seen.js";
import {
  canonicalParamsText,
  nodeSha256Hex,
  nodeSha256HexOfBytes,
  paramsBlobOf,
  replayInputs,
} from "./replay-inputs.js";
import { checkHitlAnswer, checkResumeRequest } from "./resume-input.js";
import { StateAuth, StateUnverifiedError, stateUnverified } from "./state-auth.js";
import { runSteps, type Steps, type StepsResult } from "./steps.js";
import { denyListed } from "./tool-policy.js";
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
  HumanDecision,
  PostExecRequest,
  PostExecResult,
  RegisterRequest,
  ResumeRequest,
  SessionView,
  WaitForHitlOptions,
} from "./types.js";

/** The default clock: epoch nanoseconds that never go backwards within the process. */
export { systemClock };

const reservationId = (sessionId: string, callNumber: number) => `${sessionId}#${callNumber}`;

/** A verdict as the engine returns it: decide()'s, or one of the engine's own reasons. */
type Verdicted = EngineDecision;

const MALFORMED: Verdicted = { verdict: "DENY", reason: "policy_violation:malformed_input" };
const OVERRUN: Verdicted = { verdict: "DENY", reason: "budget_overrun" };

/** State as stored: seen nonces are the chain entries' (NonceStore), not the session row's. */
function storable(state: State): State {
  const { seen_nonces: _omit, ...rest } = state;
  return rest;
}

/** State without its remaining budget: feedback then leaves that field to the caller. */
function withoutRemaining(state: State): State {
  const { budget_remaining_usd: _omit, ...rest } = state;
  return rest;
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

/**
 * The hold TTL in nanoseconds, checked here so a bad value is a clear error at creation, not an
 * internal one at the first ALLOW (an expiry past 2^63 ns overflows the stores' integer columns).
 */
function reservationTtlNs(ms: number | undefined): number {
  if (ms === undefined) return 300_000 * 1e6;
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

/** An unanswered request of the session is past its expiry: evaluate records the expiry first. */
function dueInState(state: State, nowNs: number): boolean {
  const paused = pausedOf(state);
  return (
    paused !== null &&
    paused.expired !== true &&
    typeof paused.expires_ns === "number" &&
    paused.expires_ns <= nowNs &&
    (state.pending_transition === null || state.pending_transition === undefined)
  );
}

const DEFAULT_HITL_POLL_MS = 500;

/** Params read with their number texts (the CLI's) keep them in the stored JSON, as their digest does. */
const NUMBER_TEXT = { numberText: true } as const;

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
  const projection = new Projection(
    new StateAuth(
      (entry) => trust.vouchesForStamp(entry),
      (tx) => auditor.checkChain(tx),
    ),
  );
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
  type Evaluated = StepsResult<ReturnType<typeof evaluateSteps>>;
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
              () => evaluateSteps(ptx, request, malformed, policy, layer),
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

  function checkSessionId(sessionId: unknown): asserts sessionId is string {
    if (typeof sessionId !== "string" || sessionId === "") {
      throw new LeashError("invalid_argument", "session_id must be a non-empty string");
    }
  }

  /** The account chain (the account, then its ancestors) when the projection holds all of it; else undefined. */
  function accountsInMemory(tx: ProjectionTx, accountId: string): BudgetAccount[] | undefined {
    const chain: BudgetAccount[] = [];
    for (let id: string | null = accountId; id !== null; ) {
      const at = id;
      // A cycle is accountChain's to report.
      if (chain.some((account) => account.account_id === at)) return undefined;
      const account = tx.accountRows.peek(at);
      if (account === undefined) return undefined;
      chain.push(account);
      id = account.parent_id;
    }
    return chain;
  }

  async function loadSession(tx: SubstrateTx, sessionId: string): Promise<SessionRecord> {
    checkSessionId(sessionId);
    const session = await tx.sessions.get(sessionId);
    if (session === null)
      throw new LeashError("session_not_found", `unknown session ${JSON.stringify(sessionId)}`);
    return session;
  }

  /**
   * Marks the request whose approval `state` released as used, and only that one. A state written
   * before requests were named in it consumes every decided request of the session instead.
   */
  async function consumeApproval(tx: SubstrateTx, sessionId: string, state: State): Promise<void> {
    const id = boundRequestId(state);
    const rows = id === null ? await tx.hitl.list({ sessionId, status: "DECIDED" }) : [await tx.hitl.get(id)];
    for (const row of rows) {
      if (row !== null && row.session_id === sessionId && row.status === "DECIDED") {
        await tx.hitl.update({ ...row, status: "CONSUMED" });
      }
    }
  }

  /**
   * The request a human's answer lands on: the session's open (PENDING) one, or the one named, if it
   * is that one. Read under the session row's lock, so two answers at once find it one after the
   * other: the second sees the first's answer and is told so (LeashAlreadyDecided).
   */
  async function answeredRequest(
    tx: SubstrateTx,
    session: SessionRecord,
    requestId?: string,
  ): Promise<HitlRequest> {
    const sessionId = session.session_id;
    const pending = await tx.hitl.list({ sessionId, status: "PENDING" });
    const open = pending.sort((a, b) => b.call_number - a.call_number)[0];
    if (requestId !== undefined) {
      const named = await tx.hitl.get(requestId);
      if (named === null || named.session_id !== sessionId) {
        throw new LeashError(
          "no_pending_request",
          `session ${sessionId} has no request ${JSON.stringify(requestId)}`,
        );
      }
      if (named.status === "EXPIRED") throw new LeashHitlExpired(named);
      if (named.status !== "PENDING") throw new LeashAlreadyDecided(named);
      if (named.request_id !== open?.request_id) {
        throw new LeashError(
          "invalid_argument",
          `request ${named.request_id} of session ${sessionId} was superseded by request ${open?.request_id} (call ${open?.call_number})`,
        );
      }
      return named;
    }
    if (open !== undefined) return open;
    // The state names the last request a human answered until its answer is used (or reset).
    const lastId = boundRequestId(session.state);
    const last = lastId === null ? null : await tx.hitl.get(lastId);
    if (last !== null && last.session_id === sessionId) {
      throw last.status === "EXPIRED" ? new LeashHitlExpired(last) : new LeashAlreadyDecided(last);
    }
    throw new LeashError("no_pending_request", `session ${sessionId} has no call awaiting a human`);
  }

  /**
   * Records that request `requestId` of `session` (locked by the caller) expired unanswered, when it
   * is still PENDING and past its expiry: the row, the session's paused call (so its next attempt is
   * told hitl_timeout) and a hitl_expired entry by "system:timeout". Returns the session as it now is.
   */
  async function expireIn(
    tx: SubstrateTx,
    session: SessionRecord,
    requestId: string,
    nowNs: number,
    expired: HitlEvent[],
  ): Promise<SessionRecord> {
    const row = await tx.hitl.get(requestId);
    if (row === null || row.session_id !== session.session_id || !isDue(row, nowNs)) return session;
    const closed: HitlRequest = {
      ...row,
      status: "EXPIRED",
      operator_id: TIMEOUT_OPERATOR,
      decided_ns: nowNs,
    };
    await tx.hitl.update(closed);
    let next = session;
    const paused = pausedOf(session.state);
    if (paused !== null && paused.request_id === row.request_id) {
      next = {
        ...session,
        state: { ...session.state, pending_request: { ...paused, expired: true } as PendingRequest },
        updated_ns: nowNs,
      };
      await tx.sessions.update(next);
    }
    await auditor.record(
      tx,
      "hitl_expired",
      {
        session_id: session.session_id,
        request_id: row.request_id,
        call_number: row.call_number,
        tool_name: row.tool_name,
        nonce: row.nonce,
        args_digest: row.args_digest,
        operator_id: TIMEOUT_OPERATOR,
        expires_ns: row.expires_ns,
        now_ns: nowNs,
      },
      nowNs,
    );
    expired.push({ type: "hitl_expired", request: hitlView(closed) });
    return next;
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
        let session = await tx.sessions.get(sessionId);
        if (session === null) return found;
        const at = clock.nowNs();
        for (const id of ids) session = await expireIn(tx, session, id, at, found);
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

  /** Writes a human's answer on `open` (the session's open request, locked with its session). */
  async function answerIn(
    tx: SubstrateTx,
    session: SessionRecord,
    open: HitlRequest,
    answer: {
      decision: HumanDecision;
      operator_id: string;
      successor?: { nonce: Nonce; args_digest: string } | undefined;
      successor_params_json?: string | null;
      comment?: string | null;
    },
  ): Promise<{ next: SessionRecord; decided: HitlRequest; entry: ChainEntryRecord }> {
    const nowNs = clock.nowNs();
    const state = recordHumanDecision(
      { ...session.state, pending_request: boundRequest(open) },
      answer.decision,
      answer.successor && { nonce: answer.successor.nonce, argsDigest: answer.successor.args_digest },
    );
    // Every answer closes its request, defer and escalate too: the agent's next attempt then asks
    // again as a new request, so no request can take two answers.
    const decided: HitlRequest = {
      ...open,
      status: "DECIDED",
      decision: answer.decision,
      operator_id: answer.operator_id,
      successor_nonce: answer.successor?.nonce ?? null,
      successor_args_digest: answer.successor?.args_digest ?? null,
      successor_params_json: answer.successor_params_json ?? null,
      comment: answer.comment ?? null,
      decided_ns: nowNs,
    };
    await tx.hitl.update(decided);
    const next: SessionRecord = {
      ...session,
      status: state.status ?? session.status,
      state: storable(state),
      updated_ns: nowNs,
    };
    await tx.sessions.update(next);
    const entry = await auditor.record(
      tx,
      "hitl_decision",
      {
        session_id: session.session_id,
        request_id: open.request_id,
        call_number: open.call_number,
        tool_name: open.tool_name,
        decision: answer.decision,
        operator_id: answer.operator_id,
        nonce: open.nonce,
        args_digest: open.args_digest,
        successor: answer.successor ?? null,
        ...(answer.comment ? { comment: answer.comment } : {}),
      },
      nowNs,
    );
    return { next, decided, entry };
  }

  /** Expires the due requests of one session (of every session without one). */
  async function expireSession(sessionId?: string): Promise<HitlEvent[]> {
    const pending = await substrate.transaction((tx) =>
      tx.hitl.list(sessionId === undefined ? { status: "PENDING" } : { sessionId, status: "PENDING" }),
    );
    return expireRows(pending);
  }

  /** The approval (or modify successor) that released `nonce` and was used, as a consumed transition. */
  async function consumedTransition(
    tx: SubstrateTx,
    sessionId: string,
    nonce: Nonce,
  ): Promise<PendingTransition | null> {
    return consumedTransitionOf(await tx.hitl.list({ sessionId, status: "CONSUMED" }), nonce);
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

  /**
   * The verdict and the entry that records it; the receipt is made from the entry after COMMIT.
   * A step function (steps.ts): it yields where it needs the store, and runs synchronously, from
   * decide to signed entry, when the projection holds the session, its accounts, the head and the
   * nonce (the batch read them first), as it does for all but a batch's cold paths.
   */
  function* evaluateSteps(
    tx: ProjectionTx,
    request: EvaluateRequest,
    malformed: string | null,
    policy?: CompiledPolicy,
    layer?: CounterLayer,
  ): Steps<{ result: Omit<EvaluateResult, "receipt">; entry: ChainEntryRecord; hitl: HitlEvent[] }> {
    checkSessionId(request.session_id); // before any statement names it
    // A malformed call is denied without its tool name or nonce reaching a store or the chain.
    const nonce = malformed === null ? request.nonce : undefined;
    const hasNonce = nonce !== undefined && nonce !== null;
    const loaded: SessionRecord =
      tx.sessionRows.peek(request.session_id) ?? (yield loadSession(tx, request.session_id));
    // The nonce lookup needs no lock of its own: the session row's lock orders its calls.
    const seen: boolean = !hasNonce
      ? false
      : (tx.spentNow(request.session_id, nonce) ?? (yield tx.nonces.has(request.session_id, nonce)));
    const { config } = loaded;
    const nowNs = clock.nowNs();
    const hitlEvents: HitlEvent[] = [];
    // A request past its expiry is closed before this call is judged (lazily: nothing else watches the clock).
    const session: SessionRecord = dueInState(loaded.state, nowNs)
      ? yield expireIn(tx, loaded, pausedOf(loaded.state)!.request_id, nowNs, hitlEvents)
      : loaded;
    // The budget the decision sees is the chain's live remaining, read under the transaction's locks.
    const accountId = budgetEnabled(config) ? sessionAccountId(config, session) : null;
    // Under a budget every call needs a valid estimate (its own or the config's default for its tool);
    // decide() is shown the exact hold as a number, the ledger judges the hold itself.
    const estimate =
      accountId === null || malformed !== null
        ? null
        : resolveEstimate(
            config,
            request.tool_name,
            estimateWithPolicy(policy, request.tool_name, session, request.estimated_cost_usd),
          );
    const call: Call = {
      tool_name: malformed === null ? request.tool_name : "",
      params: request.params,
      nonce,
      estimated_cost_usd:
        estimate === null
          ? (request.estimated_cost_usd as number | undefined)
          : !estimate.ok
            ? undefined
            : estimate.hold === null
              ? Number.POSITIVE_INFINITY
              : estimate.hold.toNumber(),
    };
    const state: State = { ...session.state, seen_nonces: seen && hasNonce ? [nonce] : [] };
    // A re-dispatch of an approval already used: decide() is shown that approval as consumed, so rule 3
    // answers duplicate_resume_no_effect (spec §3.6). Looked up only for a nonce already seen.
    const replayed: PendingTransition | null =
      seen && hasNonce && malformed === null && !hasTransition(state)
        ? yield consumedTransition(tx, session.session_id, nonce)
        : null;
    if (replayed !== null) state.pending_transition = replayed;
    let remainingBefore: Money | null = null;
    // Read (and on PostgreSQL locked) once: the same rows serve the decision and the hold below;
    // the chain head is read with them (after them, in lock order) for the entry this call writes.
    let accounts: readonly BudgetAccount[] | undefined;
    if (accountId !== null) accounts = accountsInMemory(tx, accountId) ?? (yield accountChain(tx, accountId));
    const known = tx.headNow();
    const head: ChainHead | null = known !== undefined ? known : yield tx.chain.head();
    if (accountId !== null) {
      remainingBefore = chainAvailable(accounts!);
      state.budget_initial_usd = config.budget_usd;
      state.budget_remaining_usd = remainingBefore.toNumber();
    }
    const previousError = recordableErrorText(request.previous_error);
    const rngValue =
      denyProbability(config as Record<string, unknown>, state as Record<string, unknown>) > 0 ? rng() : null;
    // An approval decide() releases must also be spent by the paused tool (hitl-binding.ts).
    let decision: Verdicted =
      malformed === null
        ? bindToPausedTool(
            decide(config, state, call, {
              nowNs,
              rng: rngValue ?? undefined,
              ...(previousError === undefined ? {} : { errorText: previousError }),
              sha256Hex: nodeSha256Hex,
              sha256HexOfBytes: nodeSha256HexOfBytes,
            }),
            state,
            call,
          )
        : MALFORMED;
    // A tool in the config's denied_tools never runs (tool-policy.ts).
    if (malformed === null) decision = denyListed(decision, config, call);
    if (estimate !== null && !estimate.ok && !outranksEstimate(decision)) {
      decision = { verdict: "DENY", reason: estimate.reason };
    }
    // The paused call's request expired unanswered: its next attempt is told so, unless denied anyway.
    if (malformed === null && decision.verdict !== "DENY" && timedOut(state, call)) decision = HITL_TIMEOUT;
    const paramsValue = call.params ?? {};
    // The canonical text is kept for the entry (replay re-runs decide() on it); its digest is the hash.
    const paramsText = canonicalizationError(paramsValue) === null ? canonicalParamsText(paramsValue) : null;
    const paramsHash = paramsText === null ? null : nodeSha256Hex(paramsText);
    const expectedHash = request.expected_params_hash;
    if (expectedHash !== undefined && expectedHash !== null && expectedHash !== paramsHash) {
      decision = PARAMS_HASH_MISMATCH;
    }
    // Params over the guard's cap are refused whatever else was decided, and never stored (params-cap.ts).
    const tooLarge = oversizedBytes(paramsText, maxParamsBytes(config));
    if (tooLarge !== null) decision = PARAMS_TOO_LARGE;
    // Large params are stored once by digest beside the chain, not in every entry (params-cap.ts).
    const blob = paramsBlobOf(paramsText, paramsHash, tooLarge);
    // The operator's policy, after every SP/1.0 and engine check allowed, before the hold (README).
    const judged =
      policy === undefined || layer === undefined
        ? null
        : judgeByPolicy({
            policy,
            decision,
            malformed: malformed !== null,
            session,
            state,
            toolName: call.tool_name,
            paramsHash,
            paramsText,
            estimate: call.estimated_cost_usd,
            budget:
              remainingBefore === null
                ? null
                : { limit_usd: Number(config.budget_usd), remaining_usd: remainingBefore.toNumber() },
            nowNs,
            counters: policies!.view(layer, session.organization_id),
          });
    if (judged !== null) decision = judged.decision;
    const callNumber = session.call_count + 1;
    const repeatCount = repeatSeen(state, call.tool_name);

    let reservation_id: string | null = null;
    let remainingAfter = remainingBefore;
    // Spent on ALLOW (even one the ledger then turns into a DENY, as replay folds it): the decision
    // entry carries it in its indexed nonce column, whose append fails the whole transaction with
    // "conflict" should it be spent after all (fail closed: verdict and entry roll back together).
    let spends: { nonce: Nonce } | undefined;
    if (decision.verdict === "ALLOW") {
      if (hasNonce) spends = { nonce };
      if (accountId !== null && estimate?.ok === true && estimate.hold === null) {
        decision = OVERRUN; // beyond the money range: more than any budget holds
      } else if (accountId !== null && estimate?.ok === true && estimate.hold !== null) {
        // reserve() with its writes held in the projection (call numbers only grow, so the hold id
        // is new, as reserve's `fresh` says): no store call of its own.
        const held = planHold(accounts!, {
          reservation_id: reservationId(session.session_id, callNumber),
          account_id: accountId,
          session_id: session.session_id,
          call_number: callNumber,
          amount_usd: estimate.hold,
          nowNs,
          ttlNs,
        });
        // decide() judged a float snapshot; the exact ledger has the last word (fail closed).
        if (held.ok) {
          for (const account of held.charged) tx.accountRows.update(account.account_id, account);
          tx.holdNow(held.reservation);
          reservation_id = held.reservation.reservation_id;
          remainingAfter = held.result.availableAfter;
        } else {
          decision = { verdict: "DENY", reason: held.code };
        }
      }
    }

    // With a ledger, the remaining budget written below is the ledger's, so feedback is not asked
    // for its own float estimate of it (exact decimal work whose result would be overwritten).
    // A tool mismatch, a digest mismatch or a denied tool changes nothing but the call count
    // (count-only.ts): the circuit stays closed and an approval unspent, for the paused call itself.
    let next = countsOnly(decision)
      ? state
      : feedback(config, accountId === null ? state : withoutRemaining(state), call, decision as Decision, {
          nowNs,
          paramsHash,
        });
    // The timeout is told once: the session then no longer waits on that request (the DENY trips
    // the circuit, as a human's reject does).
    if (decision === HITL_TIMEOUT) next = { ...next, pending_request: null, status: "ACTIVE" };
    // The consumed approval was shown to decide() for this call only; the session keeps none.
    if (replayed !== null) next = { ...next, pending_transition: session.state.pending_transition ?? null };
    let opened: HitlRequest | null = null;
    if (decision.verdict === "HITL") {
      const account = accounts?.[0];
      const request: HitlRequest = {
        request_id: newId(),
        session_id: session.session_id,
        call_number: callNumber,
        tool_name: call.tool_name,
        nonce: hasNonce ? nonce : null,
        args_digest: paramsHash,
        reason: (decision as Decision).reason, // decide()'s, or a policy rule's (policy_hitl:rule:<name>)
        status: "PENDING",
        decision: null,
        operator_id: null,
        successor_nonce: null,
        successor_args_digest: null,
        created_ns: nowNs,
        decided_ns: null,
        // What the operator judges: the exact params (canonical JSON, so the digest can be checked
        // by eye or by tool), the budget as it stood, and which policy paused the call.
        params_json: paramsHash === null ? null : canonicalJson(paramsValue, NUMBER_TEXT),
        budget_spent_usd: account === undefined ? null : account.spent_usd,
        budget_limit_usd: account === undefined ? null : account.limit_usd,
        budget_remaining_usd: remainingBefore === null ? null : remainingBefore.toFixed(),
        policy_id: canonicalHash(config),
        expires_ns: hitlExpiresNs(config, nowNs),
        comment: null,
        successor_params_json: null,
      };
      yield tx.hitl.insert(request);
      opened = request;
      // The state names the request, so the human's answer and its use are tied to this one.
      next = { ...next, pending_request: boundRequest(request) };
    }
    if (releasesApproval(decision)) yield consumeApproval(tx, session.session_id, state);

    const remaining = remainingAfter === null ? null : remainingAfter.toFixed();
    const estimateUsd = estimate?.ok === true && estimate.hold !== null ? moneyString(estimate.hold) : null;
    tx.sessionRows.update(session.session_id, {
      ...session,
      status: next.status ?? session.status,
      state: storable({
        ...next,
        budget_remaining_usd: remaining === null ? next.budget_remaining_usd : Number(remaining),
      }),
      call_count: callNumber,
      updated_ns: nowNs,
    });
    const entry: ChainEntryRecord = yield auditor.recordNow(
      tx,
      "decision",
      {
        session_id: session.session_id,
        agent_id: session.agent_id,
        organization_id: session.organization_id,
        call_number: callNumber,
        tool_name: malformed === null ? call.tool_name : null,
        params_hash: paramsHash,
        nonce: hasNonce ? nonce : null,
        estimated_cost_usd: recordableEstimate(request.estimated_cost_usd),
        // The hold the call asked for (its own estimate or its config's default), exact.
        estimate_usd: estimateUsd,
        ...(malformed !== null
          ? { input_problem: malformed }
          : estimate?.ok === false
            ? { input_problem: estimate.problem }
            : {}),
        verdict: decision.verdict,
        reason: decision.reason,
        budget_before_usd: remainingBefore === null ? null : remainingBefore.toFixed(),
        budget_after_usd: remaining,
        reservation_id,
        // The random number probabilistic denial consumed; absent when it did not run.
        ...(rngValue === null ? {} : { rng: rngValue }),
        // An input decide() saw (error amplification), so replay sees it too; absent when not given.
        ...(previousError === undefined ? {} : { previous_error: previousError }),
        // Inputs and outcome only: the state decide() saw is the fold of the entries before this
        // one (replay re-derives it), so it is not copied here; the config is in session_registered.
        now_ns: nowNs,
        // The policy version in force, and what it judged (policy-layer.ts); absent without a policy.
        ...(policy === undefined ? {} : policyFields(policy.hash, judged?.record ?? null)),
        ...replayInputs({
          paramsText,
          paramsBytes: tooLarge,
          paramsBlob: blob !== null,
          expectedHash,
          hitlRequestId: decision.verdict === "HITL" ? boundRequestId(next) : null,
          holdTtlNs: reservation_id === null ? null : ttlNs,
        }),
      },
      nowNs,
      head,
      blob === null ? spends : { ...spends, params: blob },
    );
    if (opened !== null) {
      // Its own entry, so the relay delivers it (a webhook can post it to a chat channel). The params
      // stay in the store: the chain carries their digest only, as decision entries do.
      yield auditor.recordNow(
        tx,
        "hitl_request",
        {
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
        nowNs,
        { seq: entry.seq, entry_hash: entry.entry_hash },
      );
      hitlEvents.push({ type: "hitl_request", request: hitlView(opened) });
    }
    // Last, once nothing can fail: an allowed call's policy counters, counted when the batch commits.
    if (judged?.record != null && decision.verdict === "ALLOW") {
      policies!.stage(layer!, session.organization_id, judged.record, nowNs, entry);
    }
    return {
      result: {
        session_id: session.session_id,
        call_number: callNumber,
        verdict: decision.verdict,
        reason: decision.reason,
        budget_remaining_usd: remaining,
        reservation_id,
        estimate_usd: estimateUsd,
        rng: rngValue,
        params_hash: paramsHash,
        repeat_count: repeatCount,
        entry_seq: entry.seq,
        entry_hash: entry.entry_hash,
        ...(opened === null ? {} : { hitl_request_id: opened.request_id }),
        ...(policy === undefined ? {} : { policy_hash: policy.hash, policy: judged?.record ?? null }),
      },
      entry,
      hitl: hitlEvents,
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
      const id = reservationId(session.session_id, callNumber);
      const hold = await tx.budgets.getReservation(id);
      if (hold === null) throw neverAllowed(session.session_id, callNumber);
      const settled = await settleOnce(tx, hold, actual, nowNs, request.idempotency_key ?? `postexec:${id}`);
      const accounts = await accountChain(tx, sessionAccountId(session.config, session));
      const remaining = chainAvailable(accounts).toFixed();
      if (!settled.replayed) {
        // The session's row first: the entry names the digest of every row it changes (state-auth.ts).
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
          const session = await loadSession(tx, request.session_id);
          const open = await answeredRequest(tx, session, request.request_id);
          const { next, decided, entry } = await answerIn(tx, session, open, request);
          if (span.recording) {
            span.set(
              defined({
                "gen_ai.tool.name": open.tool_name,
                "gen_ai.tool.call.id": callIdOf(undefined, open.nonce),
                "leash.hitl.decision": request.decision,
                "leash.hitl.request_id": open.request_id,
                "leash.call_number": open.call_number,
                "leash.chain.seq": entry.seq,
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
        const nowNs = clock.nowNs();
        const ids = {
          session_id: request.session_id ?? newId(),
          agent_id: request.agent_id,
          organization_id: request.organization_id ?? "default",
        };
        const existing = await tx.sessions.get(ids.session_id);
        if (existing !== null) {
          if (existing.agent_id !== ids.agent_id) {
            throw new LeashError("session_exists", `session ${ids.session_id} belongs to another agent`);
          }
          return view(tx, existing); // resuming a session keeps its config and state
        }
        await ensureSessionAccount(tx, config.value, ids, nowNs);
        const record: SessionRecord = {
          ...ids,
          status: "ACTIVE",
          config: config.value,
          state: {
            circuit_tripped: false,
            total_calls: 0,
            session_started_ns: nowNs,
            ...(budgetEnabled(config.value) ? { budget_initial_usd: config.value.budget_usd } : {}),
          },
          call_count: 0,
          created_ns: nowNs,
          updated_ns: nowNs,
          last_heartbeat_ns: nowNs,
          at_seq: null,
        };
        await tx.sessions.insert(record);
        await auditor.record(tx, "session_registered", { ...ids, config: config.value }, nowNs);
        return view(tx, record);
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
          if (error instanceof StateUnverifiedError) return stateUnverified(request, error);
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
        const session = await loadSession(tx, found.session_id);
        const open = await answeredRequest(tx, session, requestId);
        return (
          await answerIn(tx, session, open, {
            decision: checked.decision,
            operator_id: checked.operator_id,
            successor,
            successor_params_json:
              checked.params === null ? null : canonicalJson(checked.params, NUMBER_TEXT),
            comment: checked.comment,
          })
        ).decided;
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
        const session = await loadSession(tx, sessionId);
        const state = resetCircuit(session.state);
        const nowNs = clock.nowNs();
        const next: SessionRecord = {
          ...session,
          status: state.status ?? "ACTIVE",
          state,
          updated_ns: nowNs,
        };
        await tx.sessions.update(next);
        await auditor.record(
          tx,
          "circuit_reset",
          {
            session_id: session.session_id,
            operator_id: operatorId,
            trip_reason: session.state.circuit_trip_reason ?? null,
          },
          nowNs,
        );
        return view(tx, next);
      });
    },

    heartbeat(sessionId) {
      return transaction(async (tx) => {
        const session = await loadSession(tx, sessionId);
        const nowNs = clock.nowNs();
        // Liveness only, no chain entry: touch writes the heartbeat and nothing else, so it never
        // overwrites a session row another writer holds in memory (SessionStore.touch).
        await tx.sessions.touch(session.session_id, nowNs);
        if (session.status !== "STALE") return;
        // Coming back from STALE is a state change, so it is audited like going stale was.
        await tx.sessions.update({
          ...session,
          status: session.state.status === "PAUSED" ? "PAUSED" : "ACTIVE",
        });
        await auditor.record(tx, "session_revived", { session_id: session.session_id }, nowNs);
      });
    },

    markStale(sessionId, options) {
      return transaction(async (tx) => {
        const session = await loadSession(tx, sessionId);
        if (session.status !== "ACTIVE" && session.status !== "PAUSED") return null;
        const nowNs = clock.nowNs();
        const lastSeen = session.last_heartbeat_ns ?? session.created_ns;
        if (nowNs - lastSeen <= options.staleAfterNs) return null; // a heartbeat landed meanwhile
        await tx.sessions.update({ ...session, status: "STALE", updated_ns: nowNs });
        const entry = await auditor.record(
          tx,
          "session_stale",
          {
            session_id: session.session_id,
            agent_id: session.agent_id,
            organization_id: session.organization_id,
            previous_status: session.status,
            last_heartbeat_ns: session.last_heartbeat_ns,
            last_seen_ns: lastSeen,
            heartbeat_interval_ms: options.heartbeatIntervalMs ?? null,
            missed_heartbeats: options.missedHeartbeats ?? null,
            now_ns: nowNs,
            reason: "heartbeat_timeout",
          },
          nowNs,
        );
        return { entry_seq: entry.seq, entry_hash: entry.entry_hash };
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
