// Group commit at the engine: calls that arrive while a batch is being judged wait and form the next
// batch, one transaction each. It knows nothing of decisions; engine.ts says what a batch does.
//
// At most one batch is being judged at a time, so the in-memory projection (projection.ts) is read and
// written by one batch at a time; the next batch may be judged while the one before waits for its
// COMMIT to be durable (fsync), which is what keeps the processor busy through the disk's wait. When a
// batch fails as a whole, its calls run again one by one: a call that fails alone then fails alone,
// and the others still get their answers.
//
// When to cut the next batch: the first one of a turn of the event loop with nothing in flight, on a
// microtask, so a lone call (and calls made together, Promise.all) starts at once and waits for no
// timer. Any later one of that turn, or while a batch is in flight, on setImmediate: a daemon's calls
// each arrive in an I/O callback of their own, and a microtask pump would cut a batch after each one
// (one call a transaction on memory, a few on SQLite); the check phase runs after all of the turn's
// I/O callbacks, so the calls read from every socket in that turn share a batch.

import { AsyncResource } from "node:async_hooks";

/** What running one batch gives each of its items: a value, or the error that item alone met. */
export type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

/** Runs a batch; calls `judged` once its calls are judged and only its COMMIT is left to wait for. */
export type RunBatch<T, R> = (items: readonly T[], judged: () => void) => Promise<Outcome<R>[]>;

/** Batches in flight at once: one being judged, one waiting for its COMMIT. */
const IN_FLIGHT = 2;

export class Batcher<T, R> {
  readonly #queue: Array<{ item: T; resolve: (value: R) => void; reject: (error: unknown) => void }> = [];
  #judging = false;
  #inFlight = 0;
  #scheduled = false;
  /** A batch was cut in this turn of the event loop (cleared on setImmediate, at the turn's end). */
  #cutThisTurn = false;
  readonly #turnEnded = () => {
    this.#cutThisTurn = false;
  };
  /**
   * Pumps in the async context the batcher was made in: `judged` is called from inside a batch's
   * transaction, and the next batch's transaction must not look nested in it to a store that tracks
   * its transactions by async context (the memory store refuses a nested one).
   */
  readonly #pumpOutside = AsyncResource.bind(() => {
    this.#scheduled = false;
    this.#pump();
  });

  constructor(
    private readonly run: RunBatch<T, R>,
    private readonly maxBatch: number,
  ) {}

  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      this.#schedule();
    });
  }

  /** Idle: on a microtask (no wait). Busy: after the turn's I/O callbacks, so their calls share a batch. */
  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    if (this.#inFlight === 0 && !this.#cutThisTurn) queueMicrotask(this.#pumpOutside);
    else setImmediate(this.#pumpOutside);
  }

  #pump(): void {
    if (this.#judging || this.#inFlight >= IN_FLIGHT || this.#queue.length === 0) return;
    const batch = this.#queue.splice(0, this.maxBatch);
    if (!this.#cutThisTurn) {
      this.#cutThisTurn = true;
      setImmediate(this.#turnEnded);
    }
    this.#judging = true;
    this.#inFlight++;
    let released = false;
    const judged = () => {
      if (released) return;
      released = true;
      this.#judging = false;
      this.#schedule();
    };
    void this.#settle(batch, judged).finally(() => {
      judged();
      this.#inFlight--;
      this.#schedule();
    });
  }

  async #settle(
    batch: Array<{ item: T; resolve: (value: R) => void; reject: (error: unknown) => void }>,
    judged: () => void,
  ): Promise<void> {
    let outcomes: Outcome<R>[];
    try {
      outcomes = await this.run(
        batch.map((waiting) => waiting.item),
        judged,
      );
    } catch (error) {
      judged();
      if (batch.length === 1) {
        outcomes = [{ ok: false, error }];
      } else {
        outcomes = [];
        for (const waiting of batch) {
          try {
            outcomes.push(...(await this.run([waiting.item], () => undefined)));
          } catch (alone) {
            outcomes.push({ ok: false, error: alone });
          }
        }
      }
    }
    batch.forEach((waiting, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) waiting.resolve(outcome.value);
      else waiting.reject(outcome.error);
    });
  }
}
