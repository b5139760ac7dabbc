// Pairing responses with requests in flight on one connection, by Envelope.correlation_id.
// It sends nothing and owns no socket; its owner routes decoded envelopes into settle().

import { WireError } from "./errors.js";
import type { Envelope } from "./gen/shackle/sp1/shackle_pb.js";

interface Waiter {
  resolve: (envelope: Envelope) => void;
  reject: (error: unknown) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
}

/** Requests awaiting their response, any number at once, answered in any order. */
export class PendingRequests {
  readonly #waiting = new Map<string, Waiter>();

  /** Requests still waiting. */
  get size(): number {
    return this.#waiting.size;
  }

  /**
   * Waits for the envelope whose correlation_id is `correlationId`. With `timeoutMs`, rejects with
   * WireError `request_timeout` after that long (the caller then fails closed: DENY).
   * @throws WireError `duplicate_correlation_id` (synchronously) for an empty id or one in flight.
   */
  wait(correlationId: string, options?: { timeoutMs?: number }): Promise<Envelope> {
    if (correlationId === "" || this.#waiting.has(correlationId)) {
      throw new WireError(
        "duplicate_correlation_id",
        `correlation id "${correlationId}" is empty or in flight`,
      );
    }
    return new Promise<Envelope>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, timer: undefined };
      const timeoutMs = options?.timeoutMs;
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(() => {
          this.#waiting.delete(correlationId);
          reject(new WireError("request_timeout", `no response within ${timeoutMs} ms`));
        }, timeoutMs);
        waiter.timer.unref?.();
      }
      this.#waiting.set(correlationId, waiter);
    });
  }

  /**
   * Hands `envelope` to the request it answers. Returns false when no request waits for its
   * correlation_id (a late answer after a timeout, or a confused peer): the caller decides.
   */
  settle(envelope: Envelope): boolean {
    const waiter = this.#waiting.get(envelope.correlationId);
    if (waiter === undefined) return false;
    this.#waiting.delete(envelope.correlationId);
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    waiter.resolve(envelope);
    return true;
  }

  /** Rejects every waiting request (the connection closed); default error `connection_closed`. */
  failAll(
    error: unknown = new WireError("connection_closed", "connection closed with the request in flight"),
  ): void {
    const waiters = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of waiters) {
      if (w.timer !== undefined) clearTimeout(w.timer);
      w.reject(error);
    }
  }
}
