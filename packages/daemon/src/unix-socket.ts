// The Unix-socket transport (spec §6.1): frames in, envelopes opened and answered, several requests in flight.
// It authenticates and frames; what a request means is the RequestHandler's, so gRPC can sit beside it.
import { chmodSync, lstatSync, unlinkSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import type { Clock } from "@leash/core";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import type { RequestHandler } from "./handler.js";
import { DEFAULT_SOCKET_LIMITS, type SocketLimits } from "./limits.js";
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";
import { ConnectionGuard } from "./socket-guard.js";
import { type SocketServerState, serve } from "./unix-connection.js";

/** Requests one connection may have in flight; beyond it each is answered RATE_LIMITED. */
export const DEFAULT_MAX_IN_FLIGHT = DEFAULT_SOCKET_LIMITS.maxInFlight;
/**
 * Long polls (wait_hitl, tail_entries) one connection may hold open, apart from the in-flight limit: a
 * poll its client gave up on (the wire has no cancel) waits on until its answer, so a newer poll past
 * this many supersedes the connection's oldest, which is answered RATE_LIMITED "long_poll_superseded".
 */
export const DEFAULT_MAX_LONG_POLLS = DEFAULT_SOCKET_LIMITS.maxLongPolls;

/** How long a closing daemon waits, quiet, for frames still on their way before it closes connections. */
const DRAIN_GRACE_MS = 25;

export interface UnixTransportOptions {
  readonly path: string;
  readonly handler: RequestHandler;
  readonly config: DaemonConfig;
  /** Per-organization quotas; each organization's replay window is in it. */
  readonly quotas: OrganizationQuotaBook;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: DaemonMetrics;
  /** Default DEFAULT_SOCKET_LIMITS; maxInFlight and maxLongPolls below override theirs. */
  readonly limits?: SocketLimits;
  readonly maxInFlight?: number;
  readonly maxLongPolls?: number;
}

export interface UnixTransport {
  readonly path: string;
  /** Stops accepting, lets every request in flight finish and be answered, closes, removes the socket file. */
  close(): Promise<void>;
}

/** A refusal of the start itself (another daemon on the socket, a path that is not a socket). */
export class SocketInUseError extends Error {
  override name = "SocketInUseError";
}

/** Whether something accepts connections on `path` (a daemon already serving it). */
function listening(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connect(path);
    probe.once("connect", () => {
      probe.destroy();
      resolve(true);
    });
    probe.once("error", () => resolve(false));
  });
}

/**
 * Makes `path` free to bind: a socket file nobody listens on (a daemon that was killed left it) is
 * removed; a live socket or any other kind of file is refused, never deleted.
 */
async function claimPath(path: string): Promise<void> {
  let info: ReturnType<typeof lstatSync> | undefined;
  try {
    info = lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  if (!info.isSocket()) throw new SocketInUseError(`${path} exists and is not a socket; not removing it`);
  if (await listening(path)) throw new SocketInUseError(`another daemon is listening on ${path}`);
  unlinkSync(path);
}

export async function listenUnix(options: UnixTransportOptions): Promise<UnixTransport> {
  const { path, logger, metrics } = options;
  const limits = options.limits ?? DEFAULT_SOCKET_LIMITS;
  const maxInFlight = options.maxInFlight ?? limits.maxInFlight;
  const maxLongPolls = options.maxLongPolls ?? limits.maxLongPolls;
  if (!Number.isSafeInteger(maxLongPolls) || maxLongPolls < 1)
    throw new RangeError(`maxLongPolls must be a positive integer, not ${String(maxLongPolls)}`);
  await claimPath(path);
  const guard = new ConnectionGuard(limits, metrics);
  const sockets = new Set<Socket>();
  const inFlight = new Set<Promise<void>>();
  let closing = false;
  const state: SocketServerState = {
    handler: options.handler,
    config: options.config,
    quotas: options.quotas,
    clock: options.clock,
    logger,
    metrics,
    maxInFlight,
    maxLongPolls,
    guard,
    sockets,
    inFlight,
    closing: () => closing,
  };

  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    if (closing) {
      socket.destroy();
      return;
    }
    serve(state, socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    // Group-writable only: the agents' group may connect, nobody else (chmod below closes the race).
    const mask = process.umask(0o117);
    try {
      server.listen(path, () => {
        server.off("error", reject);
        resolve();
      });
    } finally {
      process.umask(mask);
    }
  });
  chmodSync(path, 0o660);
  guard.start();
  server.on("error", (error) => logger.error({ err: error }, "socket server error"));

  return {
    path,
    async close() {
      if (closing) return;
      closing = true;
      guard.stop();
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      await drain(inFlight);
      for (const socket of sockets) socket.end();
      await new Promise((resolve) => setTimeout(resolve, DRAIN_GRACE_MS));
      for (const socket of sockets) socket.destroy();
      await stopped;
      try {
        unlinkSync(path);
      } catch {
        // already gone (server.close removes it on some platforms)
      }
    },
  };
}

/**
 * Drain: what is in flight is answered; frames that arrive meanwhile are told "shutting_down".
 * Twice quiet in a row, a short grace apart, before the connections are closed.
 */
async function drain(inFlight: Set<Promise<void>>): Promise<void> {
  for (let quiet = 0; quiet < 2; ) {
    if (inFlight.size > 0) {
      quiet = 0;
      await Promise.allSettled([...inFlight]);
    } else {
      quiet++;
    }
    await new Promise((resolve) => setTimeout(resolve, DRAIN_GRACE_MS));
  }
}
