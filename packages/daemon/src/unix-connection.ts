// One connection of the Unix-socket transport: its frames read, each envelope opened, admitted within
// the connection's and its organization's limits, and answered. Not the listener, nor what a request means.
import type { Socket } from "node:net";
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
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";
import type { ConnectionGuard, GuardedConnection } from "./socket-guard.js";

/** What every connection of one listener shares. */
export interface SocketServerState {
  readonly handler: RequestHandler;
  readonly config: DaemonConfig;
  readonly quotas: OrganizationQuotaBook;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: DaemonMetrics;
  readonly maxInFlight: number;
  readonly maxLongPolls: number;
  readonly guard: ConnectionGuard;
  /** Open connections, and the requests of all of them still being answered (close drains these). */
  readonly sockets: Set<Socket>;
  readonly inFlight: Set<Promise<void>>;
  /** Whether the listener is closing: a new request is told "shutting_down". */
  readonly closing: () => boolean;
}

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

const AUTH_FAILURES = new Set(["bad_hmac", "unknown_key", "replayed_message", "timestamp_out_of_window"]);

/** One open long poll of a connection. */
interface LongPoll {
  readonly correlationId: string;
  readonly key: Uint8Array;
  readonly keyId: string;
  readonly abort: AbortController;
  /** Answered by the transport (superseded): the handler's answer, when it comes, is dropped. */
  superseded: boolean;
}

/** An opened envelope, who sent it and where its answer goes. */
interface Opened {
  readonly envelope: Envelope;
  readonly key: Uint8Array;
  readonly auth: AuthContext;
  readonly correlationId: string;
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

export function countError(metrics: DaemonMetrics, payload: Payload): void {
  if (payload.case === "error") {
    metrics.errors.inc({
      code: ErrorCode[payload.value.code] ?? String(payload.value.code),
      detail: payload.value.detail,
    });
  }
}

/** An Error answer the transport makes itself (a limit or quota), counted by the limit that made it. */
function limitRefusal(
  metrics: DaemonMetrics,
  limit: string,
  code: ErrorCode,
  message: string,
  retryAfterMs?: number,
): Payload {
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
}

/** Takes a new connection: admitted by the guard (or closed by it), then read until it closes. */
export function serve(state: SocketServerState, socket: Socket): void {
  /** Requests of this connection still being answered. */
  const mine = new Set<Promise<void>>();
  const guarded = state.guard.admit(socket, () => mine.size > 0);
  if (guarded === null) return;
  new SocketConnection(state, socket, guarded, mine).listen();
}

class SocketConnection {
  /** This connection's open long polls, oldest first. */
  readonly #polls = new Set<LongPoll>();
  readonly #decoder = new FrameDecoder();
  /** Ordinary requests in flight (long polls apart). */
  #pending = 0;
  /** No further frame is read: the connection failed or closed. */
  #dead = false;
  /** Aborted when the connection closes: a long poll stops waiting for nobody. */
  readonly #gone = new AbortController();

  constructor(
    private readonly state: SocketServerState,
    private readonly socket: Socket,
    private readonly conn: GuardedConnection,
    private readonly mine: Set<Promise<void>>,
  ) {}

  listen(): void {
    const { socket, state } = this;
    state.sockets.add(socket);
    state.metrics.connections.inc();
    socket.on("data", (chunk: Buffer) => this.#data(chunk));
    socket.on("end", () => this.#end());
    socket.on("error", (error) => state.logger.debug({ err: error.message }, "connection error"));
    socket.on("close", () => {
      this.#dead = true;
      this.#gone.abort();
      state.guard.drop(this.conn);
      state.sockets.delete(socket);
      state.metrics.connections.dec();
    });
  }

  #data(chunk: Buffer): void {
    if (this.#dead) return;
    const { guard, logger } = this.state;
    let bodies: Uint8Array[];
    try {
      bodies = this.#decoder.push(chunk);
    } catch (error) {
      logger.warn({ detail: WireError.isInstance(error) ? error.code : "internal" }, "frame refused");
      guard.received(this.conn, 0, false, 0);
      this.#fail(error);
      return;
    }
    guard.received(this.conn, this.#decoder.bufferedBytes, this.#decoder.inFrame, bodies.length);
    for (const body of bodies) {
      if (this.#dead) break;
      this.#frame(body);
    }
  }

  #end(): void {
    // The agent is done sending: its long polls end now (it cannot be waiting for them any more than
    // for a new request); what else it sent is answered, then our side closes too.
    for (const poll of this.#polls) poll.abort.abort();
    try {
      this.#decoder.end();
    } catch {
      this.state.logger.warn({ detail: "malformed_frame" }, "connection ended inside a frame");
    }
    if (this.#dead) return;
    this.#dead = true;
    void Promise.allSettled([...this.mine]).then(() => {
      if (!this.socket.destroyed) this.socket.end();
    });
  }

  #send(payload: Payload, key: Uint8Array, keyId: string, correlationId: string): void {
    const { socket, state } = this;
    if (socket.destroyed || !socket.writable) return;
    countError(state.metrics, payload);
    socket.write(sealFrame(payload, { key, keyId, sender: "daemon", clock: state.clock, correlationId }));
    state.guard.wrote(this.conn);
  }

  /**
   * The stream cannot be trusted past this point: read nothing more, let the requests already
   * accepted be answered, answer the failure once (signed when the envelope named a key this daemon
   * has, so the agent can check it), then close the connection.
   */
  #fail(error: unknown, key?: { key: Uint8Array; keyId: string }): void {
    if (this.#dead) return;
    this.#dead = true;
    const { clock } = this.state;
    const payload = errorPayload(error);
    countError(this.state.metrics, payload);
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
    this.state.guard.pause(this.conn, "dead");
    const frameOut = encodeFrame(body);
    const socket = this.socket;
    void Promise.allSettled([...this.mine]).then(() => {
      if (!socket.destroyed) socket.end(frameOut);
      setTimeout(() => socket.destroy(), 1000).unref();
    });
  }

  /** Ends the long poll now: its answer says why (its client most likely gave up on it long ago). */
  #supersede(poll: LongPoll): void {
    const { metrics, maxLongPolls } = this.state;
    this.#polls.delete(poll);
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
    this.#send(refusal, poll.key, poll.keyId, poll.correlationId);
    poll.abort.abort();
  }

  /** One frame's body: opened, admitted, then handed to the handler (or answered with why not). */
  #frame(body: Uint8Array): void {
    const opened = this.#open(body);
    if (opened === undefined) return;
    const longPoll = LONG_POLLS.has(opened.envelope.payload.case);
    if (!this.#admit(opened, longPoll)) return;
    this.#answer(opened, longPoll);
  }

  /** The envelope, its HMAC checked; undefined once the connection failed on it. */
  #open(body: Uint8Array): Opened | undefined {
    const { config, metrics, logger } = this.state;
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
      this.#fail(error, signWith);
      return undefined;
    }
    const { key, auth } = found.resolved!;
    this.conn.authenticated = true;
    const correlationId = envelope.correlationId === "" ? envelope.messageId : envelope.correlationId;
    return { envelope, key, auth, correlationId };
  }

  /**
   * Whether the request may go on: the daemon is not closing, it is within its organization's rate and
   * in-flight quotas and the connection's in-flight limit, and (a request) its id takes a replay slot.
   * When it may not, it is answered (or the connection failed) here. An admitted ordinary request holds
   * one of its organization's in-flight slots.
   */
  #admit({ envelope, key, auth, correlationId }: Opened, longPoll: boolean): boolean {
    const { quotas, metrics, logger, maxInFlight } = this.state;
    const org = auth.organizationId;
    const refuse = (refusal: Payload) => this.#send(refusal, key, auth.keyId, correlationId);
    if (this.state.closing()) {
      // Shutting down: requests already in flight finish; a new one is told to come back.
      refuse({
        case: "error",
        value: create(ErrorSchema, {
          code: ErrorCode.DAEMON_UNAVAILABLE,
          detail: "shutting_down",
          message: "the daemon is shutting down",
        }),
      });
      return false;
    }
    const rate = quotas.takeRate(org);
    if (!rate.ok) {
      const why = `organization ${org} is over its ${quotas.quotas.ratePerS} requests per second`;
      refuse(limitRefusal(metrics, "org_rate_limited", ErrorCode.RATE_LIMITED, why, rate.retryAfterMs));
      return false;
    }
    if (!longPoll && this.#pending >= maxInFlight) {
      const why = `more than ${maxInFlight} requests in flight on this connection`;
      refuse(limitRefusal(metrics, "too_many_in_flight", ErrorCode.RATE_LIMITED, why, 10));
      return false;
    }
    if (!longPoll && !quotas.takeInFlight(org)) {
      const why = `organization ${org} has ${quotas.quotas.inFlight} requests in flight`;
      refuse(limitRefusal(metrics, "org_in_flight_limit", ErrorCode.RATE_LIMITED, why, 10));
      return false;
    }
    if (!REQUESTS.has(envelope.payload.case)) return true;
    // Only now does the id take a slot, in its own organization's window.
    try {
      admitEnvelope(envelope, "agent", quotas.replayOf(org));
      return true;
    } catch (error) {
      if (!longPoll) quotas.releaseInFlight(org);
      const code = WireError.isInstance(error) ? error.code : "internal";
      if (code === "replay_cache_full") {
        const why = (error as Error).message;
        refuse(limitRefusal(metrics, "org_replay_cache_full", ErrorCode.RATE_LIMITED, why, 1000));
        return false;
      }
      if (AUTH_FAILURES.has(code)) metrics.authFailures.inc({ detail: code });
      logger.warn({ detail: code, org }, "envelope refused");
      this.#fail(error, { key, keyId: auth.keyId });
      return false;
    }
  }

  /** Hands an admitted request to the handler and sends its answer (unless its poll was superseded). */
  #answer({ envelope, key, auth, correlationId }: Opened, longPoll: boolean): void {
    const { handler, quotas, logger, inFlight, maxLongPolls } = this.state;
    const org = auth.organizationId;
    let poll: LongPoll | undefined;
    if (longPoll) {
      if (this.#polls.size >= maxLongPolls) this.#supersede(this.#polls.values().next().value as LongPoll);
      poll = { correlationId, key, keyId: auth.keyId, abort: new AbortController(), superseded: false };
      this.#polls.add(poll);
    } else {
      this.#pending++;
    }
    const gone = this.#gone.signal;
    const signal = poll === undefined ? gone : AbortSignal.any([gone, poll.abort.signal]);
    const work = handler
      .handle(envelope.payload, {
        auth,
        protocolVersion: envelope.protocolVersion,
        signal,
        message: { id: envelope.messageId, sentNs: envelope.clientTimestampNs },
      })
      .then((answer) => {
        if (answer !== null && poll?.superseded !== true) this.#send(answer, key, auth.keyId, correlationId);
      })
      .catch((error: unknown) => logger.error({ err: error }, "answering a request failed"))
      .finally(() => {
        if (poll === undefined) {
          this.#pending--;
          quotas.releaseInFlight(org);
        } else this.#polls.delete(poll);
        inFlight.delete(work);
        this.mine.delete(work);
      });
    inFlight.add(work);
    this.mine.add(work);
  }
}
