// The daemon's gRPC transport (`--grpc HOST:PORT`): the standard ShackleDaemon service on @grpc/grpc-js over
// the shared request handler. Bare messages, no Envelopes: the peer is authenticated by mTLS, not by HMAC.
import { EmptySchema } from "@bufbuild/protobuf/wkt";
import {
  ServerCredentials as Credentials,
  type handleServerStreamingCall,
  type handleUnaryCall,
  Metadata,
  Server,
  type ServerCredentials,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  status as Status,
  type sendUnaryData,
} from "@grpc/grpc-js";
import {
  ErrorCode,
  type Error as ErrorMessage,
  GRPC_ERROR_CODE_METADATA,
  GRPC_ERROR_DETAIL_METADATA,
  GRPC_ORGANIZATION_METADATA,
  GRPC_PROTOCOL_VERSION_METADATA,
  type HitlUpdate,
  MAX_FRAME_BYTES,
  type Payload,
  PROTOCOL_VERSION,
  ShackleDaemon,
  shackleGrpcService,
  type TailEvent,
} from "@leash/wire";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import type { RequestContext, RequestHandler } from "./handler.js";
import { parseHostPort } from "./http.js";
import type { DaemonMetrics } from "./metrics.js";
import { admitOrganizationRequest } from "./org-admission.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";

/** PEM material for TLS; clientCa makes it mTLS (client certificates required and verified). */
export interface GrpcTls {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly clientCa?: Buffer;
}

export interface GrpcOptions {
  /** "HOST:PORT"; port 0 picks a free one. */
  readonly listen: string;
  /** Plaintext gRPC: only on a loopback address. */
  readonly insecure?: boolean;
  readonly tls?: GrpcTls;
}

/**
 * Keepalive. The daemon pings each connection after a minute without traffic and drops it when the ack
 * takes over 20 s, so a vanished client frees its streams (a tail holds one of MAX_TAILS). Clients may
 * ping often: @leash/client pings every 20 s while a call is open. grpc-js (1.14) polices no client
 * pings; the last two options say what this server accepts, in the names C-core servers read.
 */
const SERVER_KEEPALIVE = {
  "grpc.keepalive_time_ms": 60_000,
  "grpc.keepalive_timeout_ms": 20_000,
  "grpc.keepalive_permit_without_calls": 1,
  "grpc.http2.min_ping_interval_without_data_ms": 5_000,
} as const;

export interface GrpcTransportOptions extends GrpcOptions {
  readonly handler: RequestHandler;
  readonly config: DaemonConfig;
  readonly logger: Logger;
  /** The daemon's per-organization quotas, shared with the socket: one organization has one quota. */
  readonly quotas: OrganizationQuotaBook;
  readonly metrics: DaemonMetrics;
}

export interface GrpcTransport {
  /** "host:port" as bound. */
  readonly address: string;
  close(): Promise<void>;
}

/** A gRPC set-up the daemon refuses to start with (a flag problem, not a runtime failure). */
export class GrpcConfigError extends Error {
  override readonly name = "GrpcConfigError";
}

/** The metadata a refusal carries: its Appendix B code name and detail. */
export const ERROR_CODE_METADATA = GRPC_ERROR_CODE_METADATA;
export const ERROR_DETAIL_METADATA = GRPC_ERROR_DETAIL_METADATA;
/** Insecure loopback mode only: which configured organization the caller acts for. */
export const ORGANIZATION_METADATA = GRPC_ORGANIZATION_METADATA;
/** The SP/1.0 version the client speaks (default 1.0.0); a Register negotiates from it. */
export const PROTOCOL_VERSION_METADATA = GRPC_PROTOCOL_VERSION_METADATA;
/** On a refusal that says when to retry (the Error's `retry_after_ms`): those milliseconds, in decimal. */
export const RETRY_AFTER_MS_METADATA = "leash-retry-after-ms";
/** A URI SAN of this form names the organization; without one, the subject CN does. */
const ORG_URI_PREFIX = "leash:org:";

/** Appendix B → gRPC status. */
const STATUS_OF: Record<number, Status> = {
  [ErrorCode.AUTHENTICATION_FAILED]: Status.UNAUTHENTICATED,
  [ErrorCode.PROTOCOL_VERSION_MISMATCH]: Status.FAILED_PRECONDITION,
  [ErrorCode.MESSAGE_TOO_LARGE]: Status.RESOURCE_EXHAUSTED,
  [ErrorCode.INVALID_MESSAGE]: Status.INVALID_ARGUMENT,
  [ErrorCode.SESSION_NOT_FOUND]: Status.NOT_FOUND,
  [ErrorCode.RATE_LIMITED]: Status.RESOURCE_EXHAUSTED,
  [ErrorCode.DAEMON_UNAVAILABLE]: Status.UNAVAILABLE,
  [ErrorCode.ORGANIZATION_QUOTA_EXCEEDED]: Status.RESOURCE_EXHAUSTED,
  [ErrorCode.PARENT_GUARD_DENIED]: Status.PERMISSION_DENIED,
};

/** True for 127.0.0.0/8, ::1 and localhost: the only addresses plaintext gRPC may listen on. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Checks the flags' combination before anything listens; a bad one is a GrpcConfigError. */
export function checkGrpcOptions(options: GrpcOptions): { host: string; port: number } {
  let parsed: { host: string; port: number };
  try {
    parsed = parseHostPort(options.listen);
  } catch {
    throw new GrpcConfigError(
      `--grpc wants HOST:PORT (e.g. 127.0.0.1:50051), not ${JSON.stringify(options.listen)}`,
    );
  }
  if (options.insecure && options.tls !== undefined)
    throw new GrpcConfigError("--grpc-insecure and --tls-cert exclude each other");
  if (options.insecure && !isLoopback(parsed.host))
    throw new GrpcConfigError(`--grpc-insecure is only allowed on a loopback address, not ${parsed.host}`);
  if (!options.insecure && options.tls === undefined)
    throw new GrpcConfigError(
      `--grpc ${options.listen} needs TLS (--tls-cert F --tls-key F [--tls-client-ca F]), or --grpc-insecure on a loopback address`,
    );
  return parsed;
}

/** The service definition from the generated descriptor (`@leash/wire`'s, which clients use too). */
export function shackleServiceDefinition(): ServiceDefinition {
  return shackleGrpcService() as ServiceDefinition;
}

const PAYLOAD_CASE: Record<string, Payload["case"]> = {
  Register: "register",
  PreExec: "preExec",
  PostExec: "postExec",
  Heartbeat: "heartbeat",
  GetSessionState: "getSessionState",
};

type Call = ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>;

class Unauthenticated extends Error {}

function firstMetadata(metadata: Metadata, key: string): string | undefined {
  const value = metadata.get(key)[0];
  return value === undefined ? undefined : String(value);
}

/** The organization a certificate names: a `leash:org:<id>` URI SAN, else the subject CN. */
export function organizationOfCertificate(cert: {
  subject?: { CN?: string | string[] };
  subjectaltname?: string;
}): string | undefined {
  for (const part of (cert.subjectaltname ?? "").split(",")) {
    const entry = part.trim();
    if (entry.startsWith(`URI:${ORG_URI_PREFIX}`)) return entry.slice(`URI:${ORG_URI_PREFIX}`.length);
  }
  const cn = cert.subject?.CN;
  return Array.isArray(cn) ? cn[0] : cn;
}

export async function listenGrpc(options: GrpcTransportOptions): Promise<GrpcTransport> {
  const { host, port } = checkGrpcOptions(options);
  const { handler, config, logger, quotas, metrics } = options;
  const mutualTls = options.tls?.clientCa !== undefined;
  const onlyOrganization = config.organizations.size === 1 ? [...config.organizations.keys()][0] : undefined;

  /** Who the caller is: mTLS → its certificate; otherwise the only organization, or (insecure) the metadata. */
  function organizationOf(call: Call): string {
    let org: string | undefined;
    if (mutualTls) {
      const cert = call.getAuthContext().sslPeerCertificate;
      org = cert === undefined ? undefined : organizationOfCertificate(cert);
      if (org === undefined) throw new Unauthenticated("the client certificate names no organization");
    } else {
      const named = options.insecure ? firstMetadata(call.metadata, ORGANIZATION_METADATA) : undefined;
      org = named ?? onlyOrganization;
      if (org === undefined)
        throw new Unauthenticated(
          `several organizations are configured: send the ${ORGANIZATION_METADATA} metadata`,
        );
    }
    if (!config.organizations.has(org))
      throw new Unauthenticated(`unknown organization ${JSON.stringify(org.slice(0, 100))}`);
    return org;
  }

  const implementation: Record<
    string,
    handleUnaryCall<unknown, unknown> | handleServerStreamingCall<unknown, unknown>
  > = {};
  const refusalStatus = (error: ErrorMessage) => {
    const metadata = new Metadata();
    metadata.set(ERROR_CODE_METADATA, ErrorCode[error.code] ?? String(error.code));
    metadata.set(ERROR_DETAIL_METADATA, error.detail);
    if (error.retryAfterMs > 0n) metadata.set(RETRY_AFTER_MS_METADATA, String(error.retryAfterMs));
    return {
      code: STATUS_OF[error.code] ?? Status.UNKNOWN,
      details: error.message === "" ? error.detail : error.message,
      metadata,
    };
  };
  const refuse = (callback: sendUnaryData<unknown>, error: ErrorMessage) => callback(refusalStatus(error));
  /**
   * A server-streaming RPC: authenticate, run `stream` until it answers (null: done, else a refusal),
   * and stop it when the caller cancels or goes away.
   */
  const serveStream = (
    rpc: string,
    stream: (
      call: ServerWritableStream<unknown, unknown>,
      context: RequestContext,
      gone: AbortSignal,
    ) => Promise<ErrorMessage | null>,
  ) =>
    ((call: ServerWritableStream<unknown, unknown>) => {
      let organizationId: string;
      try {
        organizationId = organizationOf(call);
      } catch (error) {
        if (!(error instanceof Unauthenticated)) throw error;
        const metadata = new Metadata();
        metadata.set(ERROR_CODE_METADATA, "AUTHENTICATION_FAILED");
        metadata.set(ERROR_DETAIL_METADATA, "unknown_organization");
        call.emit("error", { code: Status.UNAUTHENTICATED, details: error.message, metadata });
        return;
      }
      // A stream is a long poll: it takes from the organization's rate, not an in-flight slot.
      const admitted = admitOrganizationRequest(quotas, metrics, organizationId, true);
      if (!admitted.ok) {
        call.emit("error", refusalStatus(admitted.refusal));
        return;
      }
      // A cancelled stream stops the work (a wait would otherwise last until the answer or the expiry).
      const gone = new AbortController();
      call.on("cancelled", () => gone.abort());
      call.on("close", () => gone.abort());
      const protocolVersion = firstMetadata(call.metadata, PROTOCOL_VERSION_METADATA) ?? PROTOCOL_VERSION;
      stream(call, { auth: { organizationId, keyId: "" }, protocolVersion, signal: gone.signal }, gone.signal)
        .then((error) => {
          if (call.cancelled) return;
          if (error === null) call.end();
          else call.emit("error", refusalStatus(error));
        })
        .catch((error: unknown) => {
          logger.warn({ err: error, rpc }, "gRPC request failed inside the daemon");
          call.emit("error", { code: Status.UNAVAILABLE, details: "internal" });
        });
    }) as handleServerStreamingCall<unknown, unknown>;
  // WaitHitl: a paused agent's stream of its request's outcome (the socket's wait_hitl long poll).
  implementation.WaitHitl = serveStream("WaitHitl", (call, context) =>
    handler.streamHitl(
      call.request as Parameters<RequestHandler["streamHitl"]>[0],
      context,
      (update: HitlUpdate) => {
        if (!call.cancelled) call.write(update);
      },
    ),
  );
  // TailEntries: the caller organization's chain entries, then (follow) each new one, until it cancels.
  implementation.TailEntries = serveStream("TailEntries", (call, context, gone) =>
    handler.streamTail(
      call.request as Parameters<RequestHandler["streamTail"]>[0],
      context,
      async (event: TailEvent) => {
        if (call.cancelled || call.write(event)) return;
        // A slow reader: wait until grpc-js has sent what is buffered (or the call is gone).
        await new Promise<void>((resolve) => {
          const done = () => {
            call.off("drain", done);
            gone.removeEventListener("abort", done);
            resolve();
          };
          call.on("drain", done);
          gone.addEventListener("abort", done, { once: true });
        });
      },
    ),
  );
  for (const method of ShackleDaemon.methods) {
    if (method.methodKind !== "unary") continue;
    const payloadCase = PAYLOAD_CASE[method.name];
    implementation[method.name] = ((
      call: ServerUnaryCall<unknown, unknown>,
      callback: sendUnaryData<unknown>,
    ) => {
      let organizationId: string;
      try {
        organizationId = organizationOf(call);
      } catch (error) {
        if (!(error instanceof Unauthenticated)) throw error;
        const metadata = new Metadata();
        metadata.set(ERROR_CODE_METADATA, "AUTHENTICATION_FAILED");
        metadata.set(ERROR_DETAIL_METADATA, "unknown_organization");
        callback({ code: Status.UNAUTHENTICATED, details: error.message, metadata });
        return;
      }
      // Only an authenticated caller takes from its organization's quotas (the socket's counters too).
      const admitted = admitOrganizationRequest(quotas, metrics, organizationId, false);
      if (!admitted.ok) return refuse(callback, admitted.refusal);
      const payload = { case: payloadCase, value: call.request } as Payload;
      const protocolVersion = firstMetadata(call.metadata, PROTOCOL_VERSION_METADATA) ?? PROTOCOL_VERSION;
      handler
        .handle(payload, { auth: { organizationId, keyId: "" }, protocolVersion })
        .then((answer) => {
          // PostExec answers Empty on gRPC, acknowledged or not (the call itself is the acknowledgement).
          if (answer === null || answer.case === "postExecAck")
            return callback(null, { $typeName: EmptySchema.typeName });
          if (answer.case === "error") return refuse(callback, answer.value);
          callback(null, answer.value);
        })
        .catch((error: unknown) => {
          // The handler never throws; this is a bug, answered as the daemon failing inside.
          logger.warn({ err: error, rpc: method.name }, "gRPC request failed inside the daemon");
          callback({ code: Status.UNAVAILABLE, details: "internal" });
        })
        .finally(admitted.release);
    }) as handleUnaryCall<unknown, unknown>;
  }

  const server = new Server({
    // §7.5's 1 MiB frame limit holds on gRPC too (grpc-js answers RESOURCE_EXHAUSTED past it).
    "grpc.max_receive_message_length": MAX_FRAME_BYTES,
    ...SERVER_KEEPALIVE,
  });
  server.addService(shackleServiceDefinition(), implementation);
  const credentials: ServerCredentials =
    options.tls === undefined
      ? Credentials.createInsecure()
      : Credentials.createSsl(
          options.tls.clientCa ?? null,
          [{ cert_chain: options.tls.cert, private_key: options.tls.key }],
          mutualTls,
        );
  const target = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
  const bound = await new Promise<number>((resolve, reject) => {
    server.bindAsync(target, credentials, (error, actual) => (error ? reject(error) : resolve(actual)));
  });
  const address = host.includes(":") ? `[${host}]:${bound}` : `${host}:${bound}`;
  return {
    address,
    close() {
      // Finish the calls in flight, then force whatever is left after 5 s.
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 5_000);
        timer.unref();
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}
