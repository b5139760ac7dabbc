// The gRPC service's call handlers: each unary RPC and server stream authenticated to an organization,
// admitted within its quotas and handed to the shared request handler. Not the server, nor TLS set-up.
import { EmptySchema } from "@bufbuild/protobuf/wkt";
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  Metadata,
  type ServerUnaryCall,
  type ServerWritableStream,
  status as Status,
  type sendUnaryData,
} from "@grpc/grpc-js";
import {
  GRPC_ERROR_CODE_METADATA as ERROR_CODE_METADATA,
  GRPC_ERROR_DETAIL_METADATA as ERROR_DETAIL_METADATA,
  ErrorCode,
  type Error as ErrorMessage,
  type HitlUpdate,
  GRPC_ORGANIZATION_METADATA as ORGANIZATION_METADATA,
  type Payload,
  PROTOCOL_VERSION,
  GRPC_PROTOCOL_VERSION_METADATA as PROTOCOL_VERSION_METADATA,
  ShackleDaemon,
  type TailEvent,
} from "@leash/wire";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import type { RequestContext, RequestHandler } from "./handler.js";
import type { DaemonMetrics } from "./metrics.js";
import { admitOrganizationRequest } from "./org-admission.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";

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

const PAYLOAD_CASE: Record<string, Payload["case"]> = {
  Register: "register",
  PreExec: "preExec",
  PostExec: "postExec",
  Heartbeat: "heartbeat",
  GetSessionState: "getSessionState",
};

type Call = ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>;
type Implementation = Record<
  string,
  handleUnaryCall<unknown, unknown> | handleServerStreamingCall<unknown, unknown>
>;

/** What every call handler of one server needs. */
export interface GrpcScope {
  readonly handler: RequestHandler;
  readonly config: DaemonConfig;
  readonly logger: Logger;
  readonly quotas: OrganizationQuotaBook;
  readonly metrics: DaemonMetrics;
  /** Client certificates are required: they name the caller's organization. */
  readonly mutualTls: boolean;
  /** Plaintext on loopback: the caller may name its organization in metadata. */
  readonly insecure: boolean;
  /** The organization a caller without a certificate or metadata acts for: the only one configured. */
  readonly onlyOrganization: string | undefined;
}

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

/** Who the caller is: mTLS → its certificate; otherwise the only organization, or (insecure) the metadata. */
function organizationOf(scope: GrpcScope, call: Call): string {
  const { config } = scope;
  let org: string | undefined;
  if (scope.mutualTls) {
    const cert = call.getAuthContext().sslPeerCertificate;
    org = cert === undefined ? undefined : organizationOfCertificate(cert);
    if (org === undefined) throw new Unauthenticated("the client certificate names no organization");
  } else {
    const named = scope.insecure ? firstMetadata(call.metadata, ORGANIZATION_METADATA) : undefined;
    org = named ?? scope.onlyOrganization;
    if (org === undefined)
      throw new Unauthenticated(
        `several organizations are configured: send the ${ORGANIZATION_METADATA} metadata`,
      );
  }
  if (!config.organizations.has(org))
    throw new Unauthenticated(`unknown organization ${JSON.stringify(org.slice(0, 100))}`);
  return org;
}

/** The caller's organization, or undefined once `refuse` was given the UNAUTHENTICATED status. */
function authenticate(
  scope: GrpcScope,
  call: Call,
  refuse: (status: { code: Status; details: string; metadata: Metadata }) => void,
): string | undefined {
  try {
    return organizationOf(scope, call);
  } catch (error) {
    if (!(error instanceof Unauthenticated)) throw error;
    const metadata = new Metadata();
    metadata.set(ERROR_CODE_METADATA, "AUTHENTICATION_FAILED");
    metadata.set(ERROR_DETAIL_METADATA, "unknown_organization");
    refuse({ code: Status.UNAUTHENTICATED, details: error.message, metadata });
    return undefined;
  }
}

function refusalStatus(error: ErrorMessage) {
  const metadata = new Metadata();
  metadata.set(ERROR_CODE_METADATA, ErrorCode[error.code] ?? String(error.code));
  metadata.set(ERROR_DETAIL_METADATA, error.detail);
  if (error.retryAfterMs > 0n) metadata.set(RETRY_AFTER_MS_METADATA, String(error.retryAfterMs));
  return {
    code: STATUS_OF[error.code] ?? Status.UNKNOWN,
    details: error.message === "" ? error.detail : error.message,
    metadata,
  };
}

type StreamBody = (
  call: ServerWritableStream<unknown, unknown>,
  context: RequestContext,
  gone: AbortSignal,
) => Promise<ErrorMessage | null>;

/**
 * A server-streaming RPC: authenticate, run `stream` until it answers (null: done, else a refusal),
 * and stop it when the caller cancels or goes away.
 */
function serveStream(
  scope: GrpcScope,
  rpc: string,
  stream: StreamBody,
): handleServerStreamingCall<unknown, unknown> {
  return (call: ServerWritableStream<unknown, unknown>) => {
    const organizationId = authenticate(scope, call, (status) => call.emit("error", status));
    if (organizationId === undefined) return;
    // A stream is a long poll: it takes from the organization's rate, not an in-flight slot.
    const admitted = admitOrganizationRequest(scope.quotas, scope.metrics, organizationId, true);
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
        scope.logger.warn({ err: error, rpc }, "gRPC request failed inside the daemon");
        call.emit("error", { code: Status.UNAVAILABLE, details: "internal" });
      });
  };
}

/** A unary RPC: authenticate, admit within the organization's quotas, answer the handler's payload. */
function serveUnary(
  scope: GrpcScope,
  rpc: string,
  payloadCase: Payload["case"],
): handleUnaryCall<unknown, unknown> {
  const refuse = (callback: sendUnaryData<unknown>, error: ErrorMessage) => callback(refusalStatus(error));
  return (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
    const organizationId = authenticate(scope, call, (status) => callback(status));
    if (organizationId === undefined) return;
    // Only an authenticated caller takes from its organization's quotas (the socket's counters too).
    const admitted = admitOrganizationRequest(scope.quotas, scope.metrics, organizationId, false);
    if (!admitted.ok) return refuse(callback, admitted.refusal);
    const payload = { case: payloadCase, value: call.request } as Payload;
    const protocolVersion = firstMetadata(call.metadata, PROTOCOL_VERSION_METADATA) ?? PROTOCOL_VERSION;
    scope.handler
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
        scope.logger.warn({ err: error, rpc }, "gRPC request failed inside the daemon");
        callback({ code: Status.UNAVAILABLE, details: "internal" });
      })
      .finally(admitted.release);
  };
}

/** The ShackleDaemon service's implementation: every unary RPC, WaitHitl and TailEntries. */
export function serviceImplementation(scope: GrpcScope): Implementation {
  const { handler } = scope;
  const implementation: Implementation = {};
  // WaitHitl: a paused agent's stream of its request's outcome (the socket's wait_hitl long poll).
  implementation.WaitHitl = serveStream(scope, "WaitHitl", (call, context) =>
    handler.streamHitl(
      call.request as Parameters<RequestHandler["streamHitl"]>[0],
      context,
      (update: HitlUpdate) => {
        if (!call.cancelled) call.write(update);
      },
    ),
  );
  // TailEntries: the caller organization's chain entries, then (follow) each new one, until it cancels.
  implementation.TailEntries = serveStream(scope, "TailEntries", (call, context, gone) =>
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
    implementation[method.name] = serveUnary(scope, method.name, PAYLOAD_CASE[method.name]);
  }
  return implementation;
}
