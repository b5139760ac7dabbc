// The daemon's human-in-the-loop desk: the open requests with what the store row lacks (params, expiry,
// budget, recent verdicts), operators' answers through engine.resume, expiry, and waiting agents.
// It does not authenticate anyone (the console and the handler do) and never decides a call itself.
import { randomInt } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { type Clock, canonicalHash, type HitlRequest } from "@leash/core";
import { type Engine, LeashAlreadyDecided, LeashError } from "@leash/engine";
import {
  type HitlDecision,
  HitlDecisionKind,
  type HitlRequestView,
  HitlStatus,
  type HitlVerdictSummary,
  HitlVerdictSummarySchema,
  paramsFromJson,
  paramsToJson,
  verdictToWire,
  WireError,
} from "@leash/wire";
import type { Logger } from "pino";
import { HitlError } from "./errors.js";
import { DECISION_NAME, EMPTY_NOTES, isFinal, type RequestNotes, requestView } from "./view.js";

/** spec-free default: an unanswered request becomes a DENY after 15 minutes (policy `hitl_timeout_s` wins). */
export const DEFAULT_HITL_TIMEOUT_S = 900;
/** How often waiting agents' requests are re-read from the store (another daemon or the CLI may answer). */
export const DEFAULT_HITL_POLL_MS = 500;
/** Who the chain names for an expiry until the engine records `hitl_timeout` itself. */
export const TIMEOUT_OPERATOR = "leash:hitl_timeout";
const RECENT_VERDICTS = 20;
const SESSIONS_REMEMBERED = 10_000;
const REQUESTS_REMEMBERED = 100_000;
const COMMENT_MAX = 2_000;

export type HitlEventKind = "opened" | "answered" | "expired" | "consumed";
export type HitlListener = (kind: HitlEventKind, view: HitlRequestView) => void;

export interface HitlQueueOptions {
  readonly engine: Engine;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Seconds a request waits for a human when the policy sets no `hitl_timeout_s`. */
  readonly timeoutS?: number;
  readonly pollMs?: number;
}

/** What preExec knew when the engine answered HITL. */
export interface OpenedCall {
  readonly sessionId: string;
  readonly callNumber: number;
  readonly paramsJson: string;
}

export interface VerdictNote {
  readonly callNumber: number;
  readonly toolName: string;
  readonly verdict: "ALLOW" | "DENY" | "HITL";
  readonly reason: string;
  readonly budgetRemaining: string | null;
}

interface Waiter {
  readonly resolve: (view: HitlRequestView) => void;
  readonly reject: (error: unknown) => void;
}

export class HitlQueue {
  private readonly engine: Engine;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly timeoutS: number;
  private readonly pollMs: number;
  private readonly notes = new Map<string, RequestNotes>();
  private readonly recent = new Map<string, HitlVerdictSummary[]>();
  private readonly listeners = new Set<HitlListener>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private poller: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(options: HitlQueueOptions) {
    this.engine = options.engine;
    this.clock = options.clock;
    this.logger = options.logger;
    this.timeoutS = options.timeoutS ?? DEFAULT_HITL_TIMEOUT_S;
    this.pollMs = options.pollMs ?? DEFAULT_HITL_POLL_MS;
    if (!Number.isFinite(this.timeoutS) || this.timeoutS <= 0) {
      throw new HitlError("hitl_invalid_decision", "the HITL timeout must be > 0 seconds");
    }
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
        atNs: BigInt(Math.trunc(this.clock.nowNs())),
      }),
    );
    if (list.length > RECENT_VERDICTS) list.splice(0, list.length - RECENT_VERDICTS);
    // A released approval spends its request: tell the consoles it is consumed.
    if (note.reason === "hitl_transition:approve" || note.reason === "hitl_transition:modify_successor") {
      void this.announceConsumed(sessionId);
    }
  }

  /** Called after the engine answered HITL: finds the request it opened, remembers its call, announces it. */
  async opened(call: OpenedCall): Promise<HitlRequestView | null> {
    const rows = await this.engine.substrate.transaction((tx) =>
      tx.hitl.list({ sessionId: call.sessionId, status: "PENDING" }),
    );
    const row = rows.find((r) => r.call_number === call.callNumber);
    if (row === undefined) return null;
    const notes = await this.notesFor(row);
    notes.paramsJson = call.paramsJson;
    this.armExpiry(row.request_id, notes.expiresNs);
    const view = this.viewOf(row, notes);
    this.emit("opened", view);
    return view;
  }

  async list(filter: { sessionId?: string; status?: HitlStatus } = {}): Promise<HitlRequestView[]> {
    const storeStatus = filter.status === HitlStatus.HITL_EXPIRED ? undefined : storeStatusOf(filter.status);
    const rows = await this.engine.substrate.transaction((tx) =>
      tx.hitl.list({
        ...(filter.sessionId ? { sessionId: filter.sessionId } : {}),
        ...(storeStatus === undefined ? {} : { status: storeStatus }),
      }),
    );
    const views: HitlRequestView[] = [];
    for (const row of rows) {
      const notes = await this.notesFor(row);
      await this.expireIfDue(row, notes);
      const view = this.viewOf(row, notes);
      if (
        filter.status === undefined ||
        filter.status === HitlStatus.HITL_STATUS_UNSPECIFIED ||
        view.status === filter.status
      ) {
        views.push(view);
      }
    }
    return views.sort((a, b) => Number(b.createdNs - a.createdNs));
  }

  async get(requestId: string): Promise<HitlRequestView | null> {
    const row = await this.row(requestId);
    if (row === null) return null;
    const notes = await this.notesFor(row);
    await this.expireIfDue(row, notes);
    return this.viewOf((await this.row(requestId)) ?? row, notes);
  }

  /**
   * An operator's answer, recorded by the engine (a hitl_decision chain entry naming `operatorId`).
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
    const row = await this.row(requestId);
    if (row === null)
      throw new HitlError(
        "hitl_request_not_found",
        `no HITL request ${JSON.stringify(requestId.slice(0, 100))}`,
      );
    const notes = await this.notesFor(row);
    if (await this.expireIfDue(row, notes))
      throw new HitlError("hitl_expired", `request ${requestId} expired unanswered`);
    if (notes.expired) throw new HitlError("hitl_expired", `request ${requestId} expired unanswered`);
    if (row.status !== "PENDING") throw alreadyDecided(row);
    let successor: { nonce: string; args_digest: string } | undefined;
    let successorJson = "";
    if (decision.kind === HitlDecisionKind.HITL_DECISION_MODIFY) {
      let params: Record<string, unknown>;
      try {
        params = paramsFromJson(decision.paramsJson);
        successorJson = paramsToJson(params);
      } catch (error) {
        const why = WireError.isInstance(error) || error instanceof Error ? error.message : String(error);
        throw new HitlError(
          "hitl_invalid_params",
          `modify: ${why.replace("tool_params_json", "the params")}`,
        );
      }
      // The successor is a new dispatch: a fresh nonce the agent has never used (spec §3.6).
      successor = { nonce: String(randomInt(1, 2 ** 47)), args_digest: canonicalHash(params) };
    } else if (decision.paramsJson !== "") {
      throw new HitlError("hitl_invalid_params", `params apply only to modify, not to ${kind}`);
    }
    try {
      await this.engine.resume({
        session_id: row.session_id,
        request_id: row.request_id,
        decision: kind,
        operator_id: operatorId,
        ...(successor === undefined ? {} : { successor }),
      });
    } catch (error) {
      if (LeashAlreadyDecided.isInstance(error)) throw alreadyDecided((await this.row(requestId)) ?? row);
      if (
        LeashError.isInstance(error) &&
        (error.code === "invalid_argument" || error.code === "no_pending_request")
      ) {
        throw new HitlError("hitl_invalid_decision", error.message.split("\n")[0]!);
      }
      throw error;
    }
    notes.comment = decision.comment;
    notes.successorParamsJson = successorJson;
    this.disarm(requestId);
    const view = this.viewOf((await this.row(requestId)) ?? row, notes);
    this.logger.info({ request: requestId, decision: kind, operator: operatorId }, "HITL request answered");
    this.emit("answered", view);
    this.settle(requestId, view);
    return view;
  }

  /**
   * Resolves with the request's view once it is no longer PENDING (answered here, by another process
   * sharing the store, or expired). Only the session that owns the request may wait on it.
   */
  async wait(requestId: string, sessionId: string): Promise<HitlRequestView> {
    if (this.closed) throw new HitlError("hitl_closing", "the daemon is shutting down");
    const view = await this.get(requestId);
    if (view === null || view.sessionId !== sessionId) {
      throw new HitlError(
        "hitl_request_not_found",
        `no HITL request ${JSON.stringify(requestId.slice(0, 100))} in this session`,
      );
    }
    if (isFinal(view)) return view;
    const notes = this.notes.get(requestId);
    if (notes !== undefined) this.armExpiry(requestId, notes.expiresNs);
    return new Promise<HitlRequestView>((resolve, reject) => {
      let set = this.waiters.get(requestId);
      if (set === undefined) {
        set = new Set();
        this.waiters.set(requestId, set);
      }
      set.add({ resolve, reject });
      this.startPolling();
    });
  }

  /** Wakes every waiter with a refusal (the agent fails closed) and stops the timers. */
  close(): void {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    clearInterval(this.poller);
    this.poller = undefined;
    const closing = new HitlError("hitl_closing", "the daemon is shutting down");
    for (const set of this.waiters.values()) for (const w of set) w.reject(closing);
    this.waiters.clear();
    this.listeners.clear();
  }

  private async row(requestId: string): Promise<HitlRequest | null> {
    if (typeof requestId !== "string" || requestId === "") return null;
    return this.engine.substrate.transaction((tx) => tx.hitl.get(requestId));
  }

  private viewOf(row: HitlRequest, notes: RequestNotes): HitlRequestView {
    return requestView(row, notes, this.recent.get(row.session_id) ?? []);
  }

  /** The notes of a request, from the session when this daemon has not seen it yet (e.g. after a restart). */
  private async notesFor(row: HitlRequest): Promise<RequestNotes> {
    const known = this.notes.get(row.request_id);
    if (known !== undefined) return known;
    const notes: RequestNotes = { ...EMPTY_NOTES, budget: { ...EMPTY_NOTES.budget } };
    try {
      const session = await this.engine.getSession(row.session_id);
      const config = session.config as Record<string, unknown>;
      const timeout =
        typeof config.hitl_timeout_s === "number" && config.hitl_timeout_s > 0
          ? config.hitl_timeout_s
          : this.timeoutS;
      notes.agentId = session.agent_id;
      notes.organizationId = session.organization_id;
      notes.policy = `sha256:${canonicalHash(session.config).slice(0, 16)}`;
      notes.expiresNs = row.created_ns + timeout * 1e9;
      const limit = session.config.budget_usd;
      if (limit !== undefined && limit !== null) {
        notes.budget.limit = String(limit);
        notes.budget.remaining = session.budget_remaining_usd ?? "";
        notes.budget.spent = String(session.state.budget_spent_usd ?? 0);
      }
    } catch (error) {
      this.logger.warn({ err: error, request: row.request_id }, "HITL request's session could not be read");
      notes.expiresNs = row.created_ns + this.timeoutS * 1e9;
    }
    if (this.notes.size >= REQUESTS_REMEMBERED) this.notes.clear();
    this.notes.set(row.request_id, notes);
    return notes;
  }

  /** A PENDING request past its expiry becomes a DENY; returns whether it expired now. */
  private async expireIfDue(row: HitlRequest, notes: RequestNotes): Promise<boolean> {
    if (notes.expired || row.status === "EXPIRED") {
      notes.expired = true;
      return false;
    }
    if (row.status !== "PENDING" || this.clock.nowNs() < notes.expiresNs) return false;
    return this.expire(row.request_id);
  }

  private async expire(requestId: string): Promise<boolean> {
    const row = await this.row(requestId);
    const notes = this.notes.get(requestId);
    if (row === null || notes === undefined || row.status !== "PENDING" || notes.expired) return false;
    // Recorded as a rejection by the timeout (a signed hitl_decision entry), so a late answer and the
    // agent's re-dispatch are both refused: an expiry ends in a visible DENY, never an ALLOW.
    try {
      await this.engine.resume({
        session_id: row.session_id,
        request_id: requestId,
        decision: "reject",
        operator_id: TIMEOUT_OPERATOR,
      });
    } catch (error) {
      if (!LeashAlreadyDecided.isInstance(error)) {
        this.logger.warn({ err: error, request: requestId }, "expiring a HITL request failed");
        return false;
      }
      return false; // a human answered first
    }
    notes.expired = true;
    notes.comment = "expired unanswered (hitl_timeout)";
    this.disarm(requestId);
    const view = this.viewOf((await this.row(requestId)) ?? row, notes);
    this.logger.info({ request: requestId }, "HITL request expired");
    this.emit("expired", view);
    this.settle(requestId, view);
    return true;
  }

  private armExpiry(requestId: string, expiresNs: number): void {
    if (this.closed || this.timers.has(requestId)) return;
    const ms = Math.max(0, (expiresNs - this.clock.nowNs()) / 1e6);
    const timer = setTimeout(
      () => {
        this.timers.delete(requestId);
        void this.expire(requestId);
      },
      Math.min(ms, 2 ** 31 - 1),
    );
    timer.unref();
    this.timers.set(requestId, timer);
  }

  private disarm(requestId: string): void {
    clearTimeout(this.timers.get(requestId));
    this.timers.delete(requestId);
  }

  private settle(requestId: string, view: HitlRequestView): void {
    const set = this.waiters.get(requestId);
    if (set === undefined) return;
    this.waiters.delete(requestId);
    for (const w of set) w.resolve(view);
    if (this.waiters.size === 0) {
      clearInterval(this.poller);
      this.poller = undefined;
    }
  }

  /** Answers recorded by someone else (another daemon on the same PostgreSQL, `leash session resume`). */
  private startPolling(): void {
    if (this.poller !== undefined) return;
    this.poller = setInterval(() => {
      for (const requestId of [...this.waiters.keys()]) {
        void this.row(requestId)
          .then((row) => {
            if (row === null || row.status === "PENDING") return;
            const notes = this.notes.get(requestId) ?? { ...EMPTY_NOTES };
            if (row.status === "EXPIRED") notes.expired = true;
            const view = this.viewOf(row, notes);
            this.emit("answered", view);
            this.settle(requestId, view);
          })
          .catch((error: unknown) => this.logger.warn({ err: error }, "re-reading a HITL request failed"));
      }
    }, this.pollMs);
    this.poller.unref();
  }

  private async announceConsumed(sessionId: string): Promise<void> {
    try {
      const rows = await this.engine.substrate.transaction((tx) =>
        tx.hitl.list({ sessionId, status: "CONSUMED" }),
      );
      for (const row of rows) {
        const notes = this.notes.get(row.request_id);
        if (notes === undefined || (notes as RequestNotes & { consumed?: boolean }).consumed) continue;
        (notes as RequestNotes & { consumed?: boolean }).consumed = true;
        this.emit("consumed", this.viewOf(row, notes));
      }
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

function storeStatusOf(status: HitlStatus | undefined): HitlRequest["status"] | undefined {
  switch (status) {
    case HitlStatus.HITL_PENDING:
      return "PENDING";
    case HitlStatus.HITL_DECIDED:
      return "DECIDED";
    case HitlStatus.HITL_CONSUMED:
      return "CONSUMED";
    default:
      return undefined;
  }
}

function alreadyDecided(row: HitlRequest): HitlError {
  const by = row.operator_id === null ? "" : ` by ${row.operator_id}`;
  return new HitlError(
    "hitl_already_decided",
    `request ${row.request_id} is already ${row.decision === null ? row.status.toLowerCase() : `answered: ${row.decision}${by}`}`,
  );
}
