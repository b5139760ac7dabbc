// The replay window: an envelope is accepted once, and only while its timestamp is near this clock.
// It is memory, not storage: a restarted daemon starts empty (the timestamp bound still holds then).

import type { Clock } from "@leash/core";
import { WireError } from "./errors.js";

/**
 * Five minutes. Envelopes further than this from the receiver's clock (either way) are refused, and
 * an accepted message id is remembered until its timestamp is this far in the past — after which a
 * copy of the envelope is refused by its (HMAC-covered) timestamp instead. Both ends of the socket
 * share one host clock, so the window only needs to absorb scheduling delays and slow consumers;
 * five minutes is generous for that and short enough to bound memory.
 */
export const DEFAULT_REPLAY_WINDOW_MS = 5 * 60 * 1000;

/**
 * The most ids held at once. Size it as window × peak envelopes per second (10,000/s for 5 minutes
 * is 3,000,000; each id costs about 100 bytes). When it is full of unexpired ids the window refuses
 * new envelopes (`replay_cache_full`, answered RATE_LIMITED) rather than forget an id early.
 */
export const DEFAULT_REPLAY_CAPACITY = 1_000_000;

export interface ReplayWindowOptions {
  /** Default DEFAULT_REPLAY_WINDOW_MS. */
  windowMs?: number;
  /** Default DEFAULT_REPLAY_CAPACITY. */
  capacity?: number;
  /** The receiver's clock (Leash's Clock port: nanoseconds since the epoch). Default: Date.now. */
  clock?: Clock;
}

const NS_PER_MS = 1_000_000n;

/**
 * Message ids seen recently, with time-based expiry and a hard size bound. One per receiving side of
 * a trust domain (a daemon keeps one for all its connections, so an envelope replayed on a second
 * connection is refused too).
 */
export class ReplayWindow {
  readonly windowMs: number;
  readonly capacity: number;
  readonly #clock: Clock;
  readonly #windowNs: bigint;
  /** id → expiry (ns since the epoch); insertion order, swept from the front. */
  readonly #ids = new Map<string, bigint>();

  constructor(options: ReplayWindowOptions = {}) {
    const windowMs = options.windowMs ?? DEFAULT_REPLAY_WINDOW_MS;
    const capacity = options.capacity ?? DEFAULT_REPLAY_CAPACITY;
    if (!Number.isSafeInteger(windowMs) || windowMs <= 0) {
      throw new WireError("invalid_argument", "windowMs must be a positive integer");
    }
    if (!Number.isSafeInteger(capacity) || capacity <= 0) {
      throw new WireError("invalid_argument", "capacity must be a positive integer");
    }
    this.windowMs = windowMs;
    this.capacity = capacity;
    this.#windowNs = BigInt(windowMs) * NS_PER_MS;
    this.#clock = options.clock ?? { nowNs: () => Date.now() * 1e6 };
  }

  /** Ids currently remembered (after the last sweep). */
  get size(): number {
    return this.#ids.size;
  }

  /**
   * Accepts (and remembers) `messageId` sent at `timestampNs`, or throws. Call it only for an
   * envelope whose HMAC verified, so unauthenticated traffic cannot fill the cache.
   * @throws WireError `timestamp_out_of_window` (a timestamp of 0 included), `replayed_message`,
   *   `replay_cache_full`, `invalid_envelope` (empty message id).
   */
  admit(messageId: string, timestampNs: bigint | number): void {
    if (typeof messageId !== "string" || messageId.length === 0) {
      throw new WireError("invalid_envelope", "message_id is empty");
    }
    const ts = typeof timestampNs === "bigint" ? timestampNs : BigInt(Math.trunc(timestampNs));
    const now = BigInt(Math.trunc(this.#clock.nowNs()));
    const skew = ts > now ? ts - now : now - ts;
    if (ts <= 0n || skew > this.#windowNs) {
      throw new WireError(
        "timestamp_out_of_window",
        `envelope timestamp is ${ts <= 0n ? "missing" : `${skew / NS_PER_MS} ms away from this clock`} (window ${this.windowMs} ms)`,
      );
    }
    this.#sweep(now);
    const seen = this.#ids.get(messageId);
    if (seen !== undefined && seen > now) {
      throw new WireError("replayed_message", `message id ${messageId} was already accepted`);
    }
    if (seen !== undefined) this.#ids.delete(messageId);
    if (this.#ids.size >= this.capacity) {
      throw new WireError("replay_cache_full", `replay window holds ${this.capacity} unexpired ids`);
    }
    this.#ids.set(messageId, ts + this.#windowNs);
  }

  /** Whether `messageId` is remembered and not expired (does not record it). */
  has(messageId: string): boolean {
    const expiry = this.#ids.get(messageId);
    return expiry !== undefined && expiry > BigInt(Math.trunc(this.#clock.nowNs()));
  }

  /**
   * Drops expired ids from the front of the insertion order. An id expires one window after its
   * timestamp, which is within one window of the clock when it is inserted, so every id expires at
   * most two windows after insertion; expired ids behind a longer-lived one wait for it to go, and
   * the capacity bounds them meanwhile.
   */
  #sweep(now: bigint): void {
    for (const [id, expiry] of this.#ids) {
      if (expiry > now) break;
      this.#ids.delete(id);
    }
  }
}
