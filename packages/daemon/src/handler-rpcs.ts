// The daemon's session RPCs besides PreExec: Register, PostExec, Heartbeat, GetSessionState and WaitHitl
// (the socket's answer and gRPC's stream), each mapped onto engine calls. Not dispatch, nor error mapping.
import { create } from "@bufbuild/protobuf";
import {
  ErrorCode,
  type Error as ErrorMessage,
  errorPayload,
  type GetSessionStateRequest,
  type Heartbeat,
  HeartbeatAckSchema,
  HitlStatus,
  type HitlUpdate,
  HitlUpdateSchema,
  moneyFromWire,
  negotiateProtocolVersion,
  type Payload,
  PostExecAckSchema,
  type PostExecNotification,
  type RegisterRequest,
  RegisterResponseSchema,
  type WaitHitlRequest,
} from "@leash/wire";
import { idProblem } from "./answer-size.js";
import { keyMayActAs, policyFor } from "./config.js";
import type { HandlerScope } from "./handler-scope.js";
import type { Answer, RequestContext } from "./handler-types.js";
import {
  answerFor,
  callNumberOf,
  guardConfigToWire,
  money,
  Refusal,
  sessionStateOf,
  withHitlTimeout,
} from "./handler-wire.js";
import { HitlError } from "./hitl/errors.js";

export async function register(
  scope: HandlerScope,
  request: RegisterRequest,
  context: RequestContext,
): Promise<Payload> {
  const { options } = scope;
  const negotiated = negotiateProtocolVersion(context.protocolVersion);
  const orgId = request.organizationId === "" ? context.auth.organizationId : request.organizationId;
  if (orgId !== context.auth.organizationId) {
    options.metrics.authFailures.inc({ detail: "wrong_organization" });
    throw new Refusal(
      ErrorCode.AUTHENTICATION_FAILED,
      "wrong_organization",
      "organization_id is not the organization of the key that signed the envelope",
    );
  }
  const org = options.config.organizations.get(orgId);
  if (org === undefined)
    throw new Refusal(ErrorCode.AUTHENTICATION_FAILED, "unknown_key", "unknown organization");
  if (request.agentId === "")
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "missing_agent_id", "agent_id is required");
  const tooLong = idProblem(request.agentId, request.sessionId);
  if (tooLong !== null) throw new Refusal(ErrorCode.INVALID_MESSAGE, "id_too_long", tooLong);
  if (!keyMayActAs(org, context.auth.keyId, request.agentId)) {
    options.metrics.authFailures.inc({ detail: "agent_not_allowed" });
    throw new Refusal(
      ErrorCode.AUTHENTICATION_FAILED,
      "agent_not_allowed",
      "the key that signed the envelope is not bound to this agent_id",
    );
  }
  if (request.sessionId !== "") {
    // Resuming: the session must be this organization's and this agent's (else a new id is
    // created under them); anything else is answered as an unknown session.
    const known = scope.sessions.ownerOf(request.sessionId);
    if (known !== undefined && (known.org !== orgId || known.agent !== request.agentId)) {
      throw new Refusal(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
    }
  }
  const view = await options.engine.register({
    agent_id: request.agentId,
    organization_id: orgId,
    ...(request.sessionId === "" ? {} : { session_id: request.sessionId }),
    config: withHitlTimeout(policyFor(org, request.agentId), options.hitlTimeoutS),
  });
  if (view.organization_id !== orgId) {
    throw new Refusal(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
  }
  scope.sessions.remember(view.session_id, { org: orgId, agent: view.agent_id });
  return {
    case: "registerResponse",
    value: create(RegisterResponseSchema, {
      sessionId: view.session_id,
      daemonVersion: options.daemonVersion,
      negotiatedProtocol: negotiated,
      activeConfig: guardConfigToWire(view.config),
      daemonTimeNs: scope.nowNs(),
    }),
  };
}

export async function postExec(
  scope: HandlerScope,
  request: PostExecNotification,
  context: RequestContext,
): Promise<Answer> {
  // Tracked before the first await, so a PreExec of the session that arrives next always waits for it.
  const settled = await scope.settlements.track(
    request.sessionId,
    (async () => {
      await scope.sessions.check(request.sessionId, context.auth);
      const actual =
        moneyFromWire(request.actualCostUsd, request.actualCostUsdDecimal, "actual_cost_usd") ?? "0";
      return scope.options.engine.postExec({
        session_id: request.sessionId,
        call_number: callNumberOf(request.callNumber, "call_number"),
        actual_cost_usd: actual,
        success: request.success,
        ...(request.idempotencyKey === "" ? {} : { idempotency_key: request.idempotencyKey }),
      });
    })(),
  );
  if (!settled.replayed && settled.budget_remaining_usd !== null) scope.options.metrics.holdsSettled.inc();
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

export async function heartbeat(
  scope: HandlerScope,
  request: Heartbeat,
  context: RequestContext,
): Promise<Payload> {
  const { engine } = scope.options;
  await scope.sessions.check(request.sessionId, context.auth);
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
      daemonTimeNs: scope.nowNs(),
    }),
  };
}

export async function sessionState(
  scope: HandlerScope,
  request: GetSessionStateRequest,
  context: RequestContext,
): Promise<Payload> {
  const seen = await scope.sessions.check(request.sessionId, context.auth);
  const view = seen ?? (await scope.options.engine.getSession(request.sessionId));
  return { case: "sessionState", value: sessionStateOf(view) };
}

const noHitlDesk = () =>
  new Refusal(ErrorCode.DAEMON_UNAVAILABLE, "hitl_unavailable", "this daemon has no HITL desk");

export async function waitHitl(
  scope: HandlerScope,
  request: WaitHitlRequest,
  context: RequestContext,
): Promise<Payload> {
  await scope.sessions.check(request.sessionId, context.auth);
  const hitl = scope.options.hitl;
  if (hitl === undefined) throw noHitlDesk();
  const view = await hitl.wait(request.requestId, request.sessionId, context.signal);
  return { case: "hitlUpdate", value: create(HitlUpdateSchema, { request: view, final: true }) };
}

/** gRPC's WaitHitl stream (RequestHandler.streamHitl): never throws. */
export async function streamHitl(
  scope: HandlerScope,
  request: WaitHitlRequest,
  context: RequestContext,
  send: (update: HitlUpdate) => void,
): Promise<ErrorMessage | null> {
  try {
    await scope.sessions.check(request.sessionId, context.auth);
    const hitl = scope.options.hitl;
    if (hitl === undefined) throw noHitlDesk();
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
      scope.options.logger.warn({ rpc: "WaitHitl", err: error }, "request failed inside the daemon");
    return (known ?? errorPayload(new Error("internal"))).value as ErrorMessage;
  }
}
