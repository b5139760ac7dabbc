// The socket transport's bounds on its peers: a connection cap, timeouts (authentication, idle, a frame's
// deadline), one budget for partial frames across connections, and write back-pressure. No SP/1.0 here.
import type { Socket } from "node:net";
import type { SocketLimits } from "./limits.js";
import type { DaemonMetrics } from "./metrics.js";

/** Why a connection is not being read from; it is read again once no reason is left. */
type PauseReason = "buffer" | "write" | "dead";

/** What the guard knows of one connection. */
export interface GuardedConnection {
  readonly socket: Socket;
  readonly connectedAt: number;
  /** Set once a frame passed its HMAC check: from then on the idle timeout applies, not the auth one. */
  authenticated: boolean;
  lastByteAt: number;
  /** When the frame being received began, or null between frames. */
  frameStartedAt: number | null;
  /** Bytes of its partial frame held in the decoder. */
  held: number;
  /** Whether requests or long polls of it are still being answered (an idle timeout never cuts them). */
  readonly busy: () => boolean;
  readonly pausedBy: Set<PauseReason>;
}

export class ConnectionGuard {
  /** Open connections, oldest first. */
  readonly #connections = new Set<GuardedConnection>();
  /** Connections paused for the shared budget, first paused first resumed. */
  readonly #waiting = new Set<GuardedConnection>();
  /** Connections paused because their peer does not read their answers. */
  readonly #backlogged = new Set<GuardedConnection>();
  #held = 0;
  #sweeper: NodeJS.Timeout | undefined;

  constructor(
    readonly limits: SocketLimits,
    private readonly metrics: DaemonMetrics,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get size(): number {
    return this.#connections.size;
  }

  /** Starts the timer that closes connections past their timeouts. */
  start(): void {
    const { authTimeoutMs, idleTimeoutMs, frameTimeoutMs } = this.limits;
    const every = Math.min(1000, Math.max(10, Math.min(authTimeoutMs, idleTimeoutMs, frameTimeoutMs) / 4));
    this.#sweeper = setInterval(() => this.#sweep(), every);
    this.#sweeper.unref();
  }

  stop(): void {
    clearInterval(this.#sweeper);
  }

  /**
   * A new connection: tracked, or (at the cap) it takes the place of the oldest connection that never
   * authenticated; when every connection has, the new one is closed and null returned.
   */
  admit(socket: Socket, busy: () => boolean): GuardedConnection | null {
    if (this.#connections.size >= this.limits.maxConnections) {
      const stranger = [...this.#connections].find((c) => !c.authenticated);
      if (stranger === undefined) {
        this.metrics.limitRefusals.inc({ limit: "max_connections" });
        socket.destroy();
        return null;
      }
      this.metrics.limitRefusals.inc({ limit: "evicted_unauthenticated" });
      this.#close(stranger);
    }
    const at = this.now();
    const connection: GuardedConnection = {
      socket,
      connectedAt: at,
      authenticated: false,
      lastByteAt: at,
      frameStartedAt: null,
      held: 0,
      busy,
      pausedBy: new Set(),
    };
    this.#connections.add(connection);
    return connection;
  }

  /**
   * After the decoder took a chunk: `held` bytes of a partial frame are now kept, `inFrame` whether one
   * has begun, `completed` how many frames the chunk finished. Past the shared budget the connection
   * is paused until others free some (or its frame deadline closes it).
   */
  received(connection: GuardedConnection, held: number, inFrame: boolean, completed: number): void {
    const at = this.now();
    connection.lastByteAt = at;
    if (!inFrame) connection.frameStartedAt = null;
    else if (connection.frameStartedAt === null || completed > 0) connection.frameStartedAt = at;
    this.#setHeld(connection, held);
    if (held > 0 && this.#held > this.limits.maxBufferedBytes && !connection.pausedBy.has("buffer")) {
      this.metrics.limitRefusals.inc({ limit: "buffer_budget_paused" });
      this.#waiting.add(connection);
      this.pause(connection, "buffer");
    }
  }

  /** After an answer was queued: stop reading from a peer that does not read, close it past the mark. */
  wrote(connection: GuardedConnection): void {
    const queued = connection.socket.writableLength;
    if (queued > this.limits.writeCloseBytes) {
      this.metrics.limitRefusals.inc({ limit: "write_overflow" });
      connection.socket.destroy();
      return;
    }
    if (queued > this.limits.writePauseBytes && !connection.pausedBy.has("write")) {
      this.metrics.limitRefusals.inc({ limit: "write_paused" });
      this.#backlogged.add(connection);
      this.pause(connection, "write");
      connection.socket.once("drain", () => {
        this.#backlogged.delete(connection);
        this.resume(connection, "write");
      });
    }
    if (this.#backlogged.has(connection)) this.#checkQueued();
  }

  /** Past the shared budget for unread answers, the connection holding the most is closed. */
  #checkQueued(): void {
    let total = 0;
    let largest: GuardedConnection | undefined;
    for (const c of this.#backlogged) {
      const queued = c.socket.writableLength;
      total += queued;
      if (largest === undefined || queued > largest.socket.writableLength) largest = c;
    }
    if (total > this.limits.maxQueuedBytes && largest !== undefined) {
      this.metrics.limitRefusals.inc({ limit: "write_budget_overflow" });
      this.#backlogged.delete(largest);
      largest.socket.destroy();
    }
  }

  pause(connection: GuardedConnection, reason: PauseReason): void {
    connection.pausedBy.add(reason);
    connection.socket.pause();
  }

  resume(connection: GuardedConnection, reason: PauseReason): void {
    connection.pausedBy.delete(reason);
    if (connection.pausedBy.size === 0 && !connection.socket.destroyed) connection.socket.resume();
  }

  /** The connection closed: its bytes go back to the budget. */
  drop(connection: GuardedConnection): void {
    this.#connections.delete(connection);
    this.#waiting.delete(connection);
    this.#backlogged.delete(connection);
    this.#setHeld(connection, 0);
  }

  #setHeld(connection: GuardedConnection, held: number): void {
    const freed = held < connection.held;
    this.#held += held - connection.held;
    connection.held = held;
    this.metrics.bufferedBytes.set(this.#held);
    if (freed) this.#wake();
  }

  /** Resumes paused connections, oldest pause first, while the budget has room. */
  #wake(): void {
    for (const waiting of this.#waiting) {
      if (this.#held >= this.limits.maxBufferedBytes) return;
      this.#waiting.delete(waiting);
      this.resume(waiting, "buffer");
    }
  }

  #close(connection: GuardedConnection): void {
    this.drop(connection);
    connection.socket.destroy();
  }

  #sweep(): void {
    const at = this.now();
    const { authTimeoutMs, idleTimeoutMs, frameTimeoutMs } = this.limits;
    for (const c of this.#connections) {
      let limit: string | undefined;
      if (c.frameStartedAt !== null && at - c.frameStartedAt > frameTimeoutMs) limit = "frame_timeout";
      else if (!c.authenticated && at - c.connectedAt > authTimeoutMs) limit = "auth_timeout";
      else if (c.authenticated && !c.busy() && c.held === 0 && at - c.lastByteAt > idleTimeoutMs)
        limit = "idle_timeout";
      if (limit === undefined) continue;
      this.metrics.limitRefusals.inc({ limit });
      this.#close(c);
    }
  }
}
