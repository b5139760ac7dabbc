// createClient: the agent's side of the sidecar daemon — register, pre_exec, post_exec, heartbeat and
// session state over one self-healing Unix-socket or gRPC connection. pre_exec never throws: it fails closed.
import type { SessionState } from "@leash/wire";
import * as calls from "./client-calls.js";
import { preExec } from "./client-pre-exec.js";
import { checkClientOptions, connectionFor } from "./client-setup.js";
import { tailOn } from "./tail.js";
import type {
  ClientOptions,
  ClientRegisterRequest,
  HeartbeatResult,
  HitlOutcome,
  PostExecSettlement,
  PreExecCall,
  PreExecResult,
  RegisterResult,
  TailEntry,
  TailOptions,
} from "./types.js";

export {
  DEFAULT_CONTROL_TIMEOUT_MS,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
  DEFAULT_RECONNECT,
  DEFAULT_TIMEOUT_MS,
} from "./client-setup.js";

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

export function createClient(options: ClientOptions): Client {
  const { timeoutMs, controlTimeoutMs, heartbeatMs, reconnect } = checkClientOptions(options);
  const connection = connectionFor(options, reconnect);
  connection.start();

  const outbox = calls.settlementOutbox(options, connection, controlTimeoutMs);
  connection.onConnected?.(() => void outbox.retry());

  let currentSession: string | null = null;
  // lastCall: the highest call number the daemon gave each session (the next request says the one after).
  const scope: calls.ClientScope = {
    options,
    connection,
    timeoutMs,
    controlTimeoutMs,
    outbox,
    lastCall: new Map(),
  };
  let heartbeatTimer: ReturnType<typeof setInterval> | null = null;

  const sessionOf = (given: string | undefined) => calls.sessionOf(given ?? currentSession);
  const client: Client = {
    get sessionId() {
      return currentSession;
    },
    get pendingSettlements() {
      return outbox.size;
    },
    async register(request = {}) {
      const result = await calls.register(scope, request);
      currentSession = result.session_id;
      if (heartbeatMs > 0 && heartbeatTimer === null) {
        heartbeatTimer = setInterval(() => {
          void outbox.retry();
          client.heartbeat().catch((error) => options.onBackgroundError?.(error));
        }, heartbeatMs);
        heartbeatTimer.unref();
      }
      return result;
    },
    preExec(call) {
      return preExec(scope, call, call?.session_id ?? currentSession ?? "");
    },
    async postExec(settlement) {
      return calls.postExec(scope, sessionOf(settlement.session_id), settlement);
    },
    async heartbeat() {
      return calls.heartbeat(scope, sessionOf(undefined));
    },
    async getSession(sessionId) {
      return calls.getSession(scope, sessionOf(sessionId));
    },
    async waitForHitl(requestId, waitOptions = {}) {
      return calls.waitForHitl(
        connection,
        requestId,
        waitOptions.session_id ?? currentSession ?? "",
        waitOptions,
      );
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
