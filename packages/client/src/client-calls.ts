// The client's control calls: register, post_exec (through the settlement outbox), heartbeat and session
// state, each an answer of the expected kind or a thrown LeashError. Not pre_exec, which never throws.
import { create } from "@bufbuild/protobuf";
import {
  errorCodeName,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  moneyFromWire,
  moneyToWire,
  type Payload,
  PostExecNotificationSchema,
  RegisterRequestSchema,
  type SessionState,
} from "@leash/wire";
import type { PreExecScope } from "./client-pre-exec.js";
import { answerOf, FAILURE_CODES, messageOf } from "./client-setup.js";
import { LeashError } from "./errors.js";
import { waitBudgetMs, waitForHitlOn } from "./hitl-wait.js";
import { SettlementOutbox } from "./settlement-outbox.js";
import type { Transport } from "./transport.js";
import type {
  ClientOptions,
  ClientRegisterRequest,
  HeartbeatResult,
  HitlOutcome,
  PostExecSettlement,
  RegisterResult,
} from "./types.js";

/** What the client's calls share: its options, connection, timeouts, call numbers and outbox. */
export interface ClientScope extends PreExecScope {
  readonly controlTimeoutMs: number;
  readonly outbox: SettlementOutbox;
}

/** The outbox that keeps each settlement until the daemon confirms it; one it gives up on is reported. */
export function settlementOutbox(
  options: ClientOptions,
  connection: Transport,
  controlTimeoutMs: number,
): SettlementOutbox {
  return new SettlementOutbox({
    send: (payload) => connection.settle(payload, controlTimeoutMs),
    onGiveUp: (payload, why) => {
      const p = payload.value as { sessionId?: string; callNumber?: bigint };
      options.onBackgroundError?.(
        new LeashError(
          "daemon_error",
          `the settlement of call ${p.callNumber} of session ${p.sessionId} was not recorded: ${why}`,
        ),
      );
    },
  });
}

/** The session a call names, else the registered one; neither is a LeashError invalid_argument. */
export function sessionOf(id: string | null | undefined): string {
  if (typeof id !== "string" || id === "") {
    throw new LeashError("invalid_argument", "no session_id given and register() has not run");
  }
  return id;
}

type PayloadValue<C> = Extract<Payload, { case: C }> extends { value: infer V } ? V : never;

/** A control request's answer of the expected kind, or a thrown LeashError. */
export async function control<C extends NonNullable<Payload["case"]>>(
  scope: ClientScope,
  payload: Payload,
  expected: C,
): Promise<PayloadValue<C>> {
  const outcome = await scope.connection.request(payload, scope.controlTimeoutMs);
  const answer = answerOf(outcome);
  if (answer.case === "error") {
    const e = answer.value;
    throw new LeashError(
      "daemon_error",
      `the daemon refused: ${errorCodeName(e.code)} ${e.detail}: ${e.message}`,
    );
  }
  if (answer.case !== expected) {
    throw new LeashError("bad_response", `the daemon answered ${answer.case} to a ${payload.case}`);
  }
  return answer.value as PayloadValue<C>;
}

/** Registers (or resumes) the session; the caller keeps the session id and starts the heartbeat. */
export async function register(scope: ClientScope, request: ClientRegisterRequest): Promise<RegisterResult> {
  const { options, connection } = scope;
  const value = await control(
    scope,
    {
      case: "register",
      value: create(RegisterRequestSchema, {
        agentId: options.agentId,
        organizationId: options.organizationId,
        agentVersion: options.agentVersion ?? "",
        framework: request.framework ?? options.framework ?? "",
        sessionId: request.session_id ?? "",
        runtime: `node ${process.version}`,
        metadata: request.metadata ?? {},
      }),
    },
    "registerResponse",
  );
  if (value.sessionId === "") throw new LeashError("bad_response", "the daemon registered no session id");
  if (value.negotiatedProtocol !== "") connection.protocolVersion = value.negotiatedProtocol;
  return {
    session_id: value.sessionId,
    daemon_version: value.daemonVersion,
    negotiated_protocol: value.negotiatedProtocol,
    active_config: value.activeConfig,
    daemon_time_ns: value.daemonTimeNs,
  };
}

export async function postExec(
  scope: ClientScope,
  sessionId: string,
  settlement: PostExecSettlement,
): Promise<{ session_id: string; call_number: number }> {
  if (!Number.isSafeInteger(settlement.call_number) || settlement.call_number < 1) {
    throw new LeashError("invalid_argument", "postExec: call_number must be an integer ≥ 1");
  }
  let cost: { double: number; decimal: string };
  try {
    cost = moneyToWire(settlement.actual_cost_usd);
  } catch (error) {
    throw new LeashError("invalid_argument", `postExec: actual_cost_usd: ${messageOf(error)}`);
  }
  const { outbox } = scope;
  void outbox.retry(); // earlier settlements still unconfirmed go first
  const outcome = await outbox.send(`${sessionId}#${settlement.call_number}`, {
    case: "postExec",
    value: create(PostExecNotificationSchema, {
      sessionId,
      callNumber: BigInt(settlement.call_number),
      actualCostUsd: cost.double,
      actualCostUsdDecimal: cost.decimal,
      success: settlement.success ?? true,
      errorMessage: settlement.error_message ?? "",
      durationMs: BigInt(Math.max(0, Math.trunc(settlement.duration_ms ?? 0))),
      idempotencyKey: settlement.idempotency_key ?? "",
      ackRequested: true,
    }),
  });
  if (!outcome.ok) {
    throw new LeashError(
      FAILURE_CODES[outcome.failure] ?? "bad_response",
      `${outcome.message} (the settlement is kept and sent again)`,
    );
  }
  // gRPC acknowledges with Empty (null here), the socket with a post_exec_ack; or a refusal.
  const answer = outcome.answer;
  if (answer?.case === "error") {
    const e = answer.value;
    throw new LeashError(
      "daemon_error",
      `the daemon refused: ${errorCodeName(e.code)} ${e.detail}: ${e.message}`,
    );
  }
  if (answer !== null && answer.case !== "postExecAck") {
    throw new LeashError("bad_response", `the daemon answered ${answer.case} to a post_exec`);
  }
  return { session_id: sessionId, call_number: settlement.call_number };
}

export async function heartbeat(scope: ClientScope, sessionId: string): Promise<HeartbeatResult> {
  const ack = await control(
    scope,
    {
      case: "heartbeat",
      value: create(HeartbeatSchema, {
        sessionId,
        lastCallNumber: BigInt(scope.lastCall.get(sessionId) ?? 0),
      }),
    },
    "heartbeatAck",
  );
  let remaining: string | undefined;
  try {
    remaining = moneyFromWire(
      ack.daemonBudgetRemaining,
      ack.daemonBudgetRemainingDecimal,
      "daemon_budget_remaining",
    );
  } catch (error) {
    throw new LeashError("bad_response", messageOf(error));
  }
  return {
    session_id: ack.sessionId,
    daemon_budget_remaining_usd: remaining ?? null,
    drift_detected: ack.driftDetected,
    daemon_time_ns: ack.daemonTimeNs,
  };
}

export function getSession(scope: ClientScope, sessionId: string): Promise<SessionState> {
  return control(
    scope,
    { case: "getSessionState", value: create(GetSessionStateRequestSchema, { sessionId }) },
    "sessionState",
  );
}

/** Waits for a human's answer to a HITL request (Client.waitForHitl): never throws. */
export async function waitForHitl(
  connection: Transport,
  requestId: string,
  sessionId: string,
  waitOptions: { expires_ns?: bigint | null; timeoutMs?: number },
): Promise<HitlOutcome> {
  if (typeof requestId !== "string" || requestId === "" || sessionId === "") {
    return {
      kind: "fail_closed",
      request_id: String(requestId),
      session_id: sessionId,
      call_number: 0,
      decision: null,
      operator_id: null,
      comment: "",
      reason: "fail_closed:bad_request",
      detail: "waitForHitl needs a request id and a session (register() first or pass session_id)",
      view: null,
    };
  }
  const timeoutMs = waitOptions.timeoutMs ?? waitBudgetMs(waitOptions.expires_ns);
  return waitForHitlOn(connection, { requestId, sessionId, timeoutMs });
}
