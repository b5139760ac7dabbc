// The daemon's human-in-the-loop desk over the engine's HITL API: requests as wire views (with the session's
// recent verdicts), operators' answers, waiting agents, and expiry on time. Nobody is authenticated here
// (the console and the handler do that), and nothing is decided here: the engine records every change.
import { randomInt } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  type Engine,
  type HitlRequestView as EngineView,
  LeashAlreadyDecided,
  LeashError,
  LeashHitlExpired,
} from "@leash/engine";
import {
  type HitlDecision,
  HitlDecisionKind,
  type HitlRequestView,
  type HitlStatus,
  type HitlVerdictSummary,
  HitlVerdictSummarySchema,
  paramsFromJson,
  verdictToWire,
} from "@leash/wire";
import type { Logger } from "pino";
import { HitlError } from "./errors.js";
import { DECISION_NAME, ENGINE_STATUS, requestView, type SessionOwner } from "./view.js";

const RECENT_VERDICTS = 20;
const SESSIONS_REMEMBERED = 10_000;
const COMMENT_MAX = 2_000;
/** The successor nonce of a modify: a uint64 on the wire, so a decimal safe integer. */
const MAX_NONCE = 2 ** 48;

export type HitlEventKind = "opened" | "answered" | "expired" | "consumed";
export type HitlListener = (kind: HitlEventKind, view: HitlRequestView) => void;

export interface HitlQueueOptions {
  readonly engine: Engine;
  readonly logger: Logger;
  readonly nowNs: () => number;
}

export interface VerdictNote {
  readonly callNumber: number;
  readonly toolName: string;
  readonly verdict: "ALLOW" | "DENY" | "HITL";
  readonly reason: string;
  readonly budgetRemaining: string | null;
}

const EVENT_KIND: Record<string, HitlEventKind> = {
  hitl_request: "opened",
  hitl_decided: "answered",
  hitl_expired: "expired",
};

/** An engine refusal of an answer as the desk's error (nothing was recorded). */
function refusalOf(error: unknown): unknown {
  if (LeashAlreadyDecided.isInstance(error)) {
    const by = error.operatorId === null ? "" : ` by ${error.operatorId}`;
    return new HitlError(
      "hitl_already_decided",
      `request ${error.requestId} is already answered${error.decision === null ? "" : `: ${error.decision}${by}`}`,
    );
  }
  if (LeashHitlExpired.isInstance(error)) return new HitlError("hitl_expired", error.message);
  if (LeashError.isInstance(error)) {
    const line = error.message.split("\n")[0]!;
    if (error.code === "hitl_not_found") return new HitlError("hitl_request_not_found", line);
    if (error.code === "invalid_argument" || error.code === "no_pending_request") {
      return new HitlError(/params/.test(line) ? "hitl_invalid_params" : "hitl_invalid_decision", line);
    }
  }
  return error;
}

export class HitlQueue {
  private readonly engine: Engine;
  private readonly logger: Logger;
  private readonly nowNs: () => number;
  private readonly owners = new Map<string, SessionOwner>();
  private readonly recent = new Map<string, HitlVerdictSummary[]>();
  private readonly listeners = new Set<HitlListener>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly waits = new Set<AbortController>();
  private readonly offEngine: () => void;
  private closed = false;
  private announcing: Promise<void> = Promise.resolve();

  constructor(options: HitlQueueOptions) {
    this.engine = options.engine;
    this.logger = options.logger;
    this.nowNs = options.nowNs;
    this.offEngine = this.engine.onHitlEvent((event) => {
      const kind = EVENT_KIND[event.type];
      if (kind === undefined) return;
      if (kind === "opened") this.armExpiry(event.request);
      else this.disarm(event.request.request_id);
      // One after the other, in the engine's order: an answer never overtakes its request's opening.
      this.announcing = this.announcing
        .then(() => this.viewOf(event.request))
        .then((view) => this.emit(kind, view))
        .catch((error: unknown) => this.logger.warn({ err: error }, "announcing a HITL event failed"));
    });
  }

  subscribe(listener: HitlListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A verdict the daemon answered: kept for the console's "recent verdicts" and budget chart. */
  noteVerdict(sessionId: string, note: VerdictNote): void {
    let list = this.recent.get(sessionId);
    if (list === undefined) {
      if (this.recent.size >= SESSIONS_REMEMBERED) this.recent.clear();
      list = [];
      this.recent.set(sessionId, list);
    }
    list.push(
      create(HitlVerdictSummarySchema, {
        callNumber: BigInt(note.callNumber),
        toolName: note.toolName,
        verdict: verdictToWire(note.verdict),
        reason: note.reason,
        budgetRemainingUsdDecimal: note.budgetRemaining ?? "",
        atNs: BigInt(Math.trunc(this.nowNs())),
      }),
    );
    if (list.length > RECENT_VERDICTS) list.splice(0, list.length - RECENT_VERDICTS);
    // A released approval spends its request: the consoles see it consumed.
    if (note.reason === "hitl_transition:approve" || note.reason === "hitl_transition:modify_successor") {
      void this.announceConsumed(sessionId);
    }
  }

  async list(filter: { sessionId?: string; status?: HitlStatus } = {}): Promise<HitlRequestView[]> {
    const status = filter.status === undefined ? undefined : ENGINE_STATUS[filter.status];
    const rows = await this.engine.listHitl({
      ...(filter.sessionId ? { sessionId: filter.sessionId } : {}),
      ...(status === undefined ? {} : { status }),
    });
    const views = await Promise.all(rows.map((row) => this.viewOf(row)));
    return views.reverse(); // newest first
  }

  /** One request, or null when there is none by that id. */
  async get(requestId: string): Promise<HitlRequestView | null> {
    if (typeof requestId !== "string" || requestId === "") return null;
    try {
      return await this.viewOf(await this.engine.getHitl(requestId));
    } catch (error) {
      if (LeashError.isInstance(error) && error.code === "hitl_not_found") return null;
      throw error;
    }
  }

  /**
   * An operator's answer, recorded by the engine (a hitl_decision entry naming `operatorId`).
   * Refused, with nothing written, when the request is unknown, answered or expired, or the answer is malformed.
   */
  async answer(
    requestId: string,
    decision: HitlDecision | undefined,
    operatorId: string,
  ): Promise<HitlRequestView> {
    if (this.closed) throw new HitlError("hitl_closing", "the daemon is shutting down");
    const kind = decision === undefined ? undefined : DECISION_NAME[decision.kind];
    if (decision === undefined || kind === undefined) {
      throw new HitlError(
        "hitl_invalid_decision",
        "the decision must be approve, reject, modify, defer or escalate",
      );
    }
    if (decision.comment.length > COMMENT_MAX) {
      throw new HitlError("hitl_invalid_decision", `the comment is longer than ${COMMENT_MAX} characters`);
    }
    let params: Record<string, unknown> | undefined;
    if (decision.kind === HitlDecisionKind.HITL_DECISION_MODIFY) {
      try {
        paramsFromJson(decision.paramsJson); // a JSON object, or a one-line reason why not
        // Plain JSON values: the successor's params travel back to the agent as JSON text and are
        // hashed from it, so they must hash the same read either way.
        params = JSON.parse(decision.paramsJson) as Record<string, unknown>;
      } catch (error) {
        const why = error instanceof Error ? error.message : String(error);
        throw new HitlError(
          "hitl_invalid_params",
          `modify: ${why.replace("tool_params_json", "the params")}`,
        );
      }
    } else if (decision.paramsJson !== "") {
      throw new HitlError("hitl_invalid_params", `params apply only to modify, not to ${kind}`);
    }
    try {
      const answered = await this.engine.answerHitl(requestId, {
        decision: kind,
        operatorId,
        ...(decision.comment === "" ? {} : { comment: decision.comment }),
        ...(params === undefined ? {} : { params, successorNonce: String(randomInt(1, MAX_NONCE)) }),
      });
      this.logger.info({ request: requestId, decision: kind, operator: operatorId }, "HITL request answered");
      return await this.viewOf(answered);
    } catch (error) {
      throw refusalOf(error);
    }
  }

  /**
   * Resolves with the request's view once it is no longer PENDING (answered here, by another process
   * sharing the store, or expired). Only the session that owns the request may wait on it. When
   * `signal` aborts (the waiting caller is gone) it stops waiting: hitl_cancelled.
   */
  async wait(requestId: string, sessionId: string, signal?: AbortSignal): Promise<HitlRequestView> {
    if (this.closed) throw new HitlError("hitl_closing", "the daemon is shutting down");
    const now = await this.get(requestId);
    if (now === null || now.sessionId !== sessionId) {
      throw new HitlError(
        "hitl_request_not_found",
        `no HITL request ${JSON.stringify(requestId.slice(0, 100))} in this session`,
      );
    }
    const abort = new AbortController();
    this.waits.add(abort);
    const both = signal === undefined ? abort.signal : AbortSignal.any([abort.signal, signal]);
    try {
      return await this.viewOf(await this.engine.waitForHitl(requestId, { signal: both }));
    } catch (error) {
      if (abort.signal.aborted) throw new HitlError("hitl_closing", "the daemon is shutting down");
      if (signal?.aborted) throw new HitlError("hitl_cancelled", "the waiting caller went away");
      throw refusalOf(error);
    } finally {
      this.waits.delete(abort);
    }
  }

  /** Expires every request past its time (the daemon's sweep); returns how many. */
  expireDue(): Promise<number> {
    return this.engine.expireHitl();
  }

  /** Wakes every waiter with a refusal (the agent fails closed) and stops the timers. */
  close(): void {
    this.closed = true;
    this.offEngine();
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    for (const abort of this.waits) abort.abort();
    this.listeners.clear();
  }

  private async viewOf(view: EngineView): Promise<HitlRequestView> {
    let owner = this.owners.get(view.session_id);
    if (owner === undefined) {
      try {
        const session = await this.engine.getSession(view.session_id);
        owner = { agentId: session.agent_id, organizationId: session.organization_id };
        if (this.owners.size >= SESSIONS_REMEMBERED) this.owners.clear();
        this.owners.set(view.session_id, owner);
      } catch {
        owner = undefined; // shown without them
      }
    }
    return requestView(view, owner, this.recent.get(view.session_id) ?? []);
  }

  /** At its expiry an unanswered request becomes a recorded DENY, whether or not an agent waits. */
  private armExpiry(view: EngineView): void {
    if (this.closed || view.expires_ns === null || this.timers.has(view.request_id)) return;
    const ms = Math.max(0, (view.expires_ns - this.nowNs()) / 1e6) + 5;
    const timer = setTimeout(
      () => {
        this.timers.delete(view.request_id);
        this.engine
          .expireHitl({ sessionId: view.session_id })
          .catch((error: unknown) => this.logger.warn({ err: error }, "expiring HITL requests failed"));
      },
      Math.min(ms, 2 ** 31 - 1),
    );
    timer.unref();
    this.timers.set(view.request_id, timer);
  }

  private disarm(requestId: string): void {
    clearTimeout(this.timers.get(requestId));
    this.timers.delete(requestId);
  }

  private async announceConsumed(sessionId: string): Promise<void> {
    try {
      const rows = await this.engine.listHitl({ sessionId, status: "consumed" });
      const last = rows.at(-1);
      if (last === undefined) return;
      this.announcing = this.announcing
        .then(() => this.viewOf(last))
        .then((view) => this.emit("consumed", view));
      await this.announcing;
    } catch (error) {
      this.logger.debug({ err: error }, "reading consumed HITL requests failed");
    }
  }

  private emit(kind: HitlEventKind, view: HitlRequestView): void {
    for (const listener of this.listeners) {
      try {
        listener(kind, view);
      } catch (error) {
        this.logger.warn({ err: error }, "a HITL listener failed");
      }
    }
  }
}
