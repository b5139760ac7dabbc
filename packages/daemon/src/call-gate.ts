// Group commit across connections: a PreExec waits a moment when sessions answered just before are about
// to call again, so their calls reach the engine's batcher together and share one transaction. Not the batcher.
//
// Inside the daemon each call arrives in an I/O callback of its own, and the engine's batcher cuts a
// batch as soon as it is idle: with the agents' processes answering one after another, nearly every
// call found the engine idle and went alone, paying a whole transaction (BEGIN, COMMIT, fsync) for one
// decision. This gate knows what the batcher cannot: which sessions are in a tight loop (their last
// call came back within LOOP_MS of its answer) and have been answered but not called again yet. A
// call that arrives while such sessions are out is held until they have all called or MAX_HOLD_MS has
// passed, then every held call goes at once. A lone call (no other session in a tight loop) goes at
// once; an agent that runs a tool between calls is never waited for.

/** The longest a call is held for the others; what group commit may add to a loaded call's latency. */
export const MAX_HOLD_MS = 2;
/** A session whose last call came back within this long of its answer is expected back about as quickly. */
export const LOOP_MS = 100;
/** Sessions in a tight loop tracked at once; past it a newly answered session is not waited for. */
export const MAX_LOOPING = 512;
/** Sessions whose last answer time is kept (for the gap of their next call); past it the oldest go. */
const MAX_TRACKED = 16_384;

export interface CallGateOptions {
  readonly maxHoldMs?: number;
  readonly loopMs?: number;
  /** Milliseconds, monotonic; default performance.now. */
  readonly now?: () => number;
}

/** Figures for tests and benchmarks: how calls went through. */
export interface CallGateStats {
  /** Calls that went at once, nobody being expected. */
  readonly direct: number;
  /** Calls that were held, and holds that ended. */
  readonly held: number;
  readonly holds: number;
  /** Holds that ended because every session waited for had called (the others ran out of time). */
  readonly complete: number;
}

export class CallGate {
  readonly #maxHoldMs: number;
  readonly #loopMs: number;
  readonly #now: () => number;
  /** Session → when its last answer went out (absent while it has a call in, or never answered). */
  readonly #answeredAt = new Map<string, number>();
  /** Answered sessions whose last call came back quickly: when answered, and how quickly it came back. */
  readonly #looping = new Map<string, { at: number; gap: number }>();
  /** Sessions with a call in whose gap (answer to this call) was within loopMs: looping once answered. */
  readonly #quick = new Map<string, number>();
  /** The sessions the open hold waits for; null when no call is held. */
  #awaited: Set<string> | null = null;
  #held: Array<() => void> = [];
  #timer: ReturnType<typeof setTimeout> | null = null;
  #stats = { direct: 0, held: 0, holds: 0, complete: 0 };
  readonly #expire = () => this.#flush(false);

  constructor(options: CallGateOptions = {}) {
    this.#maxHoldMs = options.maxHoldMs ?? MAX_HOLD_MS;
    this.#loopMs = options.loopMs ?? LOOP_MS;
    this.#now = options.now ?? (() => performance.now());
  }

  get stats(): CallGateStats {
    return { ...this.#stats };
  }

  /**
   * A call of `sessionId` is ready for the engine: undefined when it may go now, else a promise that
   * resolves when it may (at most maxHoldMs later). Call `answered` once its answer is out.
   */
  enter(sessionId: string): Promise<void> | undefined {
    const now = this.#now();
    const last = this.#answeredAt.get(sessionId);
    this.#answeredAt.delete(sessionId);
    this.#looping.delete(sessionId);
    // Marked looping for its next answer: this call came back within loopMs of the last one's.
    if (last !== undefined && now - last <= this.#loopMs) this.#quick.set(sessionId, now - last);
    else this.#quick.delete(sessionId);
    if (this.#awaited !== null) {
      this.#awaited.delete(sessionId);
      const go = this.#hold();
      if (this.#awaited.size === 0) this.#flush(true);
      return go;
    }
    const awaited = this.#expected(now);
    if (awaited.size === 0) {
      this.#stats.direct++;
      return undefined;
    }
    this.#awaited = awaited;
    this.#stats.holds++;
    this.#timer = setTimeout(this.#expire, this.#maxHoldMs);
    return this.#hold();
  }

  /** The answer to a call of `sessionId` is out: if it is in a tight loop, its next call is expected. */
  answered(sessionId: string): void {
    const now = this.#now();
    if (this.#answeredAt.size >= MAX_TRACKED) {
      const oldest = this.#answeredAt.keys().next().value as string;
      this.#answeredAt.delete(oldest);
      this.#looping.delete(oldest);
      this.#quick.delete(oldest);
    }
    this.#answeredAt.set(sessionId, now);
    const gap = this.#quick.get(sessionId);
    if (gap !== undefined && this.#looping.size < MAX_LOOPING) this.#looping.set(sessionId, { at: now, gap });
  }

  /**
   * The looping sessions expected within the hold: each is expected about as long after its answer as
   * its last call came back (from half to twice that). One past twice is forgotten as looping.
   */
  #expected(now: number): Set<string> {
    const awaited = new Set<string>();
    const until = now + this.#maxHoldMs;
    for (const [session, due] of this.#looping) {
      if (now > due.at + 2 * due.gap + this.#maxHoldMs) this.#looping.delete(session);
      else if (due.at + due.gap / 2 <= until) awaited.add(session);
    }
    return awaited;
  }

  #hold(): Promise<void> {
    this.#stats.held++;
    return new Promise<void>((resolve) => this.#held.push(resolve));
  }

  /** Lets every held call go, in the order they came (they reach the batcher in one microtask run). */
  #flush(complete: boolean): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#awaited = null;
    if (complete) this.#stats.complete++;
    const held = this.#held;
    this.#held = [];
    for (const go of held) go();
  }
}
