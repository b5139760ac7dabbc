// One Unix-socket connection to the daemon, kept up by itself: framing, HMAC, replay checks, requests
// in flight paired by correlation id, reconnect with backoff. It decides nothing; callers fail closed.
import { createConnection, type Socket } from "node:net";
import type { Clock } from "@leash/core";
import {
  decodeEnvelope,
  type Envelope,
  ErrorCode,
  errorCodeName,
  FrameDecoder,
  newMessageId,
  openEnvelope,
  type Payload,
  PendingRequests,
  ReplayWindow,
  sealFrame,
  WireError,
} from "@leash/wire";
import type { RequestOutcome, SettleOutcome, Transport } from "./transport.js";

export interface ConnectionOptions {
  socketPath: string;
  key: Uint8Array;
  keyId: string;
  clock: Clock;
  initialDelayMs: number;
  maxDelayMs: number;
  /** Told of authenticated answers nobody awaits any more (late answers, answers to notifications). */
  onStray?: (envelope: Envelope) => void;
}

/** Rejects the requests in flight when the stream can no longer be trusted. */
class BadResponse extends Error {
  constructor(
    message: string,
    readonly failure: "bad_response" | "auth_failed" = "bad_response",
  ) {
    super(message);
  }
}

/** How many timed-out ids are remembered, so their late answers are ignored rather than suspect. */
const LATE_IDS = 1024;

export class Connection implements Transport {
  readonly #options: ConnectionOptions;
  readonly #pending = new PendingRequests();
  readonly #late = new Set<string>();
  // One per client: a daemon envelope is accepted once, on whichever connection it arrives.
  readonly #replay: ReplayWindow;
  #socket: Socket | null = null;
  #connecting: Promise<Socket | null> | null = null;
  #retryTimer: ReturnType<typeof setTimeout> | null = null;
  #attempts = 0;
  #closed = false;
  readonly #connectedListeners: Array<() => void> = [];
  protocolVersion: string | undefined;

  constructor(options: ConnectionOptions) {
    this.#options = options;
    this.#replay = new ReplayWindow({ clock: options.clock });
  }

  /** Starts connecting now (the first request would otherwise); failures start the backoff loop. */
  start(): void {
    void this.#connect();
  }

  get connected(): boolean {
    return this.#socket !== null;
  }

  /**
   * Sends `payload` and waits up to `timeoutMs` (connecting included) for its answer. Never throws:
   * every way of not getting an authenticated answer to this very request is a RequestFailure.
   */
  async request(payload: Payload, timeoutMs: number): Promise<RequestOutcome> {
    const started = Date.now();
    const ready = await this.#ready(timeoutMs);
    if (!("socket" in ready)) return ready;
    const socket = ready.socket;
    const remaining = Math.max(1, timeoutMs - (Date.now() - started));
    const messageId = newMessageId();
    const frame = this.#seal(payload, messageId);
    const answer = this.#pending.wait(messageId, { timeoutMs: remaining });
    socket.ref(); // a request in flight keeps the process alive; an idle client does not
    socket.write(frame);
    try {
      return { ok: true, answer: (await answer).payload };
    } catch (error) {
      if (WireError.isInstance(error) && error.code === "request_timeout") {
        this.#rememberLate(messageId);
        return { ok: false, failure: "timeout", message: `no answer within ${timeoutMs} ms` };
      }
      if (error instanceof BadResponse) return { ok: false, failure: error.failure, message: error.message };
      return { ok: false, failure: "daemon_unavailable", message: messageOf(error) };
    } finally {
      if (this.#pending.size === 0) this.#socket?.unref();
    }
  }

  /**
   * Sends a post_exec with ack_requested and waits for its post_exec_ack (the settlement is durable)
   * or Error: a written frame is not a recorded settlement (the daemon may be stopped or die first).
   */
  settle(payload: Payload, timeoutMs: number): Promise<SettleOutcome> {
    return this.request(payload, timeoutMs);
  }

  /** `listener` runs after each connection is established (a reconnect included). */
  onConnected(listener: () => void): void {
    this.#connectedListeners.push(listener);
  }

  /** The open socket, connecting first when needed (within `timeoutMs`), or why there is none. */
  async #ready(timeoutMs: number): Promise<{ socket: Socket } | Extract<RequestOutcome, { ok: false }>> {
    if (this.#closed) return { ok: false, failure: "daemon_unavailable", message: "the client is closed" };
    if (this.#socket !== null) return { socket: this.#socket };
    if (this.#connecting === null && this.#retryTimer !== null) {
      // In backoff: answer now rather than hammer a daemon that just refused.
      return { ok: false, failure: "daemon_unavailable", message: "not connected to the daemon (retrying)" };
    }
    const connecting = this.#connecting ?? this.#connect();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), timeoutMs);
    });
    const got = await Promise.race([connecting, timedOut]);
    clearTimeout(timer);
    if (got === "timeout")
      return { ok: false, failure: "timeout", message: `no connection within ${timeoutMs} ms` };
    if (got === null) {
      return {
        ok: false,
        failure: "daemon_unavailable",
        message: `cannot connect to ${this.#options.socketPath}`,
      };
    }
    return { socket: got };
  }

  #seal(payload: Payload, messageId: string): Uint8Array {
    return sealFrame(payload, {
      key: this.#options.key,
      keyId: this.#options.keyId,
      sender: "agent",
      clock: this.#options.clock,
      messageId,
      ...(this.protocolVersion === undefined ? {} : { protocolVersion: this.protocolVersion }),
    });
  }

  /** Closes the connection for good; requests in flight fail as daemon_unavailable. */
  close(): void {
    this.#closed = true;
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#socket?.destroy();
    this.#socket = null;
    this.#pending.failAll();
  }

  #connect(): Promise<Socket | null> {
    if (this.#connecting !== null) return this.#connecting;
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#connecting = new Promise<Socket | null>((resolve) => {
      const socket = createConnection(this.#options.socketPath);
      socket.unref();
      const refused = () => {
        socket.destroy();
        resolve(null);
      };
      socket.once("error", refused);
      socket.once("connect", () => {
        socket.off("error", refused);
        this.#adopt(socket);
        resolve(socket);
      });
    }).then((socket) => {
      this.#connecting = null;
      if (socket === null) this.#scheduleRetry();
      else if (this.#closed) {
        socket.destroy();
        return null;
      }
      return socket;
    });
    return this.#connecting;
  }

  #adopt(socket: Socket): void {
    this.#attempts = 0;
    this.#socket = socket;
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      if (this.#socket !== socket) return;
      let bodies: Uint8Array[];
      try {
        bodies = decoder.push(new Uint8Array(chunk));
      } catch (error) {
        this.#distrust(socket, `unreadable frame from the daemon: ${messageOf(error)}`);
        return;
      }
      for (const body of bodies) if (!this.#receive(socket, body)) return;
    });
    const lost = () => {
      if (this.#socket !== socket) return;
      this.#socket = null;
      this.#pending.failAll(new WireError("connection_closed", "the daemon closed the connection"));
      this.#scheduleRetry();
    };
    socket.on("error", lost);
    socket.on("close", lost);
    // After #connect has settled, so a listener's request finds the socket ready.
    setImmediate(() => {
      if (this.#socket === socket) for (const listener of this.#connectedListeners) listener();
    });
  }

  /** Routes one frame to its request; false when the stream was dropped as untrustworthy. */
  #receive(socket: Socket, body: Uint8Array): boolean {
    let envelope: Envelope;
    try {
      envelope = openEnvelope(body, {
        keyFor: () => this.#options.key,
        sender: "daemon",
        replay: this.#replay,
      });
    } catch (error) {
      // Its correlation id cannot be trusted either, so no request can take it: all fail closed.
      const refused = keyRefusalOf(body);
      if (refused !== null) {
        // The likely cause first: a wrong hmacKey or keyId (the daemon cannot sign for a key it does
        // not trust, so its refusal is unsigned; it changes nothing about the DENY).
        this.#distrust(
          socket,
          `the daemon refused our key (${refused}): check hmacKey and keyId against its config (its answer is unsigned: ${messageOf(error)})`,
          "auth_failed",
        );
        return false;
      }
      this.#distrust(
        socket,
        `the daemon's answer does not authenticate: ${messageOf(error)}${refusalOf(body)}`,
      );
      return false;
    }
    if (this.#pending.settle(envelope)) return true;
    if (this.#late.delete(envelope.correlationId)) {
      // The answer to a request that timed out, or to a notification: authentic, just unawaited.
      this.#options.onStray?.(envelope);
      return true;
    }
    this.#distrust(
      socket,
      `an answer for correlation id ${JSON.stringify(envelope.correlationId)}, which no request has`,
    );
    return false;
  }

  /** Fails every request in flight as bad_response and drops the connection (a new one follows). */
  #distrust(socket: Socket, message: string, failure: BadResponse["failure"] = "bad_response"): void {
    if (this.#socket === socket) this.#socket = null;
    socket.destroy();
    this.#pending.failAll(new BadResponse(message, failure));
    this.#scheduleRetry();
  }

  #scheduleRetry(): void {
    if (this.#closed || this.#retryTimer !== null || this.#connecting !== null || this.#socket !== null)
      return;
    const { initialDelayMs, maxDelayMs } = this.#options;
    const ceiling = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(this.#attempts, 30));
    this.#attempts++;
    // "Equal jitter": half the delay fixed, half random, so many agents do not reconnect in step.
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      void this.#connect();
    }, delay);
    this.#retryTimer.unref();
  }

  #rememberLate(messageId: string): void {
    this.#late.add(messageId);
    if (this.#late.size > LATE_IDS) this.#late.delete(this.#late.values().next().value as string);
  }
}

/**
 * What an unauthenticated Error says (a daemon that cannot sign for our key, e.g. a wrong key or key
 * id, answers so before closing): for the operator's eyes only, it changes nothing about the DENY.
 */
function refusalOf(body: Uint8Array): string {
  try {
    const envelope = decodeEnvelope(body);
    if (envelope.payload.case !== "error") return "";
    const e = envelope.payload.value;
    return ` (unauthenticated Error: ${errorCodeName(e.code)} ${e.detail})`;
  } catch {
    return "";
  }
}

/** The detail of an unsigned AUTHENTICATION_FAILED Error (bad_hmac, unknown_key, …), else null. */
function keyRefusalOf(body: Uint8Array): string | null {
  try {
    const envelope = decodeEnvelope(body);
    if (envelope.payload.case !== "error") return null;
    const e = envelope.payload.value;
    return e.code === ErrorCode.AUTHENTICATION_FAILED ? e.detail || "authentication_failed" : null;
  } catch {
    return null;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
