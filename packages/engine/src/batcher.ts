// Group commit at the engine: calls that arrive while a batch is being written wait and form the next
// batch, one transaction each. It knows nothing of decisions; engine.ts says what a batch does.
//
// One batch runs at a time, so the in-memory projection (projection.ts) changes only when a batch has
// committed. When a batch fails as a whole, its calls run again one by one: a call that fails alone
// then fails alone, and the others still get their answers.

/** What running one batch gives each of its items: a value, or the error that item alone met. */
export type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

export class Batcher<T, R> {
  readonly #queue: Array<{ item: T; resolve: (value: R) => void; reject: (error: unknown) => void }> = [];
  #running = false;

  constructor(
    private readonly run: (items: readonly T[]) => Promise<Outcome<R>[]>,
    private readonly maxBatch: number,
  ) {}

  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      if (!this.#running) {
        this.#running = true;
        // On the next turn, so that calls made together (Promise.all) share the first batch too.
        queueMicrotask(() => void this.#drain());
      }
    });
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const batch = this.#queue.splice(0, this.maxBatch);
        let outcomes: Outcome<R>[];
        try {
          outcomes = await this.run(batch.map((waiting) => waiting.item));
        } catch (error) {
          if (batch.length === 1) {
            outcomes = [{ ok: false, error }];
          } else {
            outcomes = [];
            for (const waiting of batch) {
              try {
                outcomes.push(...(await this.run([waiting.item])));
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
    } finally {
      this.#running = false;
    }
  }
}
