// The daemon's request handler: one authenticated request payload in, its answer payload out, any transport.
// Every decision is @leash/engine's; this maps SP/1.0 messages onto engine calls and engine errors onto Appendix B.
import { create } from "@bufbuild/protobuf";
import type { Clock, Config, Nonce } from "@leash/core";
import { type Engine, type EvaluateRequest, LeashError, type SessionView } from "@leash/engine";
import {
  BudgetScope,
  denyReasonFor,
  ErrorCode,
  type Error as ErrorMessage,
  ErrorSchema,
  errorPayload,
  type GetSessionStateRequest,
  type GuardConfig,
  GuardConfigSchema,
  type Heartbeat,
  HeartbeatAckSchema,
  HitlMode,
  HitlStatus,
  type HitlUpdate,
  HitlUpdateSchema,
  MAX_FRAME_BYTES,
  moneyFromWire,
  moneyToWire,
  negotiateProtocolVersion,
  type Payload,
  PostExecAckSchema,
  type PostExecNotification,
  type PreExecRequest,
  PreExecResponseSchema,
  paramsFromJson,
  type RegisterRequest,
  RegisterResponseSchema,
  SessionStateSchema,
  SessionStatus,
  TailBatchSchema,
  type TailEvent,
  type TailRequest,
  verdictToWire,
  type WaitHitlRequest,
  WireError,
} from "@leash/wire";
import type { Logger } from "pino";
import { answerFits, idProblem, preExecAnswerBound } from "./answer-size.js";
import { CallGate } from "./call-gate.js";
import { type DaemonConfig, keyMayActAs, policyFor } from "./config.js";
import { HitlError, type HitlErrorCode } from "./hitl/errors.js";
import type { HitlQueue } from "./hitl/queue.js";
import { countPolicy, type DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";
import type { TailFeed } from "./tail/feed.js";
import type { TailFilter, TailReader } from "./tail/reader.js";

/** Who sent a request, as its transport established it (the socket: the key that verified its HMAC). */
export interface AuthContext {
  readonly organizationId: string;
  readonly keyId: string;
}

/** Whom a session belongs to: the organization and agent that registered it. */
interface SessionOwner {
  readonly org: string;
  readonly agent: string;
}

/** What a transport knows of the request besides its payload. */
export interface RequestContext {
  readonly auth: AuthContext;
  /** The envelope's protocol_version (a Register negotiates from it). */
  readonly protocolVersion: string;
  /** Aborted when the caller is gone (its connection closed, its call cancelled): long waits stop. */
  readonly signal?: AbortSignal;
  /**
   * The signed envelope's id and timestamp (the socket's; gRPC has no envelope). A PreExec carrying
   * one is decided once per store: a copy that reaches another daemon, or this one after a restart,
   * gets the recorded answer.
   */
  readonly message?: { readonly id: string; readonly sentNs: bigint };
}

/** One answer: a response payload, or null when the request takes none (a recorded PostExec). */
export type Answer = Payload | null;

export interface RequestHandler {
  /** Never throws: a refusal is an Error payload. */
  handle(payload: Payload, context: RequestContext): Promise<Answer>;
  /**
   * gRPC's WaitHitl stream: sends the request's current view, then (unless it already was) the final
   * one. Never throws: resolves with the Error that ended it, or null once the final update was sent.
   */
  streamHitl(
    request: WaitHitlRequest,
    context: RequestContext,
    send: (update: HitlUpdate) => void,
  ): Promise<ErrorMessage | null>;
  /**
   * gRPC's TailEntries stream: the caller organization's entries, then (with follow) each new one, until
   * `context.signal` aborts or the daemon closes. `send` may return a promise (back-pressure). Never
   * throws: resolves with the Error that ended it, or null when the stream is complete.
   */
  streamTail(
    request: TailRequest,
    context: RequestContext,
    send: (event: TailEvent) => void | Promise<void>,
  ): Promise<ErrorMessage | null>;
}

export interface HandlerOptions {
  readonly engine: Engine;
  readonly config: DaemonConfig;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: DaemonMetrics;
  readonly daemonVersion: string;
  /** The HITL desk: keeps recent verdicts and answers wait_hitl. Without it wait_hitl is refused. */
  readonly hitl?: HitlQueue;
  /** `hitl_timeout_s` for policies that set none (the engine's default applies when this is absent too). */
  readonly hitlTimeoutS?: number;
  /** Serves TailEntries / tail_entries from the store's chain. Without it they are refused. */
  readonly tail?: { readonly reader: TailReader; readonly feed: TailFeed };
  /** Per-organization quotas: each organization's tails count against its own (as well as MAX_TAILS). */
  readonly quotas?: OrganizationQuotaBook;
  /** Holds a PreExec a moment for sessions about to call too (call-gate.ts); null: every call goes at once. */
  readonly gate?: CallGate | null;
}

/** A refusal the handler makes itself, with its Appendix B code and a stable detail. */
class Refusal extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    message: string,
  ) {
    super(message);
  }
}

const SESSIONS_REMEMBERED = 100_000;
/** The key rule 1 reads as "not canonicalizable" (spec §3.2 rule 1, core canonicalizationError). */
const NONCANONICAL = { __noncanonical__: true };

const RPC_OF: Partial<Record<NonNullable<Payload["case"]>, string>> = {
  register: "Register",
  preExec: "PreExec",
  postExec: "PostExec",
  heartbeat: "Heartbeat",
  getSessionState: "GetSessionState",
  waitHitl: "WaitHitl",
  tailEntries: "TailEntries",
};

/** Requests that may append to the chain: after one, followers are told to look at once. */
const WRITES = new Set<Payload["case"]>(["register", "preExec", "postExec", "heartbeat"]);

/** Tails (streams and socket polls) one daemon serves at once; beyond it RATE_LIMITED. */
export const MAX_TAILS = 128;
/** Events in one socket answer, and about the most text it carries (well under the 1 MiB frame). */
const SOCKET_TAIL_EVENTS = 500;
const TAIL_BYTES = 768 * 1024;
/** The socket's long poll: default and longest wait for a new entry. */
const DEFAULT_TAIL_WAIT_MS = 10_000;
const MAX_TAIL_WAIT_MS = 60_000;
/** A follower that hears nothing looks again after this long (the feed's own polls usually wake it first). */
const STREAM_RECHECK_MS = 30_000;
const MAX_TAIL_KINDS = 32;

const HITL_ERROR_CODES: Record<HitlErrorCode, ErrorCode> = {
  hitl_request_not_found: ErrorCode.INVALID_MESSAGE,
  hitl_already_decided: ErrorCode.INVALID_MESSAGE,
  hitl_expired: ErrorCode.INVALID_MESSAGE,
  hitl_invalid_decision: ErrorCode.INVALID_MESSAGE,
  hitl_invalid_params: ErrorCode.INVALID_MESSAGE,
  hitl_read_only: ErrorCode.AUTHENTICATION_FAILED,
  hitl_closing: ErrorCode.DAEMON_UNAVAILABLE,
  hitl_cancelled: ErrorCode.DAEMON_UNAVAILABLE,
};

/** A HITL desk refusal as an SP/1.0 Error (the console's WebSocket sends the same). */
export function hitlErrorPayload(error: HitlError): { case: "error"; value: ErrorMessage } {
  return errorOf(HITL_ERROR_CODES[error.code] ?? ErrorCode.INVALID_MESSAGE, error.code, error.message);
}

function errorOf(code: ErrorCode, detail: string, message: string): { case: "error"; value: ErrorMessage } {
  return { case: "error", value: create(ErrorSchema, { code, detail, message }) };
}

/** The budget-guard package's errors carry this marker (bad amounts); they are the caller's input. */
const BUDGET_GUARD_MARKER = Symbol.for("leash.budget-guard.error");

/** The Error payload for a failure: Appendix B by engine code, DAEMON_UNAVAILABLE for anything unexpected. */
function answerFor(error: unknown): { case: "error"; value: ErrorMessage } | undefined {
  if (error instanceof Refusal) return errorOf(error.code, error.detail, error.message);
  if (HitlError.isInstance(error)) return hitlErrorPayload(error);
  if (WireError.isInstance(error)) return errorPayload(error);
  if (LeashError.isInstance(error)) {
    const message = error.message.split("\n")[0]!;
    switch (error.code) {
      case "session_not_found":
        return errorOf(ErrorCode.SESSION_NOT_FOUND, "session_not_found", message);
      case "session_exists":
        // Another agent's session id: answered as an unknown one, so no id can be probed.
        return errorOf(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
      case "settlement_conflict":
        return errorOf(ErrorCode.INVALID_MESSAGE, "settlement_conflict", message);
      case "reservation_not_found":
        return errorOf(ErrorCode.INVALID_MESSAGE, "reservation_not_found", message);
      case "invalid_argument":
      case "config_invalid":
        return errorOf(ErrorCode.INVALID_MESSAGE, error.code.toLowerCase(), message);
      default:
        return undefined;
    }
  }
  if (typeof error === "object" && error !== null && BUDGET_GUARD_MARKER in error) {
    const code = String((error as { code?: unknown }).code ?? "invalid_amount");
    return errorOf(ErrorCode.INVALID_MESSAGE, code, String((error as { message?: unknown }).message));
  }
  return undefined;
}

const SCOPES: Record<string, BudgetScope> = {
  session: BudgetScope.PER_SESSION,
  agent: BudgetScope.PER_AGENT,
  organization: BudgetScope.PER_ORGANIZATION,
};
const HITL_MODES: Record<string, HitlMode> = {
  never: HitlMode.HITL_NEVER,
  on_deny: HitlMode.HITL_ON_DENY,
  on_threshold: HitlMode.HITL_ON_BUDGET_THRESHOLD,
  always: HitlMode.HITL_ALWAYS,
};

/** The session's guard config as §5.2's GuardConfig (budget as decimal and nearest double). */
export function guardConfigToWire(config: Config): GuardConfig {
  const budget = config.budget_usd === undefined ? undefined : moneyToWire(config.budget_usd);
  return create(GuardConfigSchema, {
    budgetUsd: budget?.double ?? 0,
    budgetUsdDecimal: budget?.decimal ?? "",
    budgetScope: SCOPES[config.budget_scope ?? "session"] ?? BudgetScope.PER_SESSION,
    maxRepeatCalls: config.max_repeat_calls ?? 0,
    errorAmplification: config.error_amplification ?? false,
    timeoutSeconds: config.timeout_seconds ?? 0,
    windowDurationS: config.window_duration_s ?? 0,
    windowMaxCalls: config.window_max_calls ?? 0,
    maxTotalCalls: config.max_total_calls ?? 0,
    probabilisticDeny: config.probabilistic_deny ?? false,
    denyJitterRatio: config.deny_jitter_ratio ?? 0,
    hitlMode: HITL_MODES[config.hitl_mode ?? "never"] ?? HitlMode.HITL_NEVER,
    hitlBudgetThreshold: config.hitl_budget_threshold ?? 0,
    parentGuardId: config.parent_guard_id ?? "",
    deniedTools: [...(config.denied_tools ?? [])],
  });
}

const STATUS: Record<string, SessionStatus> = {
  ACTIVE: SessionStatus.ACTIVE,
  PAUSED: SessionStatus.PAUSED,
  TERMINATED: SessionStatus.TERMINATED,
  STALE: SessionStatus.STALE,
};

const money = (amount: string | number | null | undefined) =>
  amount === null || amount === undefined ? { double: 0, decimal: "" } : moneyToWire(amount);

const toNs = (value: number | null | undefined): bigint =>
  value === null || value === undefined ? 0n : BigInt(Math.trunc(value));

/** A uint64 call number the engine can take (it counts in safe integers). */
function callNumberOf(value: bigint, field: string): number {
  if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "invalid_call_number", `${field} must be in [1, 2^53 - 1]`);
  }
  return Number(value);
}

function requireSessionId(sessionId: string): void {
  if (sessionId === "")
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "missing_session_id", "session_id is required");
}

function sessionStateOf(view: SessionView) {
  const s = view.state;
  const initial = view.config.budget_usd;
  const remaining = view.budget_remaining_usd;
  const spent = s.budget_spent_usd;
  const b0 = money(initial);
  const b1 = money(remaining);
  const b2 = initial === undefined ? { double: 0, decimal: "" } : money(spent ?? 0);
  const counts = (r: Record<string, number> | undefined) =>
    Object.fromEntries(Object.entries(r ?? {}).map(([k, v]) => [k, Math.max(0, Math.trunc(v))]));
  return create(SessionStateSchema, {
    sessionId: view.session_id,
    agentId: view.agent_id,
    organizationId: view.organization_id,
    status: STATUS[view.status] ?? SessionStatus.ACTIVE,
    budgetInitialUsd: b0.double,
    budgetInitialUsdDecimal: b0.decimal,
    budgetRemainingUsd: b1.double,
    budgetRemainingUsdDecimal: b1.decimal,
    budgetSpentUsd: b2.double,
    budgetSpentUsdDecimal: b2.decimal,
    totalCalls: BigInt(view.call_count),
    repeatCounts: counts(s.repeat_counts),
    windowCounts: counts(s.window_counts),
    circuitTripped: s.circuit_tripped ?? false,
    circuitTripReason: s.circuit_trip_reason ?? "",
    circuitTrippedAtNs: toNs(s.circuit_tripped_at_ns),
    windowStartNs: toNs(s.window_start_ns),
    windowDurationS: view.config.window_duration_s ?? 0,
    windowMaxCalls: view.config.window_max_calls ?? 0,
    lastToolName: s.last_tool_name ?? "",
    lastToolParamsHash:
      typeof s.last_tool_params_hash === "string" && /^[0-9a-f]{64}$/.test(s.last_tool_params_hash)
        ? Uint8Array.from(Buffer.from(s.last_tool_params_hash, "hex"))
        : new Uint8Array(0),
    lastActivityNs: toNs(s.last_activity_ns),
  });
}

/** The daemon's HITL timeout fills in for a policy that names none; a policy's own always wins. */
function withHitlTimeout(policy: Config, seconds: number | undefined): Config {
  return seconds === undefined || policy.hitl_timeout_s !== undefined
    ? policy
    : { ...policy, hitl_timeout_s: seconds };
}

/** The handler every transport shares. */
export function createRequestHandler(options: HandlerOptions): RequestHandler {
  const { engine, config, clock, logger, metrics } = options;
  const gate = options.gate === undefined ? new CallGate() : options.gate;
  /**
   * session id → its organization and agent: a request may only name a session of its own
   * organization whose agent its key may act as.
   */
  const sessionOwners = new Map<string, SessionOwner>();
  /**
   * The settlements of each session still being written. A PreExec of that session waits for them, so
   * a settlement that arrived first is durable before the next decision reads the budget (the socket's
   * PostExec is fire-and-forget: without this, on PostgreSQL the two could commit in either order).
   */
  const settling = new Map<string, Set<Promise<unknown>>>();
  const remember = (sessionId: string, owner: SessionOwner) => {
    if (sessionOwners.size >= SESSIONS_REMEMBERED) sessionOwners.clear();
    sessionOwners.set(sessionId, owner);
  };
  const mayTouch = (owner: SessionOwner, auth: AuthContext) =>
    owner.org === auth.organizationId &&
    keyMayActAs(config.organizations.get(owner.org), auth.keyId, owner.agent);
  const nowNs = () => BigInt(Math.trunc(clock.nowNs()));

  /**
   * Refuses a session of another organization, or of an agent the request's key may not act as,
   * exactly as an unknown one (SESSION_NOT_FOUND), so no caller can learn or touch another's sessions.
   */
  async function checkSession(sessionId: string, auth: AuthContext): Promise<SessionView | null> {
    requireSessionId(sessionId);
    const known = sessionOwners.get(sessionId);
    if (known !== undefined && mayTouch(known, auth)) return null;
    const notFound = new Refusal(
      ErrorCode.SESSION_NOT_FOUND,
      "session_not_found",
      `unknown session ${JSON.stringify(sessionId.slice(0, 100))}`,
    );
    if (known !== undefined) throw notFound;
    const view = await engine.getSession(sessionId);
    const owner = { org: view.organization_id, agent: view.agent_id };
    if (!mayTouch(owner, auth)) throw notFound;
    remember(sessionId, owner);
    return view;
  }

  async function register(request: RegisterRequest, context: RequestContext): Promise<Payload> {
    const negotiated = negotiateProtocolVersion(context.protocolVersion);
    const orgId = request.organizationId === "" ? context.auth.organizationId : request.organizationId;
    if (orgId !== context.auth.organizationId) {
      metrics.authFailures.inc({ detail: "wrong_organization" });
      throw new Refusal(
        ErrorCode.AUTHENTICATION_FAILED,
        "wrong_organization",
        "organization_id is not the organization of the key that signed the envelope",
      );
    }
    const org = config.organizations.get(orgId);
    if (org === undefined)
      throw new Refusal(ErrorCode.AUTHENTICATION_FAILED, "unknown_key", "unknown organization");
    if (request.agentId === "")
      throw new Refusal(ErrorCode.INVALID_MESSAGE, "missing_agent_id", "agent_id is required");
    const tooLong = idProblem(request.agentId, request.sessionId);
    if (tooLong !== null) throw new Refusal(ErrorCode.INVALID_MESSAGE, "id_too_long", tooLong);
    if (!keyMayActAs(org, context.auth.keyId, request.agentId)) {
      metrics.authFailures.inc({ detail: "agent_not_allowed" });
      throw new Refusal(
        ErrorCode.AUTHENTICATION_FAILED,
        "agent_not_allowed",
        "the key that signed the envelope is not bound to this agent_id",
      );
    }
    if (request.sessionId !== "") {
      // Resuming: the session must be this organization's and this agent's (else a new id is
      // created under them); anything else is answered as an unknown session.
      const known = sessionOwners.get(request.sessionId);
      if (known !== undefined && (known.org !== orgId || known.agent !== request.agentId)) {
        throw new Refusal(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
      }
    }
    const view = await engine.register({
      agent_id: request.agentId,
      organization_id: orgId,
      ...(request.sessionId === "" ? {} : { session_id: request.sessionId }),
      config: withHitlTimeout(policyFor(org, request.agentId), options.hitlTimeoutS),
    });
    if (view.organization_id !== orgId) {
      throw new Refusal(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
    }
    remember(view.session_id, { org: orgId, agent: view.agent_id });
    return {
      case: "registerResponse",
      value: create(RegisterResponseSchema, {
        sessionId: view.session_id,
        daemonVersion: options.daemonVersion,
        negotiatedProtocol: negotiated,
        activeConfig: guardConfigToWire(view.config),
        daemonTimeNs: nowNs(),
      }),
    };
  }

  async function preExec(request: PreExecRequest, context: RequestContext): Promise<Payload> {
    // Looked up before the first await: only settlements that arrived before this request count.
    const pending = settling.get(request.sessionId);
    const earlier = pending === undefined ? undefined : Promise.allSettled([...pending]);
    await checkSession(request.sessionId, context.auth);
    if (earlier !== undefined) await earlier;
    const estimate = moneyFromWire(
      request.estimatedCostUsd,
      request.estimatedCostUsdDecimal,
      "estimated_cost_usd",
    );
    const sentHash = request.toolParamsHash;
    let params: Record<string, unknown>;
    let expected: string | undefined;
    if (request.toolParamsJson === "") {
      // The daemon never saw the arguments (a spec-only client sends the hash alone): rule 9 cannot
      // evaluate them, so they stand in as opaque context — HITL unless a higher rule decides first.
      // The sent digest is kept, so rule 6 still tells different calls apart.
      params = { context: "opaque", tool_params_hash: Buffer.from(sentHash).toString("hex") };
    } else {
      try {
        params = paramsFromJson(request.toolParamsJson);
        if (sentHash.length > 0) {
          // Any digest that is not 32 bytes can match nothing: the engine then denies the mismatch.
          expected = sentHash.length === 32 ? Buffer.from(sentHash).toString("hex") : "not-a-sha256-digest";
        }
      } catch (error) {
        if (!WireError.isInstance(error) || error.code !== "invalid_params_json") throw error;
        params = NONCANONICAL; // rule 1: DENY policy_violation:malformed_input, recorded like any decision
      }
    }
    const nonce: Nonce | null = request.nonce === 0n ? null : request.nonce.toString();
    const evaluate: EvaluateRequest = {
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
    // Nothing is decided whose answer could not be sent (answer-size.ts): the caller learns why, unrecorded.
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
    const go = gate?.enter(request.sessionId);
    if (go !== undefined) await go;
    let result: Awaited<ReturnType<Engine["evaluate"]>>;
    try {
      result = await engine.evaluate(evaluate);
    } finally {
      gate?.answered(request.sessionId);
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
    const hitlExpiresNs = hitlRequestId === "" ? 0n : toNs((await engine.getHitl(hitlRequestId)).expires_ns);
    // A re-delivered message's answer is a decision already counted (by whichever daemon made it).
    if (result.redelivered !== true) {
      metrics.verdicts.inc({ verdict: result.verdict, reason });
      countPolicy(metrics, result.policy);
      if (result.reservation_id !== null) metrics.holdsPlaced.inc();
    }
    const remaining = money(result.budget_remaining_usd);
    return {
      case: "preExecResponse",
      value: create(PreExecResponseSchema, {
        sessionId: result.session_id,
        callNumber: BigInt(result.call_number),
        verdict: verdictToWire(result.verdict),
        denyReason: denyReasonFor(reason),
        humanReadableReason: `${result.verdict}: ${reason}`,
        budgetRemainingUsd: remaining.double,
        budgetRemainingUsdDecimal: remaining.decimal,
        repeatCount: result.repeat_count,
        daemonTimeNs: nowNs(),
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

  async function waitHitl(request: WaitHitlRequest, context: RequestContext): Promise<Payload> {
    await checkSession(request.sessionId, context.auth);
    if (options.hitl === undefined) {
      throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "hitl_unavailable", "this daemon has no HITL desk");
    }
    const view = await options.hitl.wait(request.requestId, request.sessionId, context.signal);
    return { case: "hitlUpdate", value: create(HitlUpdateSchema, { request: view, final: true }) };
  }

  async function postExec(request: PostExecNotification, context: RequestContext): Promise<Answer> {
    // Registered before the first await, so a PreExec of the session that arrives next always waits for it.
    const settlement = (async () => {
      await checkSession(request.sessionId, context.auth);
      const actual =
        moneyFromWire(request.actualCostUsd, request.actualCostUsdDecimal, "actual_cost_usd") ?? "0";
      return engine.postExec({
        session_id: request.sessionId,
        call_number: callNumberOf(request.callNumber, "call_number"),
        actual_cost_usd: actual,
        success: request.success,
        ...(request.idempotencyKey === "" ? {} : { idempotency_key: request.idempotencyKey }),
      });
    })();
    const mine = settling.get(request.sessionId) ?? new Set<Promise<unknown>>();
    settling.set(request.sessionId, mine);
    mine.add(settlement);
    let settled: Awaited<typeof settlement>;
    try {
      settled = await settlement;
    } finally {
      mine.delete(settlement);
      if (mine.size === 0 && settling.get(request.sessionId) === mine) settling.delete(request.sessionId);
    }
    if (!settled.replayed && settled.budget_remaining_usd !== null) metrics.holdsSettled.inc();
    // Asked for: the settlement is committed, so the client may forget it (it re-sends until then).
    if (!request.ackRequested) return null;
    return {
      case: "postExecAck",
      value: create(PostExecAckSchema, {
        sessionId: settled.session_id,
        callNumber: BigInt(settled.call_number),
        replayed: settled.replayed,
        budgetRemainingUsdDecimal: settled.budget_remaining_usd ?? "",
      }),
    };
  }

  async function heartbeat(request: Heartbeat, context: RequestContext): Promise<Payload> {
    await checkSession(request.sessionId, context.auth);
    const local = moneyFromWire(
      request.localBudgetRemaining,
      request.localBudgetRemainingDecimal,
      "local_budget_remaining",
    );
    await engine.heartbeat(request.sessionId);
    const view = await engine.getSession(request.sessionId);
    const remaining = money(view.budget_remaining_usd);
    const drift =
      local !== undefined &&
      view.budget_remaining_usd !== null &&
      Number(local) !== Number(view.budget_remaining_usd);
    return {
      case: "heartbeatAck",
      value: create(HeartbeatAckSchema, {
        sessionId: view.session_id,
        daemonBudgetRemaining: remaining.double,
        daemonBudgetRemainingDecimal: remaining.decimal,
        driftDetected: drift,
        daemonTimeNs: nowNs(),
      }),
    };
  }

  async function sessionState(request: GetSessionStateRequest, context: RequestContext): Promise<Payload> {
    const seen = await checkSession(request.sessionId, context.auth);
    const view = seen ?? (await engine.getSession(request.sessionId));
    return { case: "sessionState", value: sessionStateOf(view) };
  }

  let tails = 0;

  /** The request's filter, checked: the organization is the caller's; a session must be one of its own. */
  async function tailFilterOf(
    request: TailRequest,
    context: RequestContext,
  ): Promise<{ tail: NonNullable<HandlerOptions["tail"]>; filter: TailFilter; afterSeq: number | null }> {
    const tail = options.tail;
    if (tail === undefined)
      throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "tail_unavailable", "this daemon serves no tail");
    const after = request.afterSeq;
    if (after !== undefined && (after < -1n || after > BigInt(Number.MAX_SAFE_INTEGER))) {
      throw new Refusal(
        ErrorCode.INVALID_MESSAGE,
        "invalid_after_seq",
        "after_seq must be -1 or a chain seq",
      );
    }
    if (
      request.kinds.length > MAX_TAIL_KINDS ||
      request.kinds.some((kind) => !/^[a-z][a-z0-9_]{0,63}$/.test(kind))
    ) {
      throw new Refusal(
        ErrorCode.INVALID_MESSAGE,
        "invalid_kinds",
        `kinds must be at most ${MAX_TAIL_KINDS} entry kinds such as "decision"`,
      );
    }
    if (request.sessionId !== "") await checkSession(request.sessionId, context.auth);
    return {
      tail,
      filter: {
        organizationId: context.auth.organizationId,
        // A key bound to agents sees their sessions only (session ids are how one touches a session).
        agents:
          config.organizations.get(context.auth.organizationId)?.keyAgents.get(context.auth.keyId) ?? null,
        sessionId: request.sessionId === "" ? null : request.sessionId,
        kinds: request.kinds.length === 0 ? null : new Set(request.kinds),
      },
      afterSeq: after === undefined ? null : Number(after),
    };
  }

  /** Runs `fn` holding one of the MAX_TAILS slots and one of its organization's. */
  async function withTailSlot<T>(org: string, fn: () => Promise<T>): Promise<T> {
    if (tails >= MAX_TAILS) {
      metrics.rateLimited.inc();
      throw new Refusal(ErrorCode.RATE_LIMITED, "too_many_tails", `more than ${MAX_TAILS} tails at once`);
    }
    const quotas = options.quotas;
    if (quotas !== undefined && !quotas.takeTail(org)) {
      metrics.rateLimited.inc();
      metrics.limitRefusals.inc({ limit: "org_tails" });
      throw new Refusal(
        ErrorCode.RATE_LIMITED,
        "org_tails",
        `organization ${org} has ${quotas.quotas.tails} tails open`,
      );
    }
    tails++;
    try {
      return await fn();
    } finally {
      tails--;
      quotas?.releaseTail(org);
    }
  }

  const shuttingDown = () =>
    new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "shutting_down", "the daemon is shutting down");

  /** The socket's tail_entries: one batch; with follow, waits (bounded) until there is something to send. */
  async function tailBatch(request: TailRequest, context: RequestContext): Promise<Payload> {
    const { tail, filter, afterSeq } = await tailFilterOf(request, context);
    return withTailSlot(context.auth.organizationId, async () => {
      const signal = context.signal;
      let after = afterSeq ?? (await tail.reader.startBefore(request.last, filter, signal));
      const maxEvents =
        request.limit === 0 ? SOCKET_TAIL_EVENTS : Math.min(request.limit, SOCKET_TAIL_EVENTS);
      const waitMs = Math.min(request.waitMs === 0 ? DEFAULT_TAIL_WAIT_MS : request.waitMs, MAX_TAIL_WAIT_MS);
      const deadline = Date.now() + waitMs;
      for (;;) {
        const page = await tail.reader.page(after, filter, { maxEvents, maxBytes: TAIL_BYTES });
        if (page.afterSeq >= 0) tail.feed.observe(page.afterSeq);
        after = page.afterSeq;
        const left = deadline - Date.now();
        if (page.events.length > 0 || page.more || !request.follow || left <= 0) {
          return {
            case: "tailBatch",
            value: create(TailBatchSchema, { events: page.events, afterSeq: BigInt(after), more: page.more }),
          };
        }
        const why = await tail.feed.wait(after, signal, left);
        if (why === "closed") throw shuttingDown();
        if (why === "aborted")
          throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "cancelled", "the caller went away");
      }
    });
  }

  async function dispatch(payload: Payload, context: RequestContext): Promise<Answer> {
    switch (payload.case) {
      case "register":
        return register(payload.value, context);
      case "preExec":
        return preExec(payload.value, context);
      case "postExec":
        return postExec(payload.value, context);
      case "heartbeat":
        return heartbeat(payload.value, context);
      case "getSessionState":
        return sessionState(payload.value, context);
      case "waitHitl":
        return waitHitl(payload.value, context);
      case "tailEntries":
        return tailBatch(payload.value, context);
      default:
        throw new Refusal(
          ErrorCode.INVALID_MESSAGE,
          "not_a_request",
          `a ${payload.case ?? "empty"} payload is not a request the daemon answers`,
        );
    }
  }

  return {
    async streamHitl(request, context, send) {
      try {
        await checkSession(request.sessionId, context.auth);
        const hitl = options.hitl;
        if (hitl === undefined) {
          throw new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "hitl_unavailable", "this daemon has no HITL desk");
        }
        const now = await hitl.get(request.requestId);
        if (now === null || now.sessionId !== request.sessionId) {
          throw new HitlError("hitl_request_not_found", "no such HITL request in this session");
        }
        const first = now.status !== HitlStatus.HITL_PENDING;
        send(create(HitlUpdateSchema, { request: now, final: first }));
        if (first) return null;
        const view = await hitl.wait(request.requestId, request.sessionId, context.signal);
        send(create(HitlUpdateSchema, { request: view, final: true }));
        return null;
      } catch (error) {
        const known = answerFor(error);
        if (known === undefined)
          logger.warn({ rpc: "WaitHitl", err: error }, "request failed inside the daemon");
        return (known ?? errorPayload(new Error("internal"))).value as ErrorMessage;
      }
    },

    async streamTail(request, context, send) {
      try {
        const { tail, filter, afterSeq } = await tailFilterOf(request, context);
        return await withTailSlot(context.auth.organizationId, async () => {
          const signal = context.signal;
          let after = afterSeq ?? (await tail.reader.startBefore(request.last, filter, signal));
          let left = request.limit === 0 ? Number.POSITIVE_INFINITY : request.limit;
          for (;;) {
            if (signal?.aborted) return null;
            const page = await tail.reader.page(after, filter, {
              maxEvents: Math.min(left, SOCKET_TAIL_EVENTS),
              maxBytes: TAIL_BYTES,
            });
            for (const event of page.events) {
              if (signal?.aborted) return null;
              await send(event);
            }
            left -= page.events.length;
            after = page.afterSeq;
            if (after >= 0) tail.feed.observe(after);
            if (left <= 0) return null;
            if (page.more) continue;
            if (!request.follow) return null;
            const why = await tail.feed.wait(after, signal, STREAM_RECHECK_MS);
            if (why === "closed") throw shuttingDown();
            if (why === "aborted") return null;
          }
        });
      } catch (error) {
        const known = answerFor(error);
        if (known === undefined)
          logger.warn({ rpc: "TailEntries", err: error }, "request failed inside the daemon");
        return (known ?? errorPayload(new Error("internal"))).value as ErrorMessage;
      }
    },

    async handle(payload, context) {
      const rpc = RPC_OF[payload.case as keyof typeof RPC_OF] ?? "other";
      const stop = metrics.latency.startTimer({ rpc });
      try {
        const answer = await dispatch(payload, context);
        logger.debug({ rpc, org: context.auth.organizationId, answer: answer?.case ?? "none" }, "request");
        return answer;
      } catch (error) {
        const known = answerFor(error);
        const answer = known ?? errorPayload(new Error("internal"));
        if (known === undefined) {
          logger.warn({ rpc, err: error }, "request failed inside the daemon");
        } else {
          logger.debug(
            { rpc, code: ErrorCode[answer.value.code], detail: answer.value.detail },
            "request refused",
          );
        }
        return answer;
      } finally {
        stop();
        if (WRITES.has(payload.case)) options.tail?.feed.poke();
      }
    },
  };
}
