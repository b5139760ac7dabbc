// The client's gRPC transport: the standard ShackleDaemon service (@leash/wire's definition) on @grpc/grpc-js,
// TLS, mTLS or loopback plaintext; grpc-js reconnects with backoff. It decides nothing; callers fail closed.
import { create } from "@bufbuild/protobuf";
import {
  type ChannelCredentials,
  type ChannelOptions,
  credentials,
  Client as GrpcClient,
  Metadata,
  type ServiceError,
  status as Status,
} from "@grpc/grpc-js";
import {
  ErrorCode,
  ErrorSchema,
  GRPC_ERROR_CODE_METADATA,
  GRPC_ERROR_DETAIL_METADATA,
  GRPC_ORGANIZATION_METADATA,
  GRPC_PROTOCOL_VERSION_METADATA,
  type GrpcMethodDefinition,
  MAX_FRAME_BYTES,
  type Payload,
  shackleGrpcService,
  type TailEvent,
  type TailRequest,
} from "@leash/wire";
import { LeashError } from "./errors.js";
import type { RequestOutcome, SettleOutcome, Transport } from "./transport.js";
import type { GrpcTarget } from "./types.js";

/** Which RPC carries each request payload, and the payload its answer becomes (null: Empty). */
const RPC_OF: Record<string, { method: string; answer: Payload["case"] | null }> = {
  register: { method: "Register", answer: "registerResponse" },
  preExec: { method: "PreExec", answer: "preExecResponse" },
  postExec: { method: "PostExec", answer: null },
  heartbeat: { method: "Heartbeat", answer: "heartbeatAck" },
  getSessionState: { method: "GetSessionState", answer: "sessionState" },
  // Server-streaming: the answer is the stream's final update (the socket's wait_hitl long poll).
  waitHitl: { method: "WaitHitl", answer: "hitlUpdate" },
};

/** Keepalive defaults: a hung daemon host ends a stream in about 30 s, within what servers allow (10 s). */
export const DEFAULT_KEEPALIVE_TIME_MS = 20_000;
export const DEFAULT_KEEPALIVE_TIMEOUT_MS = 10_000;

export interface GrpcConnectionOptions {
  readonly target: GrpcTarget;
  readonly organizationId: string;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
}

/** True for 127.0.0.0/8, ::1 and localhost: the only hosts plaintext gRPC may reach. */
function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** The host of "host:port" or "[v6]:port"; undefined when the address has no such form. */
function hostOf(address: string): string | undefined {
  const match = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(address);
  return match?.[1];
}

function pem(name: string, value: unknown): Buffer | null {
  if (value === undefined || value === null) return null;
  if (typeof value === "string" || value instanceof Uint8Array) return Buffer.from(value);
  throw new LeashError("invalid_argument", `createClient: grpc.tls.${name} must be PEM text or bytes`);
}

/** Checks the target and builds its credentials; a bad one is a one-line invalid_argument. */
export function grpcCredentials(target: GrpcTarget): ChannelCredentials {
  if (typeof target?.address !== "string" || hostOf(target.address) === undefined) {
    throw new LeashError(
      "invalid_argument",
      `createClient: grpc.address wants HOST:PORT (e.g. 127.0.0.1:50051), not ${JSON.stringify(target?.address)}`,
    );
  }
  if (target.tls === false) {
    const host = hostOf(target.address) as string;
    if (!isLoopback(host)) {
      throw new LeashError(
        "invalid_argument",
        `createClient: plaintext gRPC (tls: false) only to a loopback address, not ${host}`,
      );
    }
    return credentials.createInsecure();
  }
  const tls = target.tls ?? {};
  const cert = pem("cert", tls.cert);
  const key = pem("key", tls.key);
  if ((cert === null) !== (key === null))
    throw new LeashError("invalid_argument", "createClient: grpc.tls.cert and grpc.tls.key go together");
  return credentials.createSsl(pem("ca", tls.ca), key, cert);
}

/** The target's keepalive as grpc-js channel options; a bad value is a one-line invalid_argument. */
export function keepaliveOptions(target: GrpcTarget): ChannelOptions {
  const keepalive = target.keepalive;
  if (keepalive === false) return {};
  if (keepalive !== undefined && (typeof keepalive !== "object" || keepalive === null)) {
    throw new LeashError(
      "invalid_argument",
      "createClient: grpc.keepalive wants { timeMs?, timeoutMs? } or false",
    );
  }
  const ms = (name: "timeMs" | "timeoutMs", fallback: number): number => {
    const value = keepalive?.[name] ?? fallback;
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new LeashError(
        "invalid_argument",
        `createClient: grpc.keepalive.${name} must be a positive integer (ms), not ${JSON.stringify(value)}`,
      );
    }
    return value;
  };
  return {
    "grpc.keepalive_time_ms": ms("timeMs", DEFAULT_KEEPALIVE_TIME_MS),
    "grpc.keepalive_timeout_ms": ms("timeoutMs", DEFAULT_KEEPALIVE_TIMEOUT_MS),
    // Pings only while a call is open: an idle channel has nothing to lose, and servers that police
    // pings (C-core, Go) count pings on an idle connection against the client.
    "grpc.keepalive_permit_without_calls": 0,
  };
}

export class GrpcConnection implements Transport {
  readonly #options: GrpcConnectionOptions;
  readonly #client: GrpcClient;
  readonly #methods = shackleGrpcService();
  /** The keepalive ack timeout, when keepalive is on (it names the likely cause of a dropped connection). */
  readonly #keepaliveTimeoutMs: number | undefined;
  #closed = false;
  protocolVersion: string | undefined;

  constructor(options: GrpcConnectionOptions) {
    this.#options = options;
    const keepalive = keepaliveOptions(options.target);
    this.#keepaliveTimeoutMs = keepalive["grpc.keepalive_timeout_ms"] as number | undefined;
    const channelOptions: ChannelOptions = {
      "grpc.initial_reconnect_backoff_ms": Math.round(options.initialDelayMs),
      "grpc.max_reconnect_backoff_ms": Math.round(options.maxDelayMs),
      // §7.5's 1 MiB holds for answers too: a larger one is RESOURCE_EXHAUSTED, i.e. bad_response.
      "grpc.max_receive_message_length": MAX_FRAME_BYTES,
      // A daemon host that hangs without closing the connection is noticed (WaitHitl, TailEntries).
      ...keepalive,
      ...(options.target.serverName === undefined
        ? {}
        : {
            "grpc.ssl_target_name_override": options.target.serverName,
            "grpc.default_authority": options.target.serverName,
          }),
    };
    this.#client = new GrpcClient(options.target.address, grpcCredentials(options.target), channelOptions);
  }

  start(): void {
    this.#client.getChannel().getConnectivityState(true);
  }

  request(payload: Payload, timeoutMs: number): Promise<RequestOutcome> {
    return this.#call(payload, timeoutMs) as Promise<RequestOutcome>;
  }

  /** PostExec over gRPC is acknowledged: resolves once the daemon answered Empty (or refused). */
  settle(payload: Payload, timeoutMs: number): Promise<SettleOutcome> {
    return this.#call(payload, timeoutMs);
  }

  close(): void {
    this.#closed = true;
    this.#client.close();
  }

  #call(payload: Payload, timeoutMs: number): Promise<SettleOutcome> {
    if (this.#closed)
      return Promise.resolve({ ok: false, failure: "daemon_unavailable", message: "the client is closed" });
    const rpc = payload.case === undefined ? undefined : RPC_OF[payload.case];
    const method: GrpcMethodDefinition | undefined = rpc && this.#methods[rpc.method];
    if (rpc === undefined || method === undefined) {
      return Promise.resolve({
        ok: false,
        failure: "bad_response",
        message: `no ShackleDaemon RPC carries a ${payload.case}`,
      });
    }
    const metadata = new Metadata();
    // Read by the daemon only on insecure loopback (TLS modes take the organization from the certificate).
    metadata.set(GRPC_ORGANIZATION_METADATA, this.#options.organizationId);
    if (this.protocolVersion !== undefined)
      metadata.set(GRPC_PROTOCOL_VERSION_METADATA, this.protocolVersion);
    if (method.responseStream) return this.#stream(method, payload, metadata, timeoutMs);
    return new Promise((resolve) => {
      this.#client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        payload.value as Parameters<typeof method.requestSerialize>[0],
        metadata,
        { deadline: Date.now() + timeoutMs },
        (error: ServiceError | null, response) => {
          if (error) return resolve(this.#failed(error, timeoutMs));
          if (rpc.answer === null) return resolve({ ok: true, answer: null });
          resolve({ ok: true, answer: { case: rpc.answer, value: response } as Payload });
        },
      );
    });
  }

  /** WaitHitl: resolves with the stream's final update (decided or expired); the stream is then cancelled. */
  #stream(
    method: GrpcMethodDefinition,
    payload: Payload,
    metadata: Metadata,
    timeoutMs: number,
  ): Promise<RequestOutcome> {
    return new Promise((resolve) => {
      let settled = false;
      const done = (outcome: RequestOutcome) => {
        if (settled) return;
        settled = true;
        resolve(outcome);
        stream.cancel();
      };
      const stream = this.#client.makeServerStreamRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        payload.value as Parameters<typeof method.requestSerialize>[0],
        metadata,
        { deadline: Date.now() + timeoutMs },
      );
      stream.on("data", (update: { final?: boolean }) => {
        if (update.final === true)
          done({ ok: true, answer: { case: "hitlUpdate", value: update } as Payload });
      });
      stream.on("error", (error: ServiceError) => {
        if (!settled) done(this.#failed(error, timeoutMs));
      });
      stream.on("end", () =>
        done({
          ok: false,
          failure: "bad_response",
          message: "the WaitHitl stream ended without a final update",
        }),
      );
    });
  }

  /**
   * TailEntries: the daemon's events as they come, until the stream ends (or `signal` aborts: it is
   * cancelled and the iteration ends quietly). A failed stream throws LeashError (daemon_error with the
   * daemon's Appendix B refusal; daemon_unavailable, timeout or bad_response otherwise).
   */
  async *tailStream(request: TailRequest, signal?: AbortSignal): AsyncGenerator<TailEvent> {
    if (this.#closed) throw new LeashError("daemon_unavailable", "the client is closed");
    const method = this.#methods.TailEntries;
    if (method === undefined) throw new LeashError("bad_response", "no ShackleDaemon RPC TailEntries");
    if (signal?.aborted) return;
    const metadata = new Metadata();
    metadata.set(GRPC_ORGANIZATION_METADATA, this.#options.organizationId);
    if (this.protocolVersion !== undefined)
      metadata.set(GRPC_PROTOCOL_VERSION_METADATA, this.protocolVersion);
    // Without follow the stream ends by itself; a bound keeps a hung daemon from holding it forever.
    const boundMs = 60_000;
    const stream = this.#client.makeServerStreamRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      request as Parameters<typeof method.requestSerialize>[0],
      metadata,
      request.follow ? {} : { deadline: Date.now() + boundMs },
    );
    const onAbort = () => stream.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const event of stream) yield event as TailEvent;
    } catch (error) {
      if (signal?.aborted) return;
      const failed = this.#failed(error as ServiceError, boundMs);
      if (failed.ok && failed.answer.case === "error") {
        const e = failed.answer.value;
        throw new LeashError(
          "daemon_error",
          `the daemon refused: ${ErrorCode[e.code] ?? e.code} ${e.detail}: ${e.message}`,
        );
      }
      throw new LeashError(
        failed.ok ? "bad_response" : failed.failure,
        failed.ok ? "bad answer" : failed.message,
      );
    } finally {
      signal?.removeEventListener("abort", onAbort);
      stream.cancel();
    }
  }

  /** A non-OK status: the daemon's Appendix B refusal (an Error payload), or why there was no answer. */
  #failed(error: ServiceError, timeoutMs: number): RequestOutcome {
    const codeName = error.metadata?.get(GRPC_ERROR_CODE_METADATA)[0];
    if (codeName !== undefined) {
      const code = (ErrorCode as unknown as Record<string, number>)[String(codeName)];
      if (code === undefined || !Number.isInteger(code)) {
        return {
          ok: false,
          failure: "bad_response",
          message: `the daemon refused with an unknown error code ${JSON.stringify(String(codeName).slice(0, 64))}`,
        };
      }
      const detail = String(error.metadata.get(GRPC_ERROR_DETAIL_METADATA)[0] ?? "");
      return {
        ok: true,
        answer: { case: "error", value: create(ErrorSchema, { code, detail, message: error.details }) },
      };
    }
    switch (error.code) {
      case Status.DEADLINE_EXCEEDED:
        return { ok: false, failure: "timeout", message: `no answer within ${timeoutMs} ms` };
      case Status.UNAVAILABLE:
      case Status.CANCELLED:
        // grpc-js's words for a connection lost under an open call: a closed socket or unanswered pings.
        if (error.details === "Connection dropped" && this.#keepaliveTimeoutMs !== undefined) {
          return {
            ok: false,
            failure: "daemon_unavailable",
            message: `lost the daemon at ${this.#options.target.address}: the connection closed, or the daemon did not answer a keepalive ping within ${this.#keepaliveTimeoutMs} ms (hung?)`,
          };
        }
        return {
          ok: false,
          failure: "daemon_unavailable",
          message: `cannot reach the daemon at ${this.#options.target.address}: ${error.details}`,
        };
      default:
        // INTERNAL (an answer that does not parse), UNIMPLEMENTED (not a ShackleDaemon), anything else.
        return {
          ok: false,
          failure: "bad_response",
          message: `gRPC ${Status[error.code] ?? error.code}: ${error.details}`,
        };
    }
  }
}
