// The daemon's gRPC transport (`--grpc HOST:PORT`): the standard ShackleDaemon service on @grpc/grpc-js over
// the shared request handler. Bare messages, no Envelopes: the peer is authenticated by mTLS, not by HMAC.
import {
  ServerCredentials as Credentials,
  Server,
  type ServerCredentials,
  type ServiceDefinition,
} from "@grpc/grpc-js";
import {
  GRPC_ERROR_CODE_METADATA,
  GRPC_ERROR_DETAIL_METADATA,
  GRPC_ORGANIZATION_METADATA,
  GRPC_PROTOCOL_VERSION_METADATA,
  MAX_FRAME_BYTES,
  shackleGrpcService,
} from "@leash/wire";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import { serviceImplementation } from "./grpc-calls.js";
import type { RequestHandler } from "./handler.js";
import { parseHostPort } from "./http.js";
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";

export { organizationOfCertificate, RETRY_AFTER_MS_METADATA } from "./grpc-calls.js";

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

export async function listenGrpc(options: GrpcTransportOptions): Promise<GrpcTransport> {
  const { host, port } = checkGrpcOptions(options);
  const { handler, config, logger, quotas, metrics } = options;
  const mutualTls = options.tls?.clientCa !== undefined;
  const implementation = serviceImplementation({
    handler,
    config,
    logger,
    quotas,
    metrics,
    mutualTls,
    insecure: options.insecure === true,
    onlyOrganization: config.organizations.size === 1 ? [...config.organizations.keys()][0] : undefined,
  });
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
