// createEngine(): library mode — the public API over the engine's flows (flow/): each call becomes a
// state-machine command (@leash/machine), prefetched, decided, signed, written in one batch, committed,
// answered. Composition only: evaluate is flow/evaluate.ts, HITL flow/hitl.ts and flow/waiting.ts, …
import type { Checkpoint, Signer } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { systemClock } from "@leash/outbox";
import { close, forgetMessages, open, rotateKey } from "./flow/admin.js";
import { createGuard, expireReservations, postExec } from "./flow/budget.js";
import { engineContext } from "./flow/context.js";
import { evaluate, evaluationsOf } from "./flow/evaluate.js";
import { answerHitl, expireHitl, getHitl, listHitl, onHitlEvent, resume } from "./flow/hitl.js";
import { getSession, heartbeat, markStale, register, reset } from "./flow/sessions.js";
import { waitForHitl } from "./flow/waiting.js";
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

/** The default clock: epoch nanoseconds that never go backwards within the process. */
export { systemClock };

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
  const ctx = engineContext(options);
  const evaluations = evaluationsOf(ctx);
  return {
    substrate: ctx.substrate,
    register: (request) => register(ctx, request),
    evaluate: (request) => evaluate(ctx, evaluations, request),
    postExec: (request) => postExec(ctx, request),
    getSession: (sessionId) => getSession(ctx, sessionId),
    resume: (input) => resume(ctx, input),
    listHitl: (filter) => listHitl(ctx, filter),
    getHitl: (requestId) => getHitl(ctx, requestId),
    answerHitl: (requestId, answer) => answerHitl(ctx, requestId, answer),
    waitForHitl: (requestId, waitOptions) => waitForHitl(ctx, requestId, waitOptions),
    onHitlEvent: (listener) => onHitlEvent(ctx, listener),
    expireHitl: (expireOptions) => expireHitl(ctx, expireOptions),
    reset: (sessionId, operatorId) => reset(ctx, sessionId, operatorId),
    heartbeat: (sessionId) => heartbeat(ctx, sessionId),
    markStale: (sessionId, staleOptions) => markStale(ctx, sessionId, staleOptions),
    createGuard: (guard) => createGuard(ctx, guard),
    forgetMessages: (beforeNs, limit) => forgetMessages(ctx, beforeNs, limit),
    expireReservations: (limit) => expireReservations(ctx, limit),
    rotateKey: (next, operatorId) => rotateKey(ctx, next, operatorId),
    get publicKeyHex() {
      return ctx.auditor.signer.publicKeyHex;
    },
    open: () => open(ctx),
    close: () => close(ctx),
  };
}
