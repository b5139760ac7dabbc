// The Unix-socket transport (spec §6.1): frames in, envelopes opened and answered, several requests in flight.
// It authenticates and frames; what a request means is the RequestHandler's, so gRPC can sit beside it.
import { chmodSync, lstatSync, unlinkSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { create } from "@bufbuild/protobuf";
import type { Clock } from "@leash/core";
import {
  admitEnvelope,
  type Envelope,
  EnvelopeSchema,
  ErrorCode,
  ErrorSchema,
  encodeEnvelope,
  encodeFrame,
  errorPayload,
  FrameDecoder,
  openEnvelope,
  type Payload,
  PROTOCOL_VERSION,
  sealEnvelope,
  sealFrame,
  WireError,
} from "@leash/wire";
import type { Logger } from "pino";
import type { DaemonConfig } from "./config.js";
import type { AuthContext, RequestHandler } from "./handler.js";
import { DEFAULT_SOCKET_LIMITS, type SocketLimits } from "./limits.js";
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";
import { ConnectionGuard } from "./socket-guard.js";

/** Requests one connection may have in flight; beyond it each is answered RATE_LIMITED. */
export const DEFAULT_MAX_IN_FLIGHT = DEFAULT_SOCKET_LIMITS.maxInFlight;
/**
 * Long polls (wait_hitl, tail_entries) one connection may hold open, apart from the in-flight limit: a
 * poll its client gave up on (the wire has no cancel) waits on until its answer, so a newer poll past
 * this many supersedes the connection's oldest, which is answered RATE_LIMITED "long_poll_superseded".
 */
export const DEFAULT_MAX_LONG_POLLS = DEFAULT_SOCKET_LIMITS.maxLongPolls;

/** Payloads the daemon answers as requests: only these take a replay slot (anything else is refused). */
const REQUESTS = new Set<Payload["case"]>([
  "register",
  "preExec",
  "postExec",
  "heartbeat",
  "getSessionState",
  "waitHitl",
  "tailEntries",
]);

/** Requests that may wait for minutes: they never take an in-flight slot, ordinary calls stay answerable. */
const LONG_POLLS = new Set<Payload["case"]>(["waitHitl", "tailEntries"]);

/** One open long poll of a connection. */
interface LongPoll {
  readonly correlationId: string;
  readonly key: Uint8Array;
  readonly keyId: string;
  readonly abort: AbortController;
  /** Answered by the transport (superseded): the handler's answer, when it comes, is dropped. */
  superseded: boolean;
}

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

/** The key that checks an envelope and who it speaks for: its key_id, else its organization's current key. */
function keyOf(config: DaemonConfig, envelope: Envelope): { key: Uint8Array; auth: AuthContext } | undefined {
  let keyId = envelope.keyId;
  let orgId: string | undefined;
  if (keyId !== "") {
    orgId = config.keyOwners.get(keyId);
  } else {
    // An empty key_id names the organization's current key; the organization is the register's, or
    // the only one configured (a session-bound message does not name its organization).
    orgId =
      envelope.payload.case === "register"
        ? envelope.payload.value.organizationId
        : config.organizations.size === 1
          ? [...config.organizations.keys()][0]
          : undefined;
    keyId = (orgId === undefined ? undefined : config.organizations.get(orgId)?.currentKeyId) ?? "";
  }
  const key = orgId === undefined ? undefined : config.organizations.get(orgId)?.hmacKeys.get(keyId);
  return key === undefined || orgId === undefined
    ? undefined
    : { key, auth: { organizationId: orgId, keyId } };
}

const AUTH_FAILURES = new Set(["bad_hmac", "unknown_key", "replayed_message", "timestamp_out_of_window"]);

export async function listenUnix(options: UnixTransportOptions): Promise<UnixTransport> {
  const { path, handler, config, quotas, clock, logger, metrics } = options;
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

  const countError = (payload: Payload) => {
    if (payload.case === "error") {
      metrics.errors.inc({
        code: ErrorCode[payload.value.code] ?? String(payload.value.code),
        detail: payload.value.detail,
      });
    }
  };

  /** An Error answer the transport makes itself (a limit or quota), counted by the limit that made it. */
  const limitRefusal = (limit: string, code: ErrorCode, message: string, retryAfterMs?: number): Payload => {
    metrics.limitRefusals.inc({ limit });
    if (code === ErrorCode.RATE_LIMITED) metrics.rateLimited.inc();
    return {
      case: "error",
      value: create(ErrorSchema, {
        code,
        detail: limit,
        message,
        ...(retryAfterMs === undefined ? {} : { retryAfterMs: BigInt(retryAfterMs) }),
      }),
    };
  };

  function serve(socket: Socket): void {
    /** This connection's open long polls, oldest first. */
    const polls = new Set<LongPoll>();
    /** Requests of this connection still being answered. */
    const mine = new Set<Promise<void>>();
    const guarded = guard.admit(socket, () => mine.size > 0);
    if (guarded === null) return;
    const conn = guarded;
    sockets.add(socket);
    metrics.connections.inc();
    const decoder = new FrameDecoder();
    let pending = 0;
    /** No further frame is read: the connection failed or closed. */
    let dead = false;
    /** Aborted when the connection closes: a long poll stops waiting for nobody. */
    const gone = new AbortController();

    const send = (payload: Payload, key: Uint8Array, keyId: string, correlationId: string) => {
      if (socket.destroyed || !socket.writable) return;
      countError(payload);
      socket.write(sealFrame(payload, { key, keyId, sender: "daemon", clock, correlationId }));
      guard.wrote(conn);
    };

    /**
     * The stream cannot be trusted past this point: read nothing more, let the requests already
     * accepted be answered, answer the failure once (signed when the envelope named a key this daemon
     * has, so the agent can check it), then close the connection.
     */
    const fail = (error: unknown, key?: { key: Uint8Array; keyId: string }) => {
      if (dead) return;
      dead = true;
      const payload = errorPayload(error);
      countError(payload);
      let body: Uint8Array;
      if (key !== undefined) {
        body = sealEnvelope(payload, {
          key: key.key,
          keyId: key.keyId,
          sender: "daemon",
          clock,
          correlationId: "",
        });
      } else {
        // No key to sign with: an unsigned Error the agent cannot authenticate, then the close it can.
        body = encodeEnvelope(
          create(EnvelopeSchema, {
            protocolVersion: PROTOCOL_VERSION,
            serverTimestampNs: BigInt(Math.trunc(clock.nowNs())),
            payload,
          }),
        );
      }
      guard.pause(conn, "dead");
      const frameOut = encodeFrame(body);
      void Promise.allSettled([...mine]).then(() => {
        if (!socket.destroyed) socket.end(frameOut);
        setTimeout(() => socket.destroy(), 1000).unref();
      });
    };

    /** Ends the long poll now: its answer says why (its client most likely gave up on it long ago). */
    const supersede = (poll: LongPoll) => {
      polls.delete(poll);
      poll.superseded = true;
      metrics.rateLimited.inc();
      metrics.limitRefusals.inc({ limit: "long_poll_superseded" });
      const refusal: Payload = {
        case: "error",
        value: create(ErrorSchema, {
          code: ErrorCode.RATE_LIMITED,
          detail: "long_poll_superseded",
          message: `more than ${maxLongPolls} long polls on this connection: a newer one replaced this one`,
        }),
      };
      send(refusal, poll.key, poll.keyId, poll.correlationId);
      poll.abort.abort();
    };

    const frame = (body: Uint8Array) => {
      const found: { resolved?: ReturnType<typeof keyOf> } = {};
      let envelope: Envelope;
      try {
        envelope = openEnvelope(body, {
          keyFor: (e) => {
            found.resolved = keyOf(config, e);
            return found.resolved?.key;
          },
          sender: "agent",
          // Admitted below, once the envelope is a request within its organization's quotas.
          replay: null,
        });
      } catch (error) {
        const code = WireError.isInstance(error) ? error.code : "internal";
        if (AUTH_FAILURES.has(code)) metrics.authFailures.inc({ detail: code });
        logger.warn(
          { detail: code, err: WireError.isInstance(error) ? error.message : String(error) },
          "envelope refused",
        );
        // A key that failed its own HMAC check must not sign the answer: the sender may not hold it.
        const resolved = found.resolved;
        const signWith =
          resolved !== undefined && code !== "bad_hmac"
            ? { key: resolved.key, keyId: resolved.auth.keyId }
            : undefined;
        fail(error, signWith);
        return;
      }
      const { key, auth } = found.resolved!;
      conn.authenticated = true;
      const org = auth.organizationId;
      const correlationId = envelope.correlationId === "" ? envelope.messageId : envelope.correlationId;
      if (closing) {
        // Shutting down: requests already in flight finish; a new one is told to come back.
        const refusal: Payload = {
          case: "error",
          value: create(ErrorSchema, {
            code: ErrorCode.DAEMON_UNAVAILABLE,
            detail: "shutting_down",
            message: "the daemon is shutting down",
          }),
        };
        send(refusal, key, auth.keyId, correlationId);
        return;
      }
      const refuse = (refusal: Payload) => send(refusal, key, auth.keyId, correlationId);
      const rate = quotas.takeRate(org);
      if (!rate.ok) {
        const why = `organization ${org} is over its ${quotas.quotas.ratePerS} requests per second`;
        refuse(limitRefusal("org_rate_limited", ErrorCode.RATE_LIMITED, why, rate.retryAfterMs));
        return;
      }
      const longPoll = LONG_POLLS.has(envelope.payload.case);
      if (!longPoll && pending >= maxInFlight) {
        const why = `more than ${maxInFlight} requests in flight on this connection`;
        refuse(limitRefusal("too_many_in_flight", ErrorCode.RATE_LIMITED, why, 10));
        return;
      }
      if (!longPoll && !quotas.takeInFlight(org)) {
        const why = `organization ${org} has ${quotas.quotas.inFlight} requests in flight`;
        refuse(limitRefusal("org_in_flight_limit", ErrorCode.RATE_LIMITED, why, 10));
        return;
      }
      if (REQUESTS.has(envelope.payload.case)) {
        // Only now does the id take a slot, in its own organization's window.
        try {
          admitEnvelope(envelope, "agent", quotas.replayOf(org));
        } catch (error) {
          if (!longPoll) quotas.releaseInFlight(org);
          const code = WireError.isInstance(error) ? error.code : "internal";
          if (code === "replay_cache_full") {
            refuse(
              limitRefusal("org_replay_cache_full", ErrorCode.RATE_LIMITED, (error as Error).message, 1000),
            );
            return;
          }
          if (AUTH_FAILURES.has(code)) metrics.authFailures.inc({ detail: code });
          logger.warn({ detail: code, org }, "envelope refused");
          fail(error, { key, keyId: auth.keyId });
          return;
        }
      }
      let poll: LongPoll | undefined;
      if (longPoll) {
        if (polls.size >= maxLongPolls) supersede(polls.values().next().value as LongPoll);
        poll = { correlationId, key, keyId: auth.keyId, abort: new AbortController(), superseded: false };
        polls.add(poll);
      } else {
        pending++;
      }
      const signal = poll === undefined ? gone.signal : AbortSignal.any([gone.signal, poll.abort.signal]);
      const work = handler
        .handle(envelope.payload, {
          auth,
          protocolVersion: envelope.protocolVersion,
          signal,
          message: { id: envelope.messageId, sentNs: envelope.clientTimestampNs },
        })
        .then((answer) => {
          if (answer !== null && poll?.superseded !== true) send(answer, key, auth.keyId, correlationId);
        })
        .catch((error: unknown) => logger.error({ err: error }, "answering a request failed"))
        .finally(() => {
          if (poll === undefined) {
            pending--;
            quotas.releaseInFlight(org);
          } else polls.delete(poll);
          inFlight.delete(work);
          mine.delete(work);
        });
      inFlight.add(work);
      mine.add(work);
    };

    socket.on("data", (chunk: Buffer) => {
      if (dead) return;
      let bodies: Uint8Array[];
      try {
        bodies = decoder.push(chunk);
      } catch (error) {
        logger.warn({ detail: WireError.isInstance(error) ? error.code : "internal" }, "frame refused");
        guard.received(conn, 0, false, 0);
        fail(error);
        return;
      }
      guard.received(conn, decoder.bufferedBytes, decoder.inFrame, bodies.length);
      for (const body of bodies) {
        if (dead) break;
        frame(body);
      }
    });
    socket.on("end", () => {
      // The agent is done sending: its long polls end now (it cannot be waiting for them any more than
      // for a new request); what else it sent is answered, then our side closes too.
      for (const poll of polls) poll.abort.abort();
      try {
        decoder.end();
      } catch {
        logger.warn({ detail: "malformed_frame" }, "connection ended inside a frame");
      }
      if (dead) return;
      dead = true;
      void Promise.allSettled([...mine]).then(() => {
        if (!socket.destroyed) socket.end();
      });
    });
    socket.on("error", (error) => logger.debug({ err: error.message }, "connection error"));
    socket.on("close", () => {
      dead = true;
      gone.abort();
      guard.drop(conn);
      sockets.delete(socket);
      metrics.connections.dec();
    });
  }

  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    if (closing) {
      socket.destroy();
      return;
    }
    serve(socket);
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
      // Drain: what is in flight is answered; frames that arrive meanwhile are told "shutting_down".
      // Twice quiet in a row, a short grace apart, before the connections are closed.
      for (let quiet = 0; quiet < 2; ) {
        if (inFlight.size > 0) {
          quiet = 0;
          await Promise.allSettled([...inFlight]);
        } else {
          quiet++;
        }
        await new Promise((resolve) => setTimeout(resolve, DRAIN_GRACE_MS));
      }
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
