// createClient: the agent's side of the sidecar daemon — register, pre_exec, post_exec, heartbeat and
// session state over one self-healing Unix-socket or gRPC connection. pre_exec never throws: it fails closed.
import { createHash, getRandomValues } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { Clock } from "@leash/core";
import {
  errorCodeName,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  MIN_KEY_BYTES,
  moneyFromWire,
  moneyToWire,
  type Payload,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  RegisterRequestSchema,
  type SessionState,
  verdictFromWire,
} from "@leash/wire";
import { Connection } from "./connection.js";
import { LeashError, type LeashErrorCode } from "./errors.js";
import { GrpcConnection } from "./grpc-connection.js";
import { waitBudgetMs, waitForHitlOn } from "./hitl-wait.js";
import { paramsOnWire } from "./params-on-wire.js";
import { receiptProblem } from "./receipt-check.js";
import { SettlementOutbox } from "./settlement-outbox.js";
import { tailOn } from "./tail.js";
import type { RequestOutcome, Transport } from "./transport.js";
import type {
  ClientOptions,
  ClientRegisterRequest,
  FailClosedReason,
  HeartbeatResult,
  HitlOutcome,
  PostExecSettlement,
  PreExecCall,
  PreExecResult,
  RegisterResult,
  TailEntry,
  TailOptions,
} from "./types.js";

/** The spec's pre_exec SLA is 5 ms (§8); 50 ms leaves room for a loaded host before failing closed. */
export const DEFAULT_TIMEOUT_MS = 50;
export const DEFAULT_CONTROL_TIMEOUT_MS = 1000;
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000;
export const DEFAULT_RECONNECT = { initialDelayMs: 50, maxDelayMs: 5000 } as const;

/** Sent when params have no JSON form: the daemon answers DENY policy_violation:malformed_input, as the engine would. */

export interface Client {
  register(request?: ClientRegisterRequest): Promise<RegisterResult>;
  /** The daemon's verdict, or a DENY the client decided itself (fail_closed: true). Never throws. */
  preExec(call: PreExecCall): Promise<PreExecResult>;
  /**
   * Sends the settlement and resolves once the daemon has it durably (its post_exec_ack; gRPC's
   * `Empty`). Until then the client keeps it: when no answer comes (a timeout, a daemon stopped or
   * gone), this throws but the settlement is sent again after the next reconnect, heartbeat or
   * post-exec, until the daemon confirms it (the daemon records one settlement per call). A refusal
   * of such a re-send goes to onBackgroundError.
   */
  postExec(settlement: PostExecSettlement): Promise<{ session_id: string; call_number: number }>;
  /** Settlements sent but not yet confirmed durable by the daemon (kept and re-sent). */
  readonly pendingSettlements: number;
  heartbeat(): Promise<HeartbeatResult>;
  getSession(sessionId?: string): Promise<SessionState>;
  /**
   * Waits for a human's answer to a HITL request (PreExecResult.hitl_request_id), up to its expiry
   * (`expires_ns`, default the daemon's 15 minutes). Never throws: a dead daemon, no answer in time or
   * a refusal is `kind: "fail_closed"` — treat it, and `expired`, as DENY.
   */
  waitForHitl(
    requestId: string,
    options?: { session_id?: string; expires_ns?: bigint | null; timeoutMs?: number },
  ): Promise<HitlOutcome>;
  /**
   * Your organization's audit chain entries, oldest first (`leash tail --daemon`): the whole chain by
   * default, after `afterSeq`, or the latest `last`; with `follow`, then each new one until `signal`
   * aborts. Fails closed: a dead daemon, a refusal or an answer that does not fit ends the iteration
   * with a thrown LeashError (daemon_unavailable, timeout, daemon_error, bad_response).
   */
  tail(options?: TailOptions): AsyncGenerator<TailEntry>;
  /** The session of the last register(), or null before it. */
  readonly sessionId: string | null;
  close(): void;
}

type PayloadValue<C> = Extract<Payload, { case: C }> extends { value: infer V } ? V : never;

const systemClock: Clock = { nowNs: () => Date.now() * 1e6 };

export function createClient(options: ClientOptions): Client {
  for (const name of ["organizationId", "agentId"] as const) {
    if (typeof options?.[name] !== "string" || options[name] === "") {
      throw new LeashError("invalid_argument", `createClient: ${name} must be a non-empty string`);
    }
  }
  if ((options.socketPath === undefined) === (options.grpc === undefined)) {
    throw new LeashError("invalid_argument", "createClient: give one of socketPath or grpc");
  }
  if (options.daemonPublicKey !== undefined && !/^[0-9a-f]{64}$/i.test(options.daemonPublicKey)) {
    throw new LeashError(
      "invalid_argument",
      "createClient: daemonPublicKey must be 64 hex characters (Ed25519)",
    );
  }
  const timeoutMs = positive("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  const controlTimeoutMs = positive(
    "controlTimeoutMs",
    options.controlTimeoutMs ?? DEFAULT_CONTROL_TIMEOUT_MS,
  );
  const heartbeatMs = options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  if (!Number.isFinite(heartbeatMs) || heartbeatMs < 0) {
    throw new LeashError(
      "invalid_argument",
      "createClient: heartbeatIntervalMs must be ≥ 0 (0 turns it off)",
    );
  }
  const reconnect = {
    initialDelayMs: positive(
      "reconnect.initialDelayMs",
      options.reconnect?.initialDelayMs ?? DEFAULT_RECONNECT.initialDelayMs,
    ),
    maxDelayMs: positive(
      "reconnect.maxDelayMs",
      options.reconnect?.maxDelayMs ?? DEFAULT_RECONNECT.maxDelayMs,
    ),
  };
  const connection: Transport =
    options.grpc !== undefined
      ? new GrpcConnection({ target: options.grpc, organizationId: options.organizationId, ...reconnect })
      : socketConnection(options, reconnect);
  connection.start();

  const outbox = new SettlementOutbox({
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
  connection.onConnected?.(() => void outbox.retry());

  let currentSession: string | null = null;
  /** The highest call number the daemon gave each session: the next request says the one after. */
  const lastCall = new Map<string, number>();
  let heartbeatTimer: ReturnType<typeof setInterval> | null = null;

  /** A control request's answer of the expected kind, or a thrown LeashError. */
  async function control<C extends NonNullable<Payload["case"]>>(
    payload: Payload,
    expected: C,
  ): Promise<PayloadValue<C>> {
    const outcome = await connection.request(payload, controlTimeoutMs);
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

  function sessionOf(given: string | undefined): string {
    const id = given ?? currentSession;
    if (typeof id !== "string" || id === "") {
      throw new LeashError("invalid_argument", "no session_id given and register() has not run");
    }
    return id;
  }

  const client: Client = {
    get sessionId() {
      return currentSession;
    },

    get pendingSettlements() {
      return outbox.size;
    },

    async register(request = {}) {
      const value = await control(
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
      currentSession = value.sessionId;
      if (heartbeatMs > 0 && heartbeatTimer === null) {
        heartbeatTimer = setInterval(() => {
          void outbox.retry();
          client.heartbeat().catch((error) => options.onBackgroundError?.(error));
        }, heartbeatMs);
        heartbeatTimer.unref();
      }
      return {
        session_id: value.sessionId,
        daemon_version: value.daemonVersion,
        negotiated_protocol: value.negotiatedProtocol,
        active_config: value.activeConfig,
        daemon_time_ns: value.daemonTimeNs,
      };
    },

    async preExec(call) {
      const sessionId = call?.session_id ?? currentSession ?? "";
      const deny = (
        reason: FailClosedReason,
        detail: string,
        paramsHash: string | null = null,
      ): PreExecResult => ({
        session_id: sessionId,
        call_number: 0,
        verdict: "DENY",
        reason,
        budget_remaining_usd: null,
        params_hash: paramsHash,
        entry_seq: null,
        entry_hash: null,
        receipt: null,
        fail_closed: true,
        detail,
      });
      try {
        if (sessionId === "")
          return deny("fail_closed:bad_request", "no session_id given and register() has not run");
        if (typeof call.tool_name !== "string" || call.tool_name === "") {
          return deny("fail_closed:bad_request", "tool_name must be a non-empty string");
        }
        const { json, hash, digest } = paramsOnWire(call.params);
        let estimate: { double: number; decimal: string };
        let nonce: bigint;
        try {
          estimate = moneyToWire(call.estimated_cost_usd ?? 0);
          nonce = nonceOf(call.nonce);
        } catch (error) {
          return deny("fail_closed:bad_request", messageOf(error), hash);
        }
        const outcome = await connection.request(
          {
            case: "preExec",
            value: create(PreExecRequestSchema, {
              sessionId,
              callNumber: BigInt((lastCall.get(sessionId) ?? 0) + 1),
              toolName: call.tool_name,
              toolParamsJson: json,
              ...(digest === null ? {} : { toolParamsHash: digest }),
              estimatedCostUsd: estimate.double,
              estimatedCostUsdDecimal: estimate.decimal,
              nonce,
            }),
          },
          timeoutMs,
        );
        if (!outcome.ok) return deny(`fail_closed:${outcome.failure}`, outcome.message, hash);
        const payload = outcome.answer;
        if (payload.case === "error") {
          const e = payload.value;
          return deny("fail_closed:daemon_error", `${errorCodeName(e.code)} ${e.detail}: ${e.message}`, hash);
        }
        if (payload.case !== "preExecResponse") {
          return deny("fail_closed:bad_response", `the daemon answered ${payload.case} to a pre_exec`, hash);
        }
        const r = payload.value;
        if (r.sessionId !== sessionId) {
          return deny(
            "fail_closed:bad_response",
            `a verdict for session ${JSON.stringify(r.sessionId)}`,
            hash,
          );
        }
        if (r.reason === "") return deny("fail_closed:bad_response", "a verdict without its reason", hash);
        let remaining: string | undefined;
        try {
          remaining = moneyFromWire(
            r.budgetRemainingUsd,
            r.budgetRemainingUsdDecimal,
            "budget_remaining_usd",
          );
        } catch (error) {
          return deny("fail_closed:bad_response", messageOf(error), hash);
        }
        const result: PreExecResult = {
          session_id: sessionId,
          call_number: Number(r.callNumber),
          verdict: verdictFromWire(r.verdict),
          reason: r.reason,
          budget_remaining_usd: remaining ?? null,
          params_hash: hash,
          entry_seq: Number(r.chainSeq),
          entry_hash: r.entryHash,
          receipt: r.receipt === "" ? null : r.receipt,
          fail_closed: false,
          hitl_request_id: r.hitlRequestId === "" ? null : r.hitlRequestId,
          hitl_expires_ns: r.hitlExpiresNs === 0n ? null : r.hitlExpiresNs,
        };
        if (result.call_number > (lastCall.get(sessionId) ?? 0)) lastCall.set(sessionId, result.call_number);
        if (options.daemonPublicKey !== undefined) {
          const problem = await receiptProblem(r.receipt, options.daemonPublicKey, {
            session_id: sessionId,
            call_number: result.call_number,
            tool_name: call.tool_name,
            params_hash: hash,
            nonce: nonce.toString(),
            verdict: result.verdict,
            reason: result.reason,
            entry_hash: r.entryHash,
            entry_seq: Number(r.chainSeq),
          });
          if (problem !== null) return deny("fail_closed:bad_receipt", problem, hash);
        }
        return result;
      } catch (error) {
        // Whatever went wrong, the answer is DENY, never an exception a caller might swallow.
        return deny("fail_closed:bad_request", messageOf(error));
      }
    },

    async postExec(settlement) {
      const sessionId = sessionOf(settlement.session_id);
      if (!Number.isSafeInteger(settlement.call_number) || settlement.call_number < 1) {
        throw new LeashError("invalid_argument", "postExec: call_number must be an integer ≥ 1");
      }
      let cost: { double: number; decimal: string };
      try {
        cost = moneyToWire(settlement.actual_cost_usd);
      } catch (error) {
        throw new LeashError("invalid_argument", `postExec: actual_cost_usd: ${messageOf(error)}`);
      }
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
    },

    async heartbeat() {
      const sessionId = sessionOf(undefined);
      const ack = await control(
        {
          case: "heartbeat",
          value: create(HeartbeatSchema, { sessionId, lastCallNumber: BigInt(lastCall.get(sessionId) ?? 0) }),
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
    },

    async getSession(sessionId) {
      return control(
        {
          case: "getSessionState",
          value: create(GetSessionStateRequestSchema, { sessionId: sessionOf(sessionId) }),
        },
        "sessionState",
      );
    },

    async waitForHitl(requestId, waitOptions = {}) {
      const sessionId = waitOptions.session_id ?? currentSession ?? "";
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
    },

    tail(tailOptions) {
      return tailOn(connection, tailOptions);
    },

    close() {
      if (heartbeatTimer !== null) clearInterval(heartbeatTimer);
      heartbeatTimer = null;
      connection.close();
    },
  };
  return client;
}

const FAILURE_CODES: Record<string, LeashErrorCode> = {
  daemon_unavailable: "daemon_unavailable",
  timeout: "timeout",
  bad_response: "bad_response",
  auth_failed: "auth_failed",
};

function answerOf(outcome: RequestOutcome): Payload {
  if (outcome.ok) return outcome.answer;
  throw new LeashError(FAILURE_CODES[outcome.failure] ?? "bad_response", outcome.message);
}

const MAX_UINT64 = 2n ** 64n - 1n;

/**
 * The uint64 nonce to send: a safe integer or uint64 decimal as given; any other text (a UUID, say)
 * maps to 52 bits of its SHA-256, plus one. Default: a random safe integer, so a daemon that reads it
 * as a JavaScript number records it exactly.
 */
function nonceOf(nonce: PreExecCall["nonce"]): bigint {
  if (nonce === undefined) {
    const [hi = 0, lo = 0] = getRandomValues(new Uint32Array(2));
    return (BigInt(hi & 0x1fffff) << 32n) + BigInt(lo) + 1n;
  }
  if (typeof nonce === "number") {
    if (!Number.isSafeInteger(nonce) || nonce < 1) throw new Error(`nonce ${nonce} is not an integer ≥ 1`);
    return BigInt(nonce);
  }
  if (typeof nonce === "bigint") {
    if (nonce < 1n || nonce > MAX_UINT64) throw new Error(`nonce ${nonce} is outside 1 … 2^64 − 1`);
    return nonce;
  }
  if (typeof nonce === "string" && /^[1-9][0-9]{0,19}$/.test(nonce) && BigInt(nonce) <= MAX_UINT64)
    return BigInt(nonce);
  if (typeof nonce !== "string" || nonce === "")
    throw new Error("nonce must be a non-empty string or an integer");
  const digest = createHash("sha256").update(nonce).digest();
  return (digest.readBigUInt64BE(0) >> 12n) + 1n;
}

/** The Unix-socket transport: SP/1.0 envelopes HMAC'd with the organization's key. */
function socketConnection(
  options: ClientOptions,
  reconnect: { initialDelayMs: number; maxDelayMs: number },
): Connection {
  if (typeof options.socketPath !== "string" || options.socketPath === "")
    throw new LeashError("invalid_argument", "createClient: socketPath must be a non-empty string");
  if (options.hmacKey === undefined)
    throw new LeashError(
      "invalid_argument",
      "createClient: the socket needs hmacKey (the organization's key)",
    );
  const key = hmacKeyOf(options.hmacKey);
  if (typeof options.keyId !== "string")
    throw new LeashError("invalid_argument", "createClient: keyId must be a string");
  return new Connection({
    socketPath: options.socketPath,
    key,
    keyId: options.keyId,
    clock: systemClock,
    ...reconnect,
    onStray: (envelope) => {
      if (envelope.payload.case !== "error") return;
      const e = envelope.payload.value;
      options.onBackgroundError?.(
        new LeashError(
          "daemon_error",
          `the daemon refused a notification or late request: ${errorCodeName(e.code)} ${e.detail}: ${e.message}`,
        ),
      );
    },
  });
}

function hmacKeyOf(key: Uint8Array | string): Uint8Array {
  let bytes: Uint8Array;
  if (typeof key === "string") {
    const hex = key.trim();
    if (!/^([0-9a-fA-F]{2})+$/.test(hex))
      throw new LeashError("invalid_argument", "createClient: hmacKey is not hex");
    bytes = new Uint8Array(Buffer.from(hex, "hex"));
  } else if (key instanceof Uint8Array) bytes = key;
  else throw new LeashError("invalid_argument", "createClient: hmacKey must be bytes or hex");
  if (bytes.length < MIN_KEY_BYTES) {
    throw new LeashError("invalid_argument", `createClient: hmacKey must be at least ${MIN_KEY_BYTES} bytes`);
  }
  return bytes;
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new LeashError("invalid_argument", `createClient: ${name} must be > 0`);
  return value;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
