// Runs a generator of steps synchronously while each step's value is at hand, and awaits only a step
// that yields a promise. Not a scheduler and not a general coroutine library: evaluate's step alone.
//
// Why: evaluate judges a call on the in-memory projection, where every read and held write is already
// a plain value; written as an async function, every await (and every async store call behind it)
// still made a promise and a microtask turn, dozens a decision, for values that were already there.
// Written as a generator (`yield x` where it would `await x`), a call whose rows are all in memory
// runs from decide to signed entry in one synchronous stretch, and one that needs the store (a row
// the projection lacks, a HITL request to insert, an expiry) awaits exactly those steps.

/** A step function: `yield` a value or a promise where an async function would `await` it. */
// biome-ignore lint/suspicious/noExplicitAny: what a yield hands back differs per step; each call site names its type
export type Steps<R> = Generator<unknown, R, any>;

/** What a step function returns when it is done. */
export type StepsResult<S> = S extends Steps<infer R> ? R : never;

/** The generator's result, synchronously when no step yielded a promise; otherwise a promise of it. */
export function runSteps<R>(steps: Steps<R>): R | Promise<R> {
  let step = steps.next();
  while (!step.done) {
    if (step.value instanceof Promise) return finish(steps, step.value);
    step = steps.next(step.value);
  }
  return step.value;
}

async function finish<R>(steps: Steps<R>, first: Promise<unknown>): Promise<R> {
  let pending = first;
  for (;;) {
    let outcome: { ok: true; value: unknown } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, value: await pending };
    } catch (error) {
      outcome = { ok: false, error };
    }
    // A rejected step is thrown into the generator at its yield, as an await would throw it there.
    let step = outcome.ok ? steps.next(outcome.value) : steps.throw(outcome.error);
    while (!step.done && !(step.value instanceof Promise)) step = steps.next(step.value);
    if (step.done) return step.value;
    pending = step.value as Promise<unknown>;
  }
}
