// TailFeed: tells readers that follow the chain when it has grown past their position — one poll of the
// store for all of them (bounded interval), sooner when this daemon appended. It reads no entry for them.
import type { Substrate } from "@leash/core";

/** Why a wait ended: the chain has an entry past the position, time is up, the reader left, or shutdown. */
export type TailWake = "grown" | "timeout" | "aborted" | "closed";

export interface TailFeedOptions {
  readonly substrate: Substrate;
  /** How often the store is asked while someone waits (entries other writers appended). Default 200 ms. */
  readonly pollMs?: number;
  /** Told of a failed poll (the next one retries). */
  readonly onError?: (error: unknown) => void;
}

interface Waiter {
  readonly afterSeq: number;
  readonly wake: (why: TailWake) => void;
}

export const DEFAULT_TAIL_POLL_MS = 200;

export class TailFeed {
  readonly #substrate: Substrate;
  readonly #pollMs: number;
  readonly #onError: ((error: unknown) => void) | undefined;
  readonly #waiters = new Set<Waiter>();
  /** The highest seq known to exist (-1: none yet). */
  #head = -1;
  #timer: NodeJS.Timeout | undefined;
  #polling = false;
  #again = false;
  #closed = false;

  constructor(options: TailFeedOptions) {
    this.#substrate = options.substrate;
    this.#pollMs = options.pollMs ?? DEFAULT_TAIL_POLL_MS;
    this.#onError = options.onError;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** A reader saw entry `seq`: it exists, so nobody positioned before it need wait. */
  observe(seq: number): void {
    if (seq <= this.#head) return;
    this.#head = seq;
    for (const waiter of [...this.#waiters]) if (waiter.afterSeq < seq) waiter.wake("grown");
  }

  /** Resolves once an entry after `afterSeq` exists, after `maxMs`, when `signal` aborts, or at close(). */
  wait(afterSeq: number, signal: AbortSignal | undefined, maxMs: number): Promise<TailWake> {
    if (this.#closed) return Promise.resolve("closed");
    if (signal?.aborted) return Promise.resolve("aborted");
    // The reader has read up to afterSeq, so those entries exist.
    this.observe(afterSeq);
    if (this.#head > afterSeq) return Promise.resolve("grown");
    return new Promise<TailWake>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => waiter.wake("aborted");
      const waiter: Waiter = {
        afterSeq,
        wake: (why) => {
          if (!this.#waiters.delete(waiter)) return;
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          resolve(why);
        },
      };
      this.#waiters.add(waiter);
      timer = setTimeout(() => waiter.wake("timeout"), maxMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#schedule(this.#pollMs);
    });
  }

  /** This daemon appended (or may have): look now rather than at the next interval, if anyone waits. */
  poke(): void {
    if (this.#waiters.size > 0) this.#schedule(0);
  }

  /** Wakes every waiter with "closed" and stops polling; later waits resolve "closed" at once. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const waiter of [...this.#waiters]) waiter.wake("closed");
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    if (this.#polling) {
      if (delayMs === 0) this.#again = true;
      return;
    }
    if (this.#timer !== undefined) {
      if (delayMs > 0) return; // a poll is already due
      clearTimeout(this.#timer);
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#poll();
    }, delayMs);
    this.#timer.unref();
  }

  async #poll(): Promise<void> {
    if (this.#closed || this.#waiters.size === 0) return;
    this.#polling = true;
    this.#again = false;
    try {
      // One entry past the highest known one is enough to know the chain grew.
      const from = this.#head + 1;
      const next = await this.#substrate.transaction((tx) => tx.chain.range(from, 1));
      if (next[0] !== undefined) this.observe(next[0].seq);
    } catch (error) {
      if (!this.#closed) this.#onError?.(error);
    } finally {
      this.#polling = false;
    }
    if (this.#waiters.size > 0) this.#schedule(this.#again ? 0 : this.#pollMs);
  }
}
