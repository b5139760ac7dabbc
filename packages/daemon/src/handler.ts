// The daemon's request handler: one authenticated request payload in, its answer payload out, any transport.
// Every decision is @leash/engine's; this maps SP/1.0 messages onto engine calls and engine errors onto Appendix B.
import { create } from "@bufbuild/protobuf";
import type { Nonce } from "@leash/core";
import type { Engine, EvaluateRequest, SessionView } from "@leash/engine";
import {
  denyReasonFor,
  ErrorCode,
  type Error as ErrorMessage,
  errorPayload,
  type GetSessionStateRequest,
  type Heartbeat,
  HeartbeatAckSchema,
  HitlStatus,
  HitlUpdateSchema,
  MAX_FRAME_BYTES,
  moneyFromWire,
  negotiateProtocolVersion,
  type Payload,
  PostExecAckSchema,
  type PostExecNotification,
  type PreExecRequest,
  PreExecResponseSchema,
  paramsFromJson,
  type RegisterRequest,
  RegisterResponseSchema,
  verdictToWire,
  type WaitHitlRequest,
  WireError,
} from "@leash/wire";
import { answerFits, idProblem, preExecAnswerBound } from "./answer-size.js";
import { CallGate } from "./call-gate.js";
import { keyMayActAs, policyFor } from "./config.js";
import { createTailRequests } from "./handler-tail.js";
import type { Answer, AuthContext, HandlerOptions, RequestContext, RequestHandler } from "./handler-types.js";
import {
  answerFor,
  callNumberOf,
  guardConfigToWire,
  money,
  Refusal,
  requireSessionId,
  sessionStateOf,
  toNs,
  withHitlTimeout,
} from "./handler-wire.js";
import { HitlError } from "./hitl/errors.js";
import { countPolicy } from "./metrics.js";

export type {
  Answer,
  AuthContext,
  HandlerOptions,
  RequestContext,
  RequestHandler,
} from "./handler-types.js";

/** Whom a session belongs to: the organization and agent that registered it. */
interface SessionOwner {
  readonly org: string;
  readonly agent: string;
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

export { MAX_TAILS } from "./handler-tail.js";
export { guardConfigToWire, hitlErrorPayload } from "./handler-wire.js";

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
    if (result.state_failure !== undefined) {
      logger.warn(
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
        // A refused row is named (table and key), for the agent's log as for the daemon's.
        humanReadableReason:
          result.state_failure === undefined
            ? `${result.verdict}: ${reason}`
            : `${result.verdict}: ${reason}: ${result.error}`,
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

  const tails = createTailRequests({ options, config, metrics, logger, checkSession });
  const tailBatch = tails.tailBatch;

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

    streamTail: tails.streamTail,

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
